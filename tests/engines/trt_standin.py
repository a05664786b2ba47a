"""A recording stand-in for the `tensorrt` Python module, for test_engines_tensorrt_logic.py only.

TensorRT cannot run on a CI host without an NVIDIA GPU, so these few classes answer the calls that
appliance/detector/engines/builders/trt.py makes, the way TensorRT's Python API documents them, and keep what they were
given for the assertions. The parser reads the real ONNX (inputs, outputs, Q/DQ layers); the "build" drives the
progress monitor like TensorRT does and refuses what TensorRT refuses: precision flags on a strongly typed network
(TensorRT 10 stops the build with an API usage error), a calibrator (this stand-in has none: TensorRT 10.1
deprecated implicit quantization). TensorRT before 10 has no strongly typed flag. Nothing here optimizes or runs a
network.
"""

from __future__ import annotations

import importlib.machinery
import types
from dataclasses import dataclass, field
from typing import Any

TIMING_MAGIC = b"STANDIN-TIMING-CACHE"


@dataclass
class StandInGpu:
    """What the stand-in device offers and what the builder did to it."""

    version: str = "10.3.0"
    name: str = "Orin (stand-in)"
    dla_cores: int = 0
    parse_errors: list[str] = field(default_factory=list)
    plan: bytes | None = b"serialized plan"
    # recorded
    network: Any = None
    config: Any = None
    runtime: Any = None
    timing_blobs: list[bytes] = field(default_factory=list)  # what create_timing_cache was given


class ILogger:
    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = "INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE"

    def __init__(self) -> None:
        pass


class IProgressMonitor:
    def __init__(self) -> None:
        pass


class BuilderFlag:
    FP16, INT8, GPU_FALLBACK = "FP16", "INT8", "GPU_FALLBACK"


class MemoryPoolType:
    WORKSPACE = "WORKSPACE"


class DeviceType:
    GPU, DLA = "GPU", "DLA"


class LayerType:
    QUANTIZE, DEQUANTIZE, OTHER = "QUANTIZE", "DEQUANTIZE", "OTHER"


class NetworkDefinitionCreationFlag:
    """TensorRT 10's: EXPLICIT_BATCH is ignored there, STRONGLY_TYPED types every tensor from the network."""

    EXPLICIT_BATCH, STRONGLY_TYPED = 0, 1


class NetworkDefinitionCreationFlag8:
    """TensorRT 8.x's: no strongly typed networks."""

    EXPLICIT_BATCH = 0


class Network:
    def __init__(self, flags: int) -> None:
        self.flags = flags
        self.inputs: list[types.SimpleNamespace] = []
        self.outputs: list[str] = []
        self.layers: list[types.SimpleNamespace] = []

    @property
    def strongly_typed(self) -> bool:
        return bool(self.flags & (1 << NetworkDefinitionCreationFlag.STRONGLY_TYPED))

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    def get_input(self, i: int) -> types.SimpleNamespace:
        return self.inputs[i]

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def get_layer(self, i: int) -> types.SimpleNamespace:
        return self.layers[i]


class OnnxParser:
    def __init__(self, gpu: StandInGpu, network: Network, logger: ILogger) -> None:
        self._gpu, self._network, self._logger = gpu, network, logger

    def parse_from_file(self, path: str) -> bool:
        import onnx

        if self._gpu.parse_errors:
            for error in self._gpu.parse_errors:
                self._logger.log(ILogger.ERROR, error)  # type: ignore[attr-defined]  # the builder's subclass
            return False
        graph = onnx.load(path).graph
        weights = {t.name for t in graph.initializer}
        for vi in graph.input:
            if vi.name not in weights:
                dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in vi.type.tensor_type.shape.dim)
                self._network.inputs.append(types.SimpleNamespace(name=vi.name, shape=dims))
        self._network.outputs = [o.name for o in graph.output]
        kinds = {"QuantizeLinear": LayerType.QUANTIZE, "DequantizeLinear": LayerType.DEQUANTIZE}
        self._network.layers = [types.SimpleNamespace(type=kinds.get(n.op_type, LayerType.OTHER), op_type=n.op_type)
                                for n in graph.node]
        return True

    @property
    def num_errors(self) -> int:
        return len(self._gpu.parse_errors)

    def get_error(self, i: int) -> str:
        return self._gpu.parse_errors[i]


class OptimizationProfile:
    def __init__(self) -> None:
        self.shapes: dict[str, tuple[tuple[int, ...], ...]] = {}

    def set_shape(self, name: str, lo: Any, opt: Any, hi: Any) -> None:
        self.shapes[name] = (tuple(lo), tuple(opt), tuple(hi))


class TimingCache:
    """Serialized as MAGIC device builds: set_timing_cache refuses another device's, like TensorRT's header check."""

    def __init__(self, device: str, builds: int = 0) -> None:
        self.device, self.builds = device, builds

    def serialize(self) -> bytes:
        return b"%s %s %d" % (TIMING_MAGIC, self.device.encode(), self.builds)


class BuilderConfig:
    def __init__(self, gpu: StandInGpu) -> None:
        self._gpu = gpu
        self.flags: set[str] = set()
        self.pool_limits: dict[str, int] = {}
        self.profiles: list[OptimizationProfile] = []
        self.default_device_type = DeviceType.GPU
        self.DLA_core = -1
        self.builder_optimization_level = 3
        self.progress_monitor: Any = None
        self.timing_cache: TimingCache | None = None

    def set_flag(self, flag: str) -> None:
        self.flags.add(flag)

    def set_memory_pool_limit(self, pool: str, size: int) -> None:
        self.pool_limits[pool] = size

    def add_optimization_profile(self, profile: OptimizationProfile) -> int:
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def create_timing_cache(self, blob: bytes) -> TimingCache:
        blob = bytes(blob)
        self._gpu.timing_blobs.append(blob)
        if not blob:
            return TimingCache(self._gpu.name)
        magic, _, rest = blob.partition(b" ")
        device, _, builds = rest.rpartition(b" ")
        if magic != TIMING_MAGIC or not builds.isdigit():
            raise RuntimeError("Failed to deserialize the timing cache")
        return TimingCache(device.decode(), int(builds))

    def set_timing_cache(self, cache: TimingCache, ignore_mismatch: bool) -> bool:
        if cache.device != self._gpu.name and not ignore_mismatch:
            return False
        self.timing_cache = cache
        return True

    def get_timing_cache(self) -> TimingCache | None:
        return self.timing_cache  # None when none was attached: TensorRT then used a local one and dropped it


class Builder:
    platform_has_fast_fp16 = True

    def __init__(self, gpu: StandInGpu, logger: ILogger) -> None:
        self._gpu = gpu
        self._logger = logger
        self.num_DLA_cores = gpu.dla_cores

    def create_network(self, flags: int) -> Network:
        self._gpu.network = Network(flags)
        return self._gpu.network

    def create_builder_config(self) -> BuilderConfig:
        self._gpu.config = BuilderConfig(self._gpu)
        return self._gpu.config

    def create_optimization_profile(self) -> OptimizationProfile:
        return OptimizationProfile()

    def build_serialized_network(self, network: Network, config: BuilderConfig) -> bytes | None:
        precision_flags = config.flags & {BuilderFlag.FP16, BuilderFlag.INT8}
        if network.strongly_typed and precision_flags:
            message = ("IBuilder::buildSerializedNetwork: Error Code 3: API Usage Error (Parameter check failed, "
                       f"condition: !config.getFlag(BuilderFlag::k{min(precision_flags)}). )")
            self._logger.log(ILogger.ERROR, message)  # type: ignore[attr-defined]
            return None
        monitor = config.progress_monitor
        if monitor is not None:  # one top-level phase of 2 steps with a nested phase, as TensorRT nests them
            monitor.phase_start("Building engine", None, 2)
            monitor.phase_start("Tactic timing", "Building engine", 3)
            for step in range(3):
                monitor.step_complete("Tactic timing", step)
            monitor.phase_finish("Tactic timing")
            for step in range(2):
                monitor.step_complete("Building engine", step)
            monitor.phase_finish("Building engine")
        if config.timing_cache is not None:
            config.timing_cache.builds += 1  # tactics timed in this build join the cache
        return self._gpu.plan


class Runtime:
    def __init__(self, gpu: StandInGpu, logger: ILogger) -> None:
        self.DLA_core = -1
        self.deserialized: list[tuple[bytes, int]] = []
        gpu.runtime = self

    def deserialize_cuda_engine(self, data: bytes) -> None:
        self.deserialized.append((bytes(data), self.DLA_core))
        return None  # the stand-in has no engine to give: what TensorRT answers for a plan it cannot load


def make_tensorrt(gpu: StandInGpu) -> types.ModuleType:
    """A fresh `tensorrt` module bound to ``gpu``; put it in sys.modules with monkeypatch.setitem."""
    trt = types.ModuleType("tensorrt")
    trt.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)
    trt.__version__ = gpu.version  # type: ignore[attr-defined]
    for cls in (ILogger, IProgressMonitor, BuilderFlag, MemoryPoolType, DeviceType, LayerType,
                NetworkDefinitionCreationFlag):
        setattr(trt, cls.__name__, cls)
    if int(gpu.version.split(".")[0]) < 10:
        trt.NetworkDefinitionCreationFlag = NetworkDefinitionCreationFlag8  # type: ignore[attr-defined]
    trt.Builder = lambda logger: Builder(gpu, logger)  # type: ignore[attr-defined]
    trt.OnnxParser = lambda network, logger: OnnxParser(gpu, network, logger)  # type: ignore[attr-defined]
    trt.Runtime = lambda logger: Runtime(gpu, logger)  # type: ignore[attr-defined]
    return trt
