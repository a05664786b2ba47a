"""Jetson / NVIDIA GPU hosts: a TensorRT plan built through TensorRT's Python API (8.6 and 10.x).

Parse the ONNX, apply the profile (precision, one optimization profile over the batch range, workspace pool,
DLA core with GPU fallback, builder optimization level, a persistent timing cache) and build a serialized
network with a progress monitor, each step a function; ``trt_runner`` runs the plan for the I/O check and
verification."""

from __future__ import annotations

import importlib.util
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from appliance.detector.engines.builders.base import BuilderUnavailable, BuildError, BuildProgress
from appliance.detector.engines.builders.trt_runner import TrtRunner
from appliance.durable import write_file_durably
from appliance.detector.calibration.frames import FrameSet
from appliance.detector.engines.onnxinfo import OnnxInfo, TensorSpec
from appliance.detector.buildprofile import EngineProfile, TensorRTProfile
from appliance.detector.engines.verify import GoldenInputError, input_shape

log = logging.getLogger("appliance.engines.tensorrt")


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


class _Calibrator:
    """Builds an IInt8EntropyCalibrator2 subclass lazily (the base class exists only where tensorrt does)."""

    @staticmethod
    def create(trt: Any, batches: list[dict[str, np.ndarray]], cache_path: Path) -> Any:
        from appliance.detector.engines.builders.cuda import CudaRuntime

        class Calibrator(trt.IInt8EntropyCalibrator2):
            def __init__(self) -> None:
                trt.IInt8EntropyCalibrator2.__init__(self)
                self._cuda = CudaRuntime()
                self._batches = iter(batches)
                self._ptrs: dict[str, int] = {}
                self._batch_size = next(iter(batches[0].values())).shape[0] if batches else 1

            def get_batch_size(self) -> int:
                return self._batch_size

            def get_batch(self, names: list[str]) -> list[int] | None:
                feeds = next(self._batches, None)
                if feeds is None:
                    return None
                out = []
                for name in names:
                    arr = np.ascontiguousarray(feeds[name])
                    if name not in self._ptrs:
                        self._ptrs[name] = self._cuda.malloc(arr.nbytes)
                    self._cuda.copy_to_device(self._ptrs[name], arr)
                    out.append(self._ptrs[name])
                return out

            def read_calibration_cache(self) -> bytes | None:
                return cache_path.read_bytes() if cache_path.is_file() else None

            def write_calibration_cache(self, cache: Any) -> None:
                write_file_durably(cache_path, bytes(cache))

        return Calibrator()


@dataclass(frozen=True)
class _Network:
    """The parsed network and what must outlive it until the plan is serialized: the parser owns the network's
    weights, and the logger receives TensorRT's messages."""

    logger: Any
    builder: Any
    network: Any
    parser: Any


def _parse(trt: Any, onnx: OnnxInfo, progress: BuildProgress) -> _Network:
    """A builder, and the ONNX parsed into an explicit-batch network."""
    logger = _make_logger(trt)
    builder = trt.Builder(logger)
    if builder is None:
        raise BuilderUnavailable("TensorRT could not create a builder (no CUDA device?)")
    major = int(str(trt.__version__).split(".")[0])
    flags = 0 if major >= 10 else 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    progress(0.0, "parsing ONNX")
    if not parser.parse_from_file(str(onnx.path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise BuildError(f"TensorRT's ONNX parser rejected {onnx.path}: {errors or 'no details'}")
    return _Network(logger, builder, network, parser)


def _configure(trt: Any, builder: Any, settings: TensorRTProfile) -> Any:
    """The builder config: the workspace pool and, where this TensorRT has it, the optimization level."""
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, settings.workspace_mib << 20)
    if settings.optimization_level is not None and hasattr(config, "builder_optimization_level"):
        config.builder_optimization_level = settings.optimization_level
    return config


def _optimization_profile(net: _Network, config: Any, profile: EngineProfile) -> tuple[Any, dict[str, Any]]:
    """One optimization profile spanning the batch range, other dims from the ONNX or the profile; and its shapes
    per input, for the manifest."""
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
    return opt_profile, shapes


def _set_precision(trt: Any, net: _Network, config: Any, opt_profile: Any, onnx: OnnxInfo, profile: EngineProfile,
                   calibration: FrameSet | None, timing_dir: Path) -> None:
    """The precision flags; for INT8 without Q/DQ nodes, a calibrator on the real frames."""
    precision = profile.tensorrt.precision
    if precision in ("fp16", "int8"):
        if not getattr(net.builder, "platform_has_fast_fp16", True):
            log.warning("%s: this GPU has no fast FP16; building FP16 anyway as the profile asks", profile.model)
        config.set_flag(trt.BuilderFlag.FP16)  # INT8 engines use FP16 for layers that cannot be quantized
    if precision != "int8":
        return
    config.set_flag(trt.BuilderFlag.INT8)
    explicit_qdq = any(
        net.network.get_layer(j).type in (trt.LayerType.QUANTIZE, trt.LayerType.DEQUANTIZE)
        for j in range(net.network.num_layers)
    )
    if not explicit_qdq:
        batches = _calibration_batches(onnx, profile, calibration)
        assert calibration is not None  # _calibration_batches raised otherwise
        # The frames' hash is in the name: new frames must calibrate again, not read an old table.
        calib_path = timing_dir / f"{profile.model}-{profile.digest()[:12]}-{calibration.digest[:12]}.calib"
        config.int8_calibrator = _Calibrator.create(trt, batches, calib_path)
        config.set_calibration_profile(opt_profile)


def _calibration_batches(onnx: OnnxInfo, profile: EngineProfile,
                         calibration: FrameSet | None) -> list[dict[str, np.ndarray]]:
    """``calibration_batches`` batches of distinct real frames at the profile's opt batch size."""
    if calibration is None or not calibration.tensors:
        raise BuildError("tensorrt.precision int8 needs real calibration frames (profile calibration.sources) "
                         "or an ONNX with Q/DQ nodes")
    if len(onnx.inputs) != 1:
        raise BuildError(f"INT8 calibration from frames needs a single-input model; {onnx.path} has "
                         f"{len(onnx.inputs)}")
    batch = profile.batch.opt
    batches = calibration.batches(batch, profile.tensorrt.calibration_batches)
    if not batches:
        raise BuildError(f"{len(calibration.tensors)} calibration frame(s) cannot fill one batch of {batch}")
    if len(batches) < profile.tensorrt.calibration_batches:
        log.warning("%s: %d calibration frames fill %d of the %d batches asked for", profile.model,
                    len(calibration.tensors), len(batches), profile.tensorrt.calibration_batches)
    spec = onnx.inputs[0]
    return [{spec.name: np.ascontiguousarray(b, dtype=spec.dtype)} for b in batches]


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
        calibration: FrameSet | None = None,
    ) -> dict[str, Any]:
        trt = _trt()
        settings = profile.tensorrt
        net = _parse(trt, onnx, progress)
        config = _configure(trt, net.builder, settings)
        opt_profile, shapes = _optimization_profile(net, config, profile)
        _set_precision(trt, net, config, opt_profile, onnx, profile, calibration, timing_dir)
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
