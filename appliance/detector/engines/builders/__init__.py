"""Engine builders, chosen by name from an explicit registry; 'auto' picks TensorRT where it can run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Literal

from appliance.detector.engines.builders.base import (
    BuildError,
    BuilderUnavailable,
    EngineBuilder,
    EngineRunner,
    IOMismatchError,
    check_io,
)

BuilderName = Literal["auto", "tensorrt", "onnxruntime"]


def _tensorrt() -> EngineBuilder:
    from appliance.detector.engines.builders.trt import TensorRTBuilder, tensorrt_present

    if not tensorrt_present():
        raise BuilderUnavailable("builder 'tensorrt' needs the tensorrt Python package (JetPack: python3-libnvinfer)")
    return TensorRTBuilder()


def _onnxruntime() -> EngineBuilder:
    from appliance.detector.engines.builders.ort import OnnxRuntimeBuilder

    return OnnxRuntimeBuilder()


REGISTRY: dict[str, Callable[[], EngineBuilder]] = {"tensorrt": _tensorrt, "onnxruntime": _onnxruntime}

GPU_NODES = ("dev/nvidia0", "dev/nvhost-ctrl-gpu", "dev/nvgpu/igpu0/ctrl")


def gpu_visible(root: Path | str = "/") -> bool:
    """An NVIDIA discrete GPU or Jetson iGPU device node exists under ``root``."""
    return any(os.path.exists(Path(root) / node) for node in GPU_NODES)


def select_builder(name: BuilderName = "auto", root: Path | str = "/") -> EngineBuilder:
    """The named builder, or for 'auto' TensorRT when it is installed and a GPU is visible, else ONNX Runtime."""
    if name == "auto":
        from appliance.detector.engines.builders.trt import tensorrt_present

        name = "tensorrt" if tensorrt_present() and gpu_visible(root) else "onnxruntime"
    if name not in REGISTRY:
        raise BuilderUnavailable(f"unknown engine builder {name!r}; choose one of: auto, {', '.join(REGISTRY)}")
    return REGISTRY[name]()


__all__ = [
    "BuildError",
    "BuilderName",
    "BuilderUnavailable",
    "EngineBuilder",
    "EngineRunner",
    "IOMismatchError",
    "REGISTRY",
    "check_io",
    "gpu_visible",
    "select_builder",
]
