"""Model profiles: what the pre/post stages need to know about a detector (repository/profiles/<model>.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from appliance.config import StrictModel


class InputSpec(StrictModel):
    width: int = Field(gt=0, le=8192, description="network input width in pixels")
    height: int = Field(gt=0, le=8192, description="network input height in pixels")
    stride: int = Field(32, gt=0, le=256,
                        description="the network's largest stride; width and height must be multiples")
    layout: Literal["NCHW", "NHWC"] = Field("NCHW", description="tensor layout the detector takes")
    channel_order: Literal["RGB", "BGR"] = Field("RGB", description="channel order the detector was trained on")
    resize: Literal["letterbox", "stretch"] = Field("letterbox", description="keep aspect (pad) or stretch")
    pad_value: int = Field(114, ge=0, le=255, description="letterbox border value (all channels)")
    scale: float = Field(1 / 255, gt=0, description="multiply pixel values by this first")
    mean: tuple[float, float, float] = Field((0.0, 0.0, 0.0), description="subtracted after scaling, in channel_order")
    std: tuple[float, float, float] = Field((1.0, 1.0, 1.0), description="divided after the mean, in channel_order")
    dtype: Literal["float32", "float16"] = Field("float32", description="detector input element type")

    @model_validator(mode="after")
    def _aligned(self) -> "InputSpec":
        if self.width % self.stride or self.height % self.stride:
            raise ValueError(f"width {self.width} and height {self.height} must be multiples of stride {self.stride}")
        if any(s <= 0 for s in self.std):
            raise ValueError(f"std values must be > 0, got {self.std}")
        return self


class HeadSpec(StrictModel):
    layout: Literal["rows_with_objectness", "channels_first"] = Field(
        description="rows_with_objectness: [N, 5+C] YOLOv3/v5/v7; channels_first: [4+C, N] YOLOv8/v11, no objectness")
    box_format: Literal["cxcywh", "xyxy"] = Field("cxcywh", description="how the 4 box numbers are given")
    box_units: Literal["pixels", "normalized"] = Field("pixels", description="input pixels or 0..1 of the input")


class Limits(StrictModel):
    max_width: int = Field(8192, gt=0, description="frames wider than this are rejected")
    max_height: int = Field(8192, gt=0, description="frames taller than this are rejected")
    max_encoded_bytes: int = Field(32 << 20, gt=0, description="encoded JPEG/PNG larger than this is rejected")


class Thresholds(StrictModel):
    score: float = Field(0.25, ge=0, le=1, description="minimum score for a detection")
    iou: float = Field(0.45, gt=0, le=1, description="NMS IoU above which the lower-scoring box of a class is dropped")
    max_detections: int = Field(100, gt=0, le=10000, description="keep at most this many, best first")
    per_class: dict[str, float] = Field(default_factory=dict, description="class name -> score threshold override")
    allow: list[str] | None = Field(None, description="only these class names are reported (default: all)")


class ModelProfile(StrictModel):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description="model name")
    input: InputSpec
    head: HeadSpec
    classes: list[str] = Field(min_length=1, description="class names, index = class id")
    thresholds: Thresholds = Field(default_factory=Thresholds)
    limits: Limits = Field(default_factory=Limits)

    @model_validator(mode="after")
    def _known_classes(self) -> "ModelProfile":
        known = set(self.classes)
        unknown = sorted(set(self.thresholds.per_class) - known)
        if unknown:
            raise ValueError(f"thresholds.per_class names unknown classes {unknown}")
        bad = {k: v for k, v in self.thresholds.per_class.items() if not 0 <= v <= 1}
        if bad:
            raise ValueError(f"thresholds.per_class values must be within 0..1, got {bad}")
        if self.thresholds.allow is not None:
            unknown = sorted(set(self.thresholds.allow) - known)
            if unknown:
                raise ValueError(f"thresholds.allow names unknown classes {unknown}")
        return self

    def class_thresholds(self) -> list[float]:
        """Per-class-id score thresholds (the global score where no override is given)."""
        return [self.thresholds.per_class.get(c, self.thresholds.score) for c in self.classes]

    def allowed_ids(self) -> list[int] | None:
        if self.thresholds.allow is None:
            return None
        allowed = set(self.thresholds.allow)
        return [i for i, c in enumerate(self.classes) if c in allowed]


def load_profile(path: Path) -> ModelProfile:
    """Load and validate a profile YAML; raises ``appliance.config.yamlsource.ConfigError`` naming line and field."""
    from appliance.config.validate import load_config

    return load_config(Path(path), ModelProfile, environ={})
