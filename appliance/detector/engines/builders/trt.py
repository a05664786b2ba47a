"""Jetson / NVIDIA GPU hosts: a TensorRT plan built through TensorRT's Python API (8.6 and 10.x).

Parse the ONNX, apply the profile (precision, one optimization profile over the batch range, workspace pool,
DLA core with GPU fallback, builder optimization level, a persistent timing cache) and build a serialized
network with a progress monitor, each step a function; ``trt_runner`` runs the plan for the I/O check and
verification. INT8 is explicit only: the build hands over the quantized (Q/DQ) model the ONNX Runtime path serves
too, never a calibrator (docs/engines.md, "INT8")."""

from __future__ import annotations

import importlib.util
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.detector.buildprofile import EngineProfile, TensorRTProfile
from appliance.detector.engines.builders.base import BuildError, BuilderUnavailable, BuildProgress
from appliance.detector.engines.builders.trt_runner import TrtRunner
from appliance.detector.engines.onnxinfo import OnnxInfo, TensorSpec
from appliance.detector.engines.verify import GoldenInputError, input_shape
from appliance.durable import write_file_durably

log = logging.getLogger(__name__)


def _trt() -> Any:
    try:
        import tensorrt
    except ImportError as exc:
        raise BuilderUnavailable("the tensorrt Python package is not installed (JetPack: python3-libnvinfer)") from exc
    return tensorrt


def tensorrt_present() -> bool:
    return importlib.util.find_spec("tensorrt") is not None


def _make_logger(trt: Any) -> Any:
    """A TensorRT logger that forwards to Python logging, so build errors reach the journal."""

    class _Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity: Any, msg: str) -> None:
            level = {
                trt.ILogger.INTERNAL_ERROR: logging.ERROR,
                trt.ILogger.ERROR: logging.ERROR,
                trt.ILogger.WARNING: logging.WARNING,
                trt.ILogger.INFO: logging.DEBUG,
            }.get(severity, logging.DEBUG)
            log.log(level, "TensorRT: %s", msg)

    return _Logger()


# The build fraction already reported when the native build starts; the monitor's phases fill the rest, so the
# percentage an operator watches never drops back when TensorRT's first phase starts at 0.
_NATIVE_BUILD_START = 0.05


def _make_monitor(trt: Any, progress: BuildProgress) -> Any | None:
    """TensorRT >= 8.6 reports optimizer phases; top-level phase steps become the build fraction."""
    if not hasattr(trt, "IProgressMonitor"):
        return None

    def report(fraction: float, phase_name: str) -> None:
        progress(_NATIVE_BUILD_START + (1.0 - _NATIVE_BUILD_START) * fraction, phase_name)

    class _Monitor(trt.IProgressMonitor):
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)
            self._steps: dict[str, tuple[str | None, int]] = {}

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            self._steps[phase_name] = (parent_phase, max(int(num_steps), 1))
            if parent_phase is None:
                report(0.0, phase_name)

        def step_complete(self, phase_name: str, step: int) -> bool:
            parent, steps = self._steps.get(phase_name, (None, 1))
            if parent is None:
                report(min((step + 1) / steps, 1.0), phase_name)
            return True  # False would cancel the build

        def phase_finish(self, phase_name: str) -> None:
            self._steps.pop(phase_name, None)

    return _Monitor()


@dataclass(frozen=True)
class _Network:
    """The parsed network and what must outlive it until the plan is serialized: the parser owns the network's
    weights, and the logger receives TensorRT's messages."""

    logger: Any
    builder: Any
    network: Any
    parser: Any
    strongly_typed: bool


def strongly_typed(trt: Any, precision: str) -> bool:
    """Whether an engine of ``precision`` is built as a strongly typed network: int8 on TensorRT >= 10, where every
    tensor's type comes from the Q/DQ model (NVIDIA's way for explicit quantization); weakly typed before that."""
    major = int(str(trt.__version__).split(".")[0])
    return precision == "int8" and major >= 10 and hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")


def _parse(trt: Any, onnx: OnnxInfo, progress: BuildProgress, precision: str) -> _Network:
    """A builder, and the ONNX parsed into an explicit-batch network (strongly typed for explicit int8 where this
    TensorRT has it)."""
    logger = _make_logger(trt)
    builder = trt.Builder(logger)
    if builder is None:
        raise BuilderUnavailable("TensorRT could not create a builder (no CUDA device?)")
    major = int(str(trt.__version__).split(".")[0])
    typed = strongly_typed(trt, precision)
    flags = 0 if major >= 10 else 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    if typed:
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    progress(0.0, "parsing ONNX")
    if not parser.parse_from_file(str(onnx.path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise BuildError(f"TensorRT's ONNX parser rejected {onnx.path}: {errors or 'no details'}")
    return _Network(logger, builder, network, parser, typed)


def _configure(trt: Any, builder: Any, settings: TensorRTProfile) -> Any:
    """The builder config: the workspace pool and, where this TensorRT has it, the optimization level."""
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, settings.workspace_mib << 20)
    if settings.optimization_level is not None and hasattr(config, "builder_optimization_level"):
        config.builder_optimization_level = settings.optimization_level
    return config


def _optimization_profile(net: _Network, config: Any, profile: EngineProfile) -> dict[str, Any]:
    """One optimization profile spanning the batch range, other dims from the ONNX or the profile; returns its
    shapes per input, for the manifest."""
    opt_profile = net.builder.create_optimization_profile()
    shapes: dict[str, dict[str, list[int]]] = {}
    for i in range(net.network.num_inputs):
        tensor = net.network.get_input(i)
        spec = TensorSpec(tensor.name, "float32", tuple(d if d >= 0 else None for d in tensor.shape))
        try:
            lo, mid, hi = (input_shape(spec, b, profile)
                           for b in (profile.batch.min, profile.batch.opt, profile.batch.max))
        except GoldenInputError as exc:
            raise BuildError(f"profile cannot shape input {tensor.name!r}: {exc}") from exc
        opt_profile.set_shape(tensor.name, lo, mid, hi)
        shapes[tensor.name] = {"min": list(lo), "opt": list(mid), "max": list(hi)}
    config.add_optimization_profile(opt_profile)
    return shapes


def _set_precision(trt: Any, net: _Network, config: Any, profile: EngineProfile) -> None:
    """The precision flags. INT8 needs Q/DQ nodes in the network: a strongly typed one takes its precisions from them
    and TensorRT refuses precision flags on it; a weakly typed one (TensorRT < 10) needs the INT8 flag, and FP16 for
    the layers the model keeps float."""
    precision = profile.tensorrt.precision
    if precision == "int8":
        explicit_qdq = any(net.network.get_layer(j).type in (trt.LayerType.QUANTIZE, trt.LayerType.DEQUANTIZE)
                           for j in range(net.network.num_layers))
        if not explicit_qdq:
            raise BuildError("tensorrt.precision int8 builds a quantized (Q/DQ) model; this network has no Q/DQ "
                             "layers (TensorRT's implicit INT8 calibration is not used)")
        if net.strongly_typed:
            return
        config.set_flag(trt.BuilderFlag.INT8)
    if precision in ("fp16", "int8"):
        if not getattr(net.builder, "platform_has_fast_fp16", True):
            log.warning("%s: this GPU has no fast FP16; building FP16 anyway as the profile asks", profile.model)
        config.set_flag(trt.BuilderFlag.FP16)


def _place_on_dla(trt: Any, builder: Any, config: Any, settings: TensorRTProfile) -> None:
    """The profile's DLA core, with GPU fallback if it asks; nothing without one."""
    if settings.dla_core is None:
        return
    cores = int(builder.num_DLA_cores)
    if settings.dla_core >= cores:
        raise BuildError(f"profile tensorrt.dla_core={settings.dla_core} but this device has {cores} DLA core(s)")
    config.default_device_type = trt.DeviceType.DLA
    config.DLA_core = settings.dla_core
    if settings.gpu_fallback:
        config.set_flag(trt.BuilderFlag.GPU_FALLBACK)


def _attach_timing_cache(config: Any, cache_path: Path, model: str) -> tuple[Any, bool]:
    """The timing cache saved at ``cache_path`` by an earlier build, else a new one; and whether it was reused."""
    blob = cache_path.read_bytes() if cache_path.is_file() else b""
    cache, reused = None, False
    if blob:
        try:
            cache = config.create_timing_cache(blob)
        except Exception:  # a truncated cache file (power loss) must not block the build
            cache = None
        reused = cache is not None and bool(config.set_timing_cache(cache, False))
        if not reused:
            log.warning("%s: timing cache %s is unreadable or does not match this device; starting a new one",
                        model, cache_path)
    if not reused:
        # Attach even an empty cache: without one TensorRT times into a local cache it drops after the
        # build, get_timing_cache() returns None, and nothing could be saved for the next build.
        cache = config.create_timing_cache(b"")
        config.set_timing_cache(cache, False)
    return cache, reused


def _serialize(net: _Network, config: Any, out_path: Path, model: str) -> None:
    """TensorRT's build (the long native call), the plan written to ``out_path``."""
    plan = net.builder.build_serialized_network(net.network, config)
    if plan is None:
        raise BuildError(f"TensorRT could not build {model}; see the TensorRT log lines above")
    with open(out_path, "wb") as fh:
        fh.write(memoryview(plan))


class TensorRTBuilder:
    name = "tensorrt"
    engine_file = "model.plan"
    triton_kind = "tensorrt_plan"

    def __init__(self) -> None:
        self._identity: dict[str, str] | None = None

    def version(self) -> str:
        return str(_trt().__version__)

    def device_fields(self) -> dict[str, str]:
        from appliance.detector.engines.builders.cuda import gpu_identity

        if self._identity is None:
            self._identity = gpu_identity()
        return dict(self._identity)

    def precision(self, profile: EngineProfile) -> str:
        return profile.tensorrt.precision

    def _timing_cache_path(self, timing_dir: Path) -> Path:
        ident = self.device_fields()
        safe = "".join(c if c.isalnum() else "_" for c in f"{ident['gpu_name']}-sm{ident['gpu_cc']}")
        return timing_dir / f"tensorrt-{self.version()}-{safe}.cache"

    def build(
        self,
        onnx: OnnxInfo,
        profile: EngineProfile,
        out_path: Path,
        progress: BuildProgress,
        timing_dir: Path,
    ) -> dict[str, Any]:
        trt = _trt()
        settings = profile.tensorrt
        net = _parse(trt, onnx, progress, settings.precision)
        config = _configure(trt, net.builder, settings)
        shapes = _optimization_profile(net, config, profile)
        _set_precision(trt, net, config, profile)
        _place_on_dla(trt, net.builder, config, settings)
        cache_path = self._timing_cache_path(timing_dir)
        # The parser (in net), the timing cache and the monitor stay referenced here until the plan is written.
        timing_cache, timing_reused = (_attach_timing_cache(config, cache_path, profile.model) if settings.timing_cache
                                       else (None, False))
        monitor = _make_monitor(trt, progress)
        if monitor is not None:
            config.progress_monitor = monitor
        progress(_NATIVE_BUILD_START,
                 f"building {settings.precision} engine (TensorRT {trt.__version__}; minutes on a Jetson)")
        start = time.monotonic()
        _serialize(net, config, out_path, profile.model)
        if settings.timing_cache:
            write_file_durably(cache_path, bytes(memoryview(config.get_timing_cache().serialize())))
        progress(1.0, "engine serialized")
        return {
            "tensorrt_version": str(trt.__version__),
            "precision": settings.precision,
            "network": "strongly typed" if net.strongly_typed else "weakly typed",
            "workspace_mib": settings.workspace_mib,
            "dla_core": settings.dla_core,
            "shapes": shapes,
            "timing_cache": str(cache_path) if settings.timing_cache else None,
            "timing_cache_reused": timing_reused,
            "build_engine_seconds": round(time.monotonic() - start, 3),
        }

    def fallback(self, profile: EngineProfile) -> EngineProfile | None:
        """The profile to build when the detection gate refuses this one; None when it is already the fallback."""
        settings = profile.tensorrt
        if settings.precision == settings.fallback or settings.precision == "fp32":
            return None
        return profile.model_copy(update={"tensorrt": settings.model_copy(update={"precision": settings.fallback})})

    def load(self, engine_path: Path, profile: EngineProfile) -> TrtRunner:
        trt = _trt()
        runtime = trt.Runtime(_make_logger(trt))
        if profile.tensorrt.dla_core is not None:
            runtime.DLA_core = profile.tensorrt.dla_core
        engine = runtime.deserialize_cuda_engine(engine_path.read_bytes())
        if engine is None:
            raise BuildError(f"{engine_path} does not deserialize with TensorRT {trt.__version__} (corrupt, or "
                             "built for another GPU/TensorRT)")
        runner = TrtRunner(trt, engine)
        runner._runtime = runtime  # type: ignore[attr-defined]  # the runtime must outlive the engine
        return runner
