"""The bundle manifest: everything the device needs to know about a model version, covered by the signature.

The manifest is JSON (``manifest.json`` in the bundle); the signature is over its exact bytes, so nothing in
it can change without invalidating the signature. Files in the bundle are listed with SHA-256 and size.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from appliance.config import StrictModel
from appliance.detector.buildprofile import EngineProfile
from appliance.detector.profile import ModelProfile
from appliance.ota.errors import OtaRejected

FORMAT = 1
MANIFEST_NAME = "manifest.json"
SIGNATURE_NAME = "manifest.sig"
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")


class FileEntry(StrictModel):
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the file, lower-case hex")
    size: int = Field(ge=0, description="size in bytes")


class ExpectedDetection(StrictModel):
    class_name: str = Field(min_length=1, description="class name from the model profile")
    score: float = Field(ge=0, le=1)
    box: tuple[float, float, float, float] = Field(description="x1, y1, x2, y2 in frame pixels")


class GoldenFrame(StrictModel):
    file: str = Field(description="image path inside the bundle (JPEG/PNG)")
    expected: list[ExpectedDetection] = Field(default_factory=list, description="empty = nothing must be seen")


class GoldenTolerance(StrictModel):
    """Detections match when class names agree, IoU >= min_iou and |score diff| <= score_abs."""

    min_iou: float = Field(0.5, gt=0, le=1, description="IoU a detection must reach with its expected box")
    score_abs: float = Field(0.1, ge=0, le=1, description="allowed absolute score difference")
    max_missing: int = Field(0, ge=0, description="expected detections that may be unmatched per frame")
    max_extra: int = Field(0, ge=0, description="unexpected detections allowed per frame")


def version_key(version: str) -> tuple[Any, ...]:
    """Sort key for dotted versions ("0.10.1" > "0.9"); non-numeric parts sort as strings after numbers."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.\-]", version))


_ORDERABLE = re.compile(r"^[0-9]{1,18}(\.[0-9]{1,18}){0,7}$")


def version_order(version: str) -> tuple[int, ...] | None:
    """The order of bundle versions, for the anti-rollback floor: dotted numbers compared part by part as integers
    ("10" > "9", "2024.05.1" > "2024.4", "1.0" == "1": trailing zeros do not count); None for a version that is
    not dotted numbers ("2.0-rc1", "beta"), which cannot be ordered and is refused."""
    if not _ORDERABLE.match(version):
        return None
    parts = [int(p) for p in version.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


class Manifest(StrictModel):
    format: int = Field(FORMAT, ge=1, le=FORMAT, description="manifest format; newer formats are refused")
    model: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", description="model name")
    version: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", description="this bundle's version")
    min_appliance_version: str = Field("0", pattern=r"^[0-9]+(\.[0-9]+)*$",
                                       description="oldest appliance release that can run this model")
    description: str = Field("", max_length=1000)
    onnx: str = Field("model.onnx", description="the detector ONNX inside the bundle")
    model_profile: ModelProfile = Field(description="pre/post-processing (repository/profiles format): "
                                                    "input, head, class names, thresholds, limits")
    engine_profile: EngineProfile = Field(description="engine build profile (engines/ format); its 'onnx' is "
                                                      "replaced by the staged file on the device")
    golden: list[GoldenFrame] = Field(default_factory=list, description="frames with expected detections")
    golden_tolerance: GoldenTolerance = Field(default_factory=GoldenTolerance)
    calibration: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$",
                                    description="a folder of real frames for int8 calibration (and held-out gate "
                                                "frames); its files are in 'files'")
    files: dict[str, FileEntry] = Field(description="every other file in the bundle, with hash and size")

    @field_validator("files")
    @classmethod
    def _paths(cls, files: dict[str, FileEntry]) -> dict[str, FileEntry]:
        for name in files:
            if not _SAFE_PATH.match(name) or ".." in name.split("/") or name in (MANIFEST_NAME, SIGNATURE_NAME):
                raise ValueError(f"file name {name!r} is not a safe relative path")
        return files

    @model_validator(mode="after")
    def _consistent(self) -> "Manifest":
        if self.onnx not in self.files:
            raise ValueError(f"onnx {self.onnx!r} is not listed in files")
        missing = [g.file for g in self.golden if g.file not in self.files]
        if missing:
            raise ValueError(f"golden frames not listed in files: {missing}")
        known = set(self.model_profile.classes)
        for g in self.golden:
            unknown = sorted({d.class_name for d in g.expected} - known)
            if unknown:
                raise ValueError(f"golden frame {g.file}: classes {unknown} are not in model_profile.classes")
        engine_golden = self.engine_profile.verify.golden
        if engine_golden is not None and engine_golden not in self.files:
            raise ValueError(f"engine_profile.verify.golden {engine_golden!r} is not listed in files (golden engine "
                             "inputs travel in the bundle)")
        if self.calibration is not None:
            if ".." in self.calibration.split("/"):
                raise ValueError(f"calibration {self.calibration!r} is not a safe relative path")
            if not any(name.startswith(self.calibration.rstrip("/") + "/") for name in self.files):
                raise ValueError(f"calibration folder {self.calibration!r} has no files listed in files")
        if self.engine_profile.model != self.model:
            raise ValueError(f"engine_profile.model {self.engine_profile.model!r} differs from model {self.model!r}")
        return self

    def canonical_bytes(self) -> bytes:
        return (json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n").encode()

    @property
    def label(self) -> str:
        return f"{self.model}@{self.version}"


def parse_manifest(data: bytes) -> Manifest:
    """Validate manifest bytes (after the signature check); every problem names the field."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise OtaRejected("corrupt", f"{MANIFEST_NAME} is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise OtaRejected("invalid_manifest", f"{MANIFEST_NAME} must be a JSON object")
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors())
        raise OtaRejected("invalid_manifest", problems) from None
