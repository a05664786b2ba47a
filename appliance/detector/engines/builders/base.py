"""What every engine builder provides; the registry of builders lives in ``__init__``."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Protocol

import numpy as np

from appliance.detector.buildprofile import EngineProfile
from appliance.detector.engines.onnxinfo import OnnxInfo, TensorSpec
from appliance.errors import ApplianceError

# Progress inside a build: (fraction 0..1 of the build phase, message).
BuildProgress = Callable[[float, str], object]


class BuilderUnavailable(ApplianceError, RuntimeError):
    """The builder's toolchain (tensorrt, a CUDA device, onnxruntime) is not present on this host."""


class BuildError(ApplianceError, RuntimeError):
    """The toolchain rejected the model or the profile; the message says which and why."""


class IOMismatchError(BuildError):
    """The built engine's inputs/outputs differ from the ONNX's (name, dtype, rank or static dim)."""


class EngineRunner(Protocol):
    """A loaded engine, for the I/O check and verification."""

    def io(self) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
        """(inputs, outputs) as the engine reports them; dims None where dynamic."""
        ...

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


class EngineBuilder(Protocol):
    name: str  # 'tensorrt' or 'onnxruntime'
    engine_file: str  # file name of the artifact inside the cache entry
    triton_kind: str  # what the model repository materializer is told: 'tensorrt_plan' or 'onnxruntime'

    def version(self) -> str: ...

    def device_fields(self) -> dict[str, str]:
        """Builder-specific fingerprint fields (GPU name and compute capability, ...)."""
        ...

    def precision(self, profile: EngineProfile) -> str: ...

    def build(
        self,
        onnx: OnnxInfo,
        profile: EngineProfile,
        out_path: Path,
        progress: BuildProgress,
        timing_dir: Path,
    ) -> dict[str, object]:
        """Write the engine to ``out_path``; return build details for the manifest. For int8, ``onnx`` is already
        the quantized (Q/DQ) model (appliance.detector.engines.quantize), the one both builders take."""
        ...

    def fallback(self, profile: EngineProfile) -> EngineProfile | None:
        """The profile to build instead when the detection gate refuses this precision (None: no fallback)."""
        ...

    def load(self, engine_path: Path, profile: EngineProfile) -> EngineRunner: ...


def check_io(onnx: OnnxInfo, runner: EngineRunner, profile: EngineProfile) -> None:
    """The engine must expose the ONNX's I/O by name, dtype and rank; static dims must agree; dynamic dims
    must admit the profile's batch range. Raises :class:`IOMismatchError` listing every difference."""
    inputs, outputs = runner.io()
    problems: list[str] = []
    for kind, want, got in (("input", onnx.inputs, inputs), ("output", onnx.outputs, outputs)):
        got_by_name = {t.name: t for t in got}
        want_names = {t.name for t in want}
        for extra in sorted(set(got_by_name) - want_names):
            problems.append(f"unexpected {kind} {extra!r}")
        for spec in want:
            have = got_by_name.get(spec.name)
            if have is None:
                problems.append(f"{kind} {spec.name!r} missing (engine has {sorted(got_by_name)})")
                continue
            # TensorRT < 10 has no int64 I/O and the ONNX parser narrows it to int32.
            if have.dtype != spec.dtype and (spec.dtype, have.dtype) != ("int64", "int32"):
                problems.append(f"{kind} {spec.name!r} dtype {have.dtype}, ONNX says {spec.dtype}")
            if len(have.dims) != len(spec.dims):
                problems.append(f"{kind} {spec.name!r} rank {len(have.dims)}, ONNX says {len(spec.dims)}")
                continue
            for axis, (h, w) in enumerate(zip(have.dims, spec.dims)):
                if h is not None and w is not None and h != w:
                    problems.append(f"{kind} {spec.name!r} dim {axis} is {h}, ONNX says {w}")
            if kind == "input" and have.dims and have.dims[0] is not None:
                b = profile.batch
                if not b.min == b.max == have.dims[0]:
                    problems.append(
                        f"input {spec.name!r} has a fixed batch {have.dims[0]}, profile wants {b.min}..{b.max}"
                    )
    if problems:
        raise IOMismatchError("engine I/O does not match the ONNX: " + "; ".join(problems))
