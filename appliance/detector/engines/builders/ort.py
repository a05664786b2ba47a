"""CPU hosts: an ONNX graph optimized by ONNX Runtime for this CPU, saved with ``optimized_model_filepath``.

At level 'all' ORT applies layout transforms (NCHWc) chosen for this CPU's instruction set, which is why the
CPU model and flags are in the fingerprint. The saved model loads with optimizations disabled, since it is
already optimized.

``precision: int8`` is handed the quantized (Q/DQ) model the build made (appliance.detector.engines.quantize, the
same file TensorRT builds from) and keeps it as it is: it loads with ORT's optimizations on, which fuse the Q/DQ
pairs into integer kernels for this CPU.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Mapping

import numpy as np

from appliance.detector.buildprofile import EngineProfile
from appliance.detector.engines.builders.base import BuildError, BuilderUnavailable, BuildProgress
from appliance.detector.engines.onnxinfo import OnnxInfo, TensorSpec

log = logging.getLogger(__name__)

_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(int16)": "int16", "tensor(uint16)": "uint16",
    "tensor(int32)": "int32", "tensor(uint32)": "uint32", "tensor(int64)": "int64", "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}


def _ort():
    try:
        import onnxruntime
    except ImportError as exc:
        raise BuilderUnavailable("onnxruntime is not installed (pip install onnxruntime)") from exc
    return onnxruntime


def reference_session(onnx_path: Path, threads: int = 0):
    """ONNX Runtime on the original ONNX, basic optimizations only: the reference every engine is checked
    against."""
    ort = _ort()
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own Fail/InvalidGraph/... types
        raise BuildError(f"ONNX Runtime cannot load {onnx_path}: {exc}") from exc


class OrtRunner:
    def __init__(self, session) -> None:
        self._session = session

    def io(self) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
        def spec(arg) -> TensorSpec:
            dims = tuple(d if isinstance(d, int) and d > 0 else None for d in arg.shape)
            return TensorSpec(arg.name, _ORT_TYPES.get(arg.type, arg.type), dims)

        return (tuple(spec(a) for a in self._session.get_inputs()), tuple(spec(a) for a in self._session.get_outputs()))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self._session.get_outputs()]
        return dict(zip(names, self._session.run(names, dict(feeds))))

    def close(self) -> None:
        self._session = None


class OnnxRuntimeBuilder:
    name = "onnxruntime"
    engine_file = "model.onnx"
    triton_kind = "onnxruntime"

    def version(self) -> str:
        try:
            return importlib.metadata.version("onnxruntime")
        except importlib.metadata.PackageNotFoundError:
            return str(_ort().__version__)

    def device_fields(self) -> dict[str, str]:
        return {}  # the CPU model and flags come from DeviceProbe

    def precision(self, profile: EngineProfile) -> str:
        return profile.onnxruntime.precision

    def build(
        self,
        onnx: OnnxInfo,
        profile: EngineProfile,
        out_path: Path,
        progress: BuildProgress,
        timing_dir: Path,
    ) -> dict[str, object]:
        ort = _ort()
        settings = profile.onnxruntime
        if settings.precision == "int8":
            return self._keep_quantized(onnx, out_path, progress)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = {
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[settings.optimization_level]
        opts.optimized_model_filepath = str(out_path)
        opts.intra_op_num_threads = settings.intra_op_threads
        opts.log_severity_level = 3
        progress(0.1, f"optimizing for this CPU (level {settings.optimization_level})")
        start = time.monotonic()
        try:
            ort.InferenceSession(str(onnx.path), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise BuildError(f"ONNX Runtime rejected {onnx.path}: {exc}") from exc
        if not out_path.is_file() or out_path.stat().st_size == 0:
            raise BuildError(f"ONNX Runtime did not write the optimized model to {out_path}")
        # ORT writes the file with plain write(); make it durable before anyone relies on it.
        with open(out_path, "rb") as fh:
            os.fsync(fh.fileno())
        progress(1.0, "optimized model saved")
        return {
            "optimization_level": settings.optimization_level,
            "optimize_seconds": round(time.monotonic() - start, 3),
            "providers": ["CPUExecutionProvider"],
        }

    def fallback(self, profile: EngineProfile) -> EngineProfile | None:
        """The profile to build when the detection gate refuses this one; None when it is already fp32."""
        settings = profile.onnxruntime
        if settings.precision == settings.fallback:
            return None
        return profile.model_copy(update={"onnxruntime": settings.model_copy(update={"precision": settings.fallback})})

    def _keep_quantized(self, onnx: OnnxInfo, out_path: Path, progress: BuildProgress) -> dict[str, object]:
        """The quantized model is the engine: copied as it is, since ORT fuses its Q/DQ pairs when it loads it."""
        progress(0.5, "int8: the quantized model is the engine")
        shutil.copyfile(onnx.path, out_path)
        with open(out_path, "rb") as fh:
            os.fsync(fh.fileno())
        progress(1.0, "quantized model saved")
        return {"precision": "int8", "providers": ["CPUExecutionProvider"]}

    def load(self, engine_path: Path, profile: EngineProfile) -> OrtRunner:
        ort = _ort()
        opts = ort.SessionOptions()
        # A QDQ model needs ORT's fusions at load; the fp32 file is already optimized for this CPU.
        opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                                         if profile.onnxruntime.precision == "int8"
                                         else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        opts.intra_op_num_threads = profile.onnxruntime.intra_op_threads
        opts.log_severity_level = 3
        try:
            session = ort.InferenceSession(str(engine_path), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise BuildError(f"the optimized model {engine_path} does not load: {exc}") from exc
        return OrtRunner(session)
