"""Pixels → detector input tensor: channel order, scale/mean/std, layout and dtype in one pass per channel."""

from __future__ import annotations

import numpy as np


def to_tensor(image: np.ndarray, image_order: str, model_order: str, scale: float,
              mean: tuple[float, float, float], std: tuple[float, float, float],
              layout: str = "NCHW", dtype: str = "float32", out: np.ndarray | None = None) -> np.ndarray:
    """H×W×3 uint8 in ``image_order`` → [3,H,W] (NCHW) or [H,W,3] (NHWC) ``dtype``, ``(x*scale - mean) / std``.

    ``mean``/``std`` are given in the model's channel order. ``out`` (right shape and dtype) is filled in place.
    """
    h, w = image.shape[:2]
    src = [2, 1, 0] if image_order != model_order else [0, 1, 2]
    # (x*scale - mean)/std folded into one multiply-add per element.
    gain = [scale / s for s in std]
    bias = [-m / s for m, s in zip(mean, std)]
    shape = (3, h, w) if layout == "NCHW" else (h, w, 3)
    if out is None:
        out = np.empty(shape, dtype=np.float32)
    elif out.shape != shape:
        raise ValueError(f"out has shape {out.shape}, expected {shape}")
    for c in range(3):
        dst = out[c] if layout == "NCHW" else out[:, :, c]
        np.multiply(image[:, :, src[c]], np.float32(gain[c]), out=dst, casting="unsafe")
        if bias[c]:
            dst += np.float32(bias[c])
    return out if out.dtype == np.dtype(dtype) else out.astype(dtype)
