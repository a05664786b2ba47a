"""Engine build profiles: one YAML per model in ``engines/<model>.yaml``, read like every config file (errors
are ``FILE:LINE: key: message``; YAML merge keys work).

A profile says how to turn the model's ONNX into an engine for each builder (precision, batch range,
workspace, DLA core, timing cache) and how to verify the result. Its canonical hash is part of the cache key,
so editing a profile triggers a rebuild.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal, Sequence

from pydantic import Field, PrivateAttr, model_validator

from appliance.config import StrictModel
from appliance.config.validate import validate_document
from appliance.config.yamlsource import ConfigError, ConfigIssue, read_yaml
from appliance.errors import ApplianceError

Precision = Literal["fp32", "fp16", "int8"]


class ProfileError(ApplianceError, ValueError):
    """A profile file is missing, unparsable or invalid; the message names the file, line and field, one line per
    problem (``issues``: the config toolkit's ConfigIssues; none for a problem with a whole folder)."""

    def __init__(self, message: str, issues: Sequence[ConfigIssue] = ()) -> None:
        super().__init__(message)
        self.issues = list(issues)


class BatchRange(StrictModel):
    """The leading (batch) dimension of every input: the TensorRT optimization profile's min/opt/max."""

    min: int = Field(1, ge=1, le=4096, description="smallest batch the engine accepts")
    opt: int = Field(1, ge=1, le=4096, description="batch the engine is tuned for")
    max: int = Field(1, ge=1, le=4096, description="largest batch the engine accepts")

    @model_validator(mode="after")
    def _ordered(self) -> "BatchRange":
        if not self.min <= self.opt <= self.max:
            raise ValueError(f"batch must satisfy min <= opt <= max, got min={self.min} opt={self.opt} max={self.max}")
        return self


class Tolerance(StrictModel):
    """An element passes when |engine - reference| <= atol + rtol * |reference|."""

    atol: float = Field(..., ge=0, description="absolute tolerance")
    rtol: float = Field(..., ge=0, description="relative tolerance")
    max_mismatch: float = Field(
        0.0, ge=0, le=1, description="fraction of elements allowed outside the tolerance (for INT8 rounding flips)"
    )


def _default_tolerances() -> dict[Precision, Tolerance]:
    return {
        "fp32": Tolerance(atol=1e-4, rtol=1e-3),
        "fp16": Tolerance(atol=2e-2, rtol=2e-2, max_mismatch=0.001),
        "int8": Tolerance(atol=1e-1, rtol=1e-1, max_mismatch=0.01),
    }


class VerifyProfile(StrictModel):
    """Golden inputs and per-precision tolerances for checking a built engine against ONNX Runtime."""

    samples: int = Field(2, ge=1, le=64, description="golden input sets (seeded random in the input's range)")
    seed: int = Field(0, ge=0, description="seed for the golden inputs, so every device checks the same data")
    low: float = Field(0.0, description="lowest value of float golden inputs")
    high: float = Field(1.0, description="highest value of float golden inputs")
    golden: str | None = Field(
        None, description="optional .npz of real golden inputs (keys = input names), relative to the profile's folder"
    )
    tolerances: dict[Precision, Tolerance] = Field(default_factory=_default_tolerances)

    @model_validator(mode="after")
    def _range(self) -> "VerifyProfile":
        if self.high <= self.low:
            raise ValueError(f"verify.high ({self.high}) must be greater than verify.low ({self.low})")
        for precision, tol in _default_tolerances().items():
            self.tolerances.setdefault(precision, tol)
        return self


class TensorRTProfile(StrictModel):
    """Settings for the TensorRT builder (Jetson / NVIDIA GPU hosts)."""

    precision: Precision = Field("fp16", description="fp16 falls back to fp32 per layer where TensorRT must")
    workspace_mib: int = Field(1024, ge=16, le=65536, description="builder workspace memory pool limit")
    dla_core: int | None = Field(None, ge=0, le=7, description="run on this DLA core (Orin AGX/NX have 0 and 1)")
    gpu_fallback: bool = Field(True, description="layers the DLA cannot run fall back to the GPU")
    timing_cache: bool = Field(True, description="reuse and update a per-device timing cache across builds")
    optimization_level: int | None = Field(
        None, ge=0, le=5, description="builder optimization level (TensorRT >= 8.6); default: TensorRT's own (3)"
    )
    fallback: Precision = Field("fp16", description="built instead when the detection gate refuses the engine")

    @model_validator(mode="after")
    def _dla_precision(self) -> "TensorRTProfile":
        if self.dla_core is not None and self.precision == "fp32":
            raise ValueError("tensorrt.dla_core needs precision fp16 or int8: the DLA has no fp32 mode")
        return self


class OnnxRuntimeProfile(StrictModel):
    """Settings for the ONNX Runtime builder (CPU hosts): an ONNX graph optimized for this CPU."""

    precision: Literal["fp32", "int8"] = Field("fp32", description="fp32, or int8: static QDQ quantization")
    fallback: Literal["fp32"] = Field("fp32", description="built instead when the detection gate refuses int8")
    optimization_level: Literal["basic", "extended", "all"] = Field(
        "all", description="'all' adds layout transforms specific to this CPU's instruction set"
    )
    intra_op_threads: int = Field(0, ge=0, le=256, description="threads per operator; 0 lets ORT choose")


class QuantizationProfile(StrictModel):
    """How the one INT8 model both builders serve is made: a static QDQ model calibrated on real frames, in the
    form TensorRT builds (signed int8, zero points 0); ONNX Runtime serves it, TensorRT builds its plan from it."""

    calibration_method: Literal["minmax", "entropy", "percentile"] = Field(
        "percentile", description="activation ranges; percentile (99.999) kept the most detections on YOLOv3-tiny"
    )
    quantize_head: bool = Field(
        False, description="quantize the YOLO decode head too (collapses objectness on YOLOv3-tiny: tests only)"
    )
    float_nodes: list[str] = Field(
        default_factory=list, description="nodes kept in float besides the decode head (by node name; the layers a "
                                          "per-layer sensitivity scan finds worst, docs/engines.md)")


class FrameSource(StrictModel):
    """Real frames: an image, a folder of images, or a video (frames spread evenly over [start_s, end_s))."""

    path: str = Field(..., description="relative paths resolve against the models root (an OTA bundle's folder)")
    frames: int = Field(8, ge=1, le=4096, description="frames taken from a video (images: every one)")
    start_s: float = Field(0.0, ge=0, description="video: first second sampled")
    end_s: float | None = Field(None, gt=0, description="video: sampled up to this second (default: the end)")


class CalibrationProfile(StrictModel):
    """Where INT8 calibration frames come from; they pass through the inference preprocess (model profile)."""

    model_profile: str | None = Field(
        None, description="the model's pre/post profile, relative to this file; default repository/profiles/<model>"
    )
    sources: list[FrameSource] = Field(default_factory=list, description="sample images and videos")
    device_frames: int = Field(
        0, ge=0, le=4096, description="frames the device's own cameras keep in <state>/calibration/<model>"
    )
    device_spread_s: float = Field(
        30.0, ge=0, le=86400, description="at least this long between two frames kept from one camera"
    )
    max_frames: int = Field(64, ge=1, le=4096, description="at most this many frames are used")


class GateProfile(StrictModel):
    """Detection-level acceptance of a non-fp32 engine against the fp32 reference, on held-out frames."""

    sources: list[FrameSource] = Field(default_factory=list, description="verification frames (not calibration)")
    min_recall: float = Field(0.95, ge=0, le=1, description="share of the reference's detections found")
    min_precision: float = Field(0.95, ge=0, le=1, description="share of the candidate's detections that are right")
    max_score_diff: float = Field(0.1, ge=0, le=1, description="mean |score difference| over matched detections")
    iou: float = Field(0.5, gt=0, le=1, description="a match has the same class and at least this IoU")


class InputShape(StrictModel):
    """Non-batch dimensions of one input, for ONNX files whose inputs have other dynamic dims."""

    dims: list[int] = Field(..., min_length=0, description="dimensions after the batch dimension")

    @model_validator(mode="after")
    def _positive(self) -> "InputShape":
        if any(d < 1 for d in self.dims):
            raise ValueError(f"input dims must be positive, got {self.dims}")
        return self


class EngineProfile(StrictModel):
    """Everything needed to build and verify one model's engine."""

    model: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="model name (Triton detector)")
    onnx: str = Field(..., description="ONNX path; relative paths resolve against the models root")
    batch: BatchRange = Field(default_factory=BatchRange)
    inputs: dict[str, InputShape] = Field(default_factory=dict, description="fixes dynamic non-batch dims")
    tensorrt: TensorRTProfile = Field(default_factory=TensorRTProfile)
    onnxruntime: OnnxRuntimeProfile = Field(default_factory=OnnxRuntimeProfile)
    quantization: QuantizationProfile = Field(default_factory=QuantizationProfile)
    verify: VerifyProfile = Field(default_factory=VerifyProfile)
    calibration: CalibrationProfile = Field(default_factory=CalibrationProfile)
    gate: GateProfile = Field(default_factory=GateProfile)
    keep: int = Field(3, ge=1, le=50, description="installed engines kept per model by garbage collection")
    in_graph: bool = Field(
        True, description="build the model's pre/post (normalization, decode, NMS) into the engine where the graph "
                          "can be wrapped (appliance.detector.engines.ingraph); off, the Python stages do it")
    # Where the profile's YAML lives; not a field, so it stays out of the digest (moving engines/ is no rebuild).
    _directory: Path | None = PrivateAttr(None)

    @property
    def directory(self) -> Path | None:
        """The absolute folder of the file this profile was loaded from; None when it was built in memory."""
        return self._directory

    def located_in(self, directory: Path) -> "EngineProfile":
        """A copy whose relative paths (``verify.golden``) resolve against ``directory``."""
        located = self.model_copy()
        located._directory = Path(directory).absolute()
        return located

    def as_fp32(self) -> "EngineProfile":
        """A copy that builds fp32 on either builder (no calibration, no gate, no DLA): what is left when a reduced
        precision cannot be built on this device."""
        trt = self.tensorrt.model_copy(update={"precision": "fp32", "dla_core": None})
        ort = self.onnxruntime.model_copy(update={"precision": "fp32"})
        return self.model_copy(update={"tensorrt": trt, "onnxruntime": ort})

    def digest(self) -> str:
        """SHA-256 of the canonical JSON form: formatting and key order in the YAML do not matter."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def onnx_path(self, models_root: Path) -> Path:
        path = Path(self.onnx)
        return path if path.is_absolute() else models_root / path


def load_profile(path: Path) -> EngineProfile:
    """Read and validate one profile with the config toolkit (merge keys, ``x-`` anchor keys, no duplicate keys);
    every problem is ``FILE:LINE: key: message``, as for the appliance's own config."""
    try:
        profile = validate_document(read_yaml(Path(path), environ={}), EngineProfile)
    except ConfigError as exc:
        raise ProfileError(str(exc), exc.issues) from None
    # Absolute now: the build may run from another cwd (systemd's is /).
    return profile.located_in(Path(path).parent)


def load_profiles(engines_dir: Path, models: list[str] | None = None) -> list[EngineProfile]:
    """Every ``*.yaml`` in ``engines_dir`` (or only the named models), sorted by model name."""
    if not engines_dir.is_dir():
        raise ProfileError(f"{engines_dir}: engine profile directory does not exist")
    profiles = [load_profile(p) for p in sorted(engines_dir.glob("*.yaml"))]
    seen: dict[str, EngineProfile] = {}
    for profile in profiles:
        if profile.model in seen:
            raise ProfileError(f"{engines_dir}: model {profile.model!r} has more than one profile")
        seen[profile.model] = profile
    if models:
        missing = [m for m in models if m not in seen]
        if missing:
            raise ProfileError(f"{engines_dir}: no engine profile for {', '.join(missing)} (have: {', '.join(seen)})")
        return [seen[m] for m in models]
    return [seen[name] for name in sorted(seen)]
