"""What a reduced-precision build needs beyond the fp32 path: the model's pre/post profile, real calibration
frames (int8), held-out gate frames, and the verdict that combines the tensor check with the detection gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from appliance.detector.buildprofile import EngineProfile
from appliance.detector.calibration.frames import FrameSet, check_held_out, frame_set, model_profile_for
from appliance.detector.engines.gate import GateReport
from appliance.detector.engines.verify import VerificationReport
from appliance.detector.profile import ModelProfile


def calibration_frames(profile: EngineProfile, precision: str, models_root: Path, state_dir: Path,
                       model_profile: ModelProfile | None) -> FrameSet | None:
    """The real frames an int8 build calibrates on (None for other precisions); read before the build."""
    if precision != "int8":
        return None
    return frame_set(profile, "calibration", models_root, model_profile or model_profile_for(profile), state_dir)


def gate_frames(profile: EngineProfile, models_root: Path, model_profile: ModelProfile | None,
                calibration: FrameSet | None) -> tuple[ModelProfile, FrameSet]:
    """The held-out frames the gate runs on (read after the build, so a failed build reports its own error).
    Raises CalibrationError when the set is missing, unreadable, or shares a frame with calibration."""
    mp = model_profile or model_profile_for(profile)
    gate = frame_set(profile, "gate", models_root, mp)
    if calibration is not None:
        check_held_out(calibration, gate)
    return mp, gate


def verdict(precision: str, tensors: VerificationReport, gate: GateReport | None) -> dict[str, Any]:
    """The manifest's ``verification``: fp32 and fp16 must pass the tensor check; every non-fp32 engine must
    pass the gate. INT8 outputs differ element-wise by design, so for int8 the tensor check is kept for the
    record only and the gate decides."""
    out = tensors.to_dict()
    if gate is None:
        return out
    tensor_ok = tensors.passed or precision == "int8"
    out["tensor_check_required"] = precision != "int8"
    out["gate"] = gate.to_dict()
    out["passed"] = bool(tensor_ok and gate.passed)
    tensor_part = "" if precision == "int8" else f"{tensors.summary()}; "
    out["summary"] = f"{tensor_part}{gate.summary()}"
    return out
