"""The build's graph step: which graph the builder turns into an engine, with the model's pre/post inside.

``plan_wrap`` decides when to wrap: before the build (fp32, fp16), after quantizing (int8 on either builder, so every
added op stays float; the builder then takes the wrapped quantized model), or not at all (``in_graph: false``; a
graph that cannot be wrapped). A wrapped engine is verified against the original ONNX wrapped the same way with
ONNX's NMS (docs/engines.md, "The graph step")."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import onnx

from appliance.detector.buildprofile import EngineProfile
from appliance.detector.calibration.frames import CalibrationError, model_profile_for
from appliance.detector.profile import ModelProfile
from appliance.detector.repository.wrap import NmsKind, Unwrappable, WrapSpec, wrap_model
from appliance.durable import sha256_file

log = logging.getLogger(__name__)

When = Literal["before", "after", "none"]


@dataclass(frozen=True)
class WrapPlan:
    """Whether and when the build wraps the graph; ``spec`` is the engine's variant (its NMS kind)."""

    when: When
    spec: WrapSpec | None = None
    reason: str = ""

    def fingerprint_fields(self) -> dict[str, str]:
        """The spec's hash for the cache key (nothing when not wrapped, so those keys stay as they were)."""
        return {} if self.spec is None else {"in_graph_sha256": self.spec.digest()}


def plan_wrap(profile: EngineProfile, builder: str, precision: str,
              model_profile: ModelProfile | None) -> WrapPlan:
    if not profile.in_graph:
        return WrapPlan("none", reason="in_graph is off in the engine profile")
    if profile.verify.golden:
        return WrapPlan("none", reason=f"verify.golden ({profile.verify.golden}) holds tensors for the network's "
                                       "own input, which a wrapped graph does not take")
    if model_profile is None:
        try:
            model_profile = model_profile_for(profile)
        except CalibrationError as exc:
            return WrapPlan("none", reason=f"no model profile for the pre/post settings ({exc})")
    nms: NmsKind = "trt" if builder == "tensorrt" else "onnx"
    return WrapPlan("after" if precision == "int8" else "before", WrapSpec.from_profile(model_profile, nms=nms))


@dataclass(frozen=True)
class BuildSources:
    """``build``: what the builder reads (for int8, what is quantized first); ``reference``: the graph verification
    runs in ONNX Runtime (its I/O is the engine's); ``after``: the spec to wrap the quantized model with;
    ``details``: for the manifest."""

    build: Path
    reference: Path
    after: WrapSpec | None
    details: dict[str, object]


def _write(src: Path, dst: Path, spec: WrapSpec) -> None:
    onnx.save(wrap_model(onnx.load(str(src)), spec), str(dst))


def prepare(onnx_path: Path, plan: WrapPlan, workdir: Path, model: str) -> BuildSources:
    """Write the wrapped graphs into ``workdir``; an unwrappable model builds as it is (logged, with the reason)."""
    if plan.spec is None:
        log.info("%s: pre/post stay in the Python stages: %s", model, plan.reason)
        return BuildSources(onnx_path, onnx_path, None, {"applied": False, "reason": plan.reason})
    reference = workdir / "wrapped-reference.onnx"
    try:
        _write(onnx_path, reference, replace(plan.spec, nms="onnx"))
        build = onnx_path if plan.when == "after" else reference
        if plan.when == "before" and plan.spec.nms != "onnx":
            build = workdir / "wrapped.onnx"
            _write(onnx_path, build, plan.spec)
    except Unwrappable as exc:
        log.warning("%s: the graph cannot be wrapped, pre/post stay in the Python stages: %s", model, exc)
        return BuildSources(onnx_path, onnx_path, None, {"applied": False, "reason": str(exc)})
    log.info("%s: pre/post in the engine (wrapped %s, NMS: %s)", model,
             "after quantizing" if plan.when == "after" else "before the build", plan.spec.nms)
    return BuildSources(build, reference, plan.spec if plan.when == "after" else None, {
        "applied": True, "when": plan.when, "nms": plan.spec.nms, "spec_sha256": plan.spec.digest(),
        "graph_sha256": sha256_file(build if plan.when == "before" else reference)})
