"""An engine build's phases and what each hands the next; ``run_phase`` is the one place a failure inside a phase
becomes an :class:`EngineBuildError` naming that phase."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from appliance.detector.buildprofile import EngineProfile
from appliance.detector.calibration.frames import CalibrationError, FrameSet
from appliance.detector.engines.builders.base import BuildError, BuilderUnavailable
from appliance.detector.engines.failures import EngineBuildError
from appliance.detector.engines.fingerprint import Fingerprint
from appliance.detector.engines.ingraph import BuildSources
from appliance.detector.engines.onnxinfo import OnnxInfo, OnnxModelError, TensorSpec
from appliance.detector.engines.progress import ProgressReporter
from appliance.detector.engines.verify import Feeds, GoldenInputError
from appliance.detector.profile import ModelProfile
from appliance.detector.repository.wrap import Unwrappable

T = TypeVar("T")


class BuildPhase(enum.Enum):
    """The steps of a build, in order; the value is the progress events' phase and ``EngineBuildError.phase``."""

    PARSE = "parse"
    BUILD = "build"
    VERIFY = "verify"
    INSTALL = "install"


# What ends a build as an EngineBuildError: a bad ONNX or golden input, the toolchain's refusal or absence, unreadable
# calibration frames, an OSError (a full disk writing the wrapped graphs), a built engine that cannot be wrapped.
PHASE_ERRORS = (OnnxModelError, GoldenInputError, BuildError, BuilderUnavailable, CalibrationError, OSError,
                Unwrappable)


def run_phase(phase: BuildPhase, model: str, reporter: ProgressReporter, step: Callable[[], T]) -> T:
    """``step()``. Any of PHASE_ERRORS it raises is reported as ``failed`` and raised again as an EngineBuildError
    naming ``phase``; anything else (the gate's refusal, a failed verification) passes through as it is."""
    try:
        return step()
    except PHASE_ERRORS as exc:
        reporter.report(model, "failed", 100, f"{phase.value}: {exc}")
        raise EngineBuildError(model, phase.value, str(exc)) from exc


@dataclass(frozen=True)
class BuildJob:
    """One build of one key in its own build directory, which is removed when the build ends, installed or not."""

    profile: EngineProfile
    onnx_path: Path
    fp: Fingerprint
    model_profile: ModelProfile | None
    build_dir: Path
    started: float  # the manager's monotonic clock when the build began

    @property
    def model(self) -> str:
        return self.profile.model

    @property
    def sources_dir(self) -> Path:
        """The wrapped graphs; inside the build dir, so a kill leaves one entry."""
        return self.build_dir / ".sources"


@dataclass(frozen=True)
class Parsed:
    """The parse phase's result. ``build_info``: the graph the builder reads; ``info``: the graph verification
    runs in ONNX Runtime (the same file unless the pre/post are wrapped in)."""

    precision: str
    sources: BuildSources
    build_info: OnnxInfo
    info: OnnxInfo
    samples: list[Feeds]
    calibration: FrameSet | None


@dataclass(frozen=True)
class Built:
    """The build phase's result: the engine file in the build directory and the details for the manifest."""

    engine_path: Path
    details: dict[str, object]


@dataclass(frozen=True)
class Verified:
    """An engine that passed verification (and the gate, where its precision has one): the verdict, its timing,
    and its I/O as the engine reports it."""

    checked: dict[str, Any]
    timing: dict[str, Any]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
