"""ONNX Runtime INT8: static QDQ quantization with per-channel weights, calibrated on real frames.

The decode head (everything after the last Conv on each path to an output: reshapes, sigmoids, grid offsets,
anchor exps, concats) stays in float. Quantizing it maps sigmoid outputs and pixel coordinates onto one
8-bit scale per tensor, which on YOLOv3-tiny collapsed objectness to a constant (docs/engines.md); the
detection gate exists to catch exactly that kind of damage.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np


class _FrameReader:
    """onnxruntime.quantization.CalibrationDataReader over preprocessed frames, one frame per batch."""

    def __init__(self, input_name: str, tensors: Sequence[np.ndarray]) -> None:
        self._input = input_name
        self._tensors = list(tensors)
        self._next = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._next >= len(self._tensors):
            return None
        tensor = self._tensors[self._next]
        self._next += 1
        return {self._input: tensor[None]}

    def rewind(self) -> None:
        self._next = 0


def head_nodes(model: Any) -> list[str]:
    """Names of the nodes past the last Conv of every path to a graph output (the decode head).

    A node is in the head when it leads to an output, is not a Conv, and no Conv lies downstream of it."""
    graph = model.graph
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    memo: dict[int, tuple[bool, bool]] = {}

    def downstream(node: Any) -> tuple[bool, bool]:
        """(reaches an output, a Conv is downstream or is this node)."""
        key = id(node)
        if key in memo:
            return memo[key]
        memo[key] = (False, False)  # cycles do not occur in ONNX graphs; this only guards recursion
        conv = node.op_type == "Conv"
        reaches = any(o in outputs for o in node.output)
        for out in node.output:
            for nxt in consumers.get(out, []):
                r, c = downstream(nxt)
                reaches, conv = reaches or r, conv or c
        memo[key] = (reaches, conv)
        return memo[key]

    return [n.name for n in graph.node if n.name and downstream(n) == (True, False)]


def quantize_int8(onnx_path: Path, out_path: Path, input_name: str, tensors: Sequence[np.ndarray],
                  quantize_head: bool = False, method: str = "percentile",
                  float_nodes: Sequence[str] = ()) -> dict[str, object]:
    """Write the QDQ-quantized model to ``out_path``; return what was done for the manifest. ``float_nodes``:
    more nodes kept in float (a name the graph lacks is a ValueError: a typo would silently quantize it)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory(dir=out_path.parent) as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        # Symbolic shape inference needs sympy, which the appliance does not ship; ONNX shape inference and
        # ORT's basic optimizations suffice for a CNN with static spatial dims.
        quant_pre_process(str(onnx_path), str(prepared), skip_symbolic_shape=True)
        model = onnx.load(str(prepared))
        known = {n.name for n in model.graph.node}
        unknown = [name for name in float_nodes if name not in known]
        if unknown:
            raise ValueError(f"onnxruntime.float_nodes names nodes the graph does not have: {unknown}")
        excluded = ([] if quantize_head else head_nodes(model)) + [n for n in float_nodes]
        quantize_static(
            str(prepared),
            str(out_path),
            _FrameReader(input_name, tensors),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            calibrate_method={"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                              "percentile": CalibrationMethod.Percentile}[method],
            nodes_to_exclude=excluded,
        )
    return {
        "quantization": f"static QDQ, per-channel int8 weights, uint8 activations ({method})",
        "calibration_frames": len(tensors),
        "float_nodes": excluded,
    }
