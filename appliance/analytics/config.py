"""The ``analytics:`` section of one camera: which classes count, the tracker, zones, lines and dwell times.

It lives in the device config, not in an OTA bundle, so an integrator tunes it on site. The cross-field checks
here always raise a :class:`ConfigFieldError` naming the key; what needs the camera's frame size or the model's
class names is :func:`appliance.analytics.check.check_analytics`. Which side of a line ``in_side`` names:
docs/analytics.md, "Config"."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, Strict, model_validator

from appliance.analytics.geometry import polygon_problem
from appliance.config.base import ConfigFieldError, StrictModel
from appliance.config.ids import Id

Units = Literal["pixels", "normalized"]
Anchor = Literal["bottom_center", "center", "top_center"]
# A coordinate is a number: ``"10"`` is refused, not read as 10.0 (an int is a number).
Coordinate = Annotated[float, Strict()]
PointXY = tuple[Coordinate, Coordinate]
# Checked before any geometry (a zone's self-intersection check is quadratic in its points): docs/ui.md, "Limits".
MAX_POINTS = 256
MAX_ZONES = 32
MAX_LINES = 32


def _check_normalized(points: list[PointXY], key: str) -> None:
    for i, (x, y) in enumerate(points):
        if not (0 <= x <= 1 and 0 <= y <= 1):
            raise ConfigFieldError((key, i), f"normalized coordinates must be within 0..1, got [{x}, {y}]")


def _check_pixels(points: list[PointXY], key: str) -> None:
    for i, (x, y) in enumerate(points):
        if x < 0 or y < 0:
            raise ConfigFieldError((key, i), f"pixel coordinates must not be negative, got [{x}, {y}]")


class HysteresisConfig(StrictModel):
    """When a move across a line (or a zone's edge) counts: once the anchor is ``margin`` past it, or once it has
    stayed across for ``frames`` frames, whichever comes first. Until then the event waits, and being seen back
    on the old side cancels it: someone lingering on the line, whose box jitters across it, counts nothing."""

    margin: float = Field(0.2, ge=0, le=5, description="how far past the line (inside or outside the zone's edge) the "
                          "anchor must be, as a fraction of the box's height, so it scales with the object and the "
                          "resolution; 0 counts the first frame past")
    frames: int = Field(15, ge=1, le=10_000, description="or: across for this many of the camera's frames, "
                        "however close to the line (someone who stops just past it), each time seen still across "
                        "(frames it is lost in count); 1 counts the first frame")


class ZoneConfig(StrictModel):
    """A polygon; a track is in it while its anchor point is inside."""

    name: Id = Field(description="unique per camera; named in events and counts")
    units: Units = Field("pixels", description="points in frame pixels, or normalized 0..1 of the frame's width/height")
    points: list[PointXY] = Field(max_length=MAX_POINTS, description="polygon corners [x, y] in order, at least 3 "
                                  f"and at most {MAX_POINTS}; the last joins the first")
    dwell_s: float | None = Field(None, gt=0, le=86_400,
                                  description="a track inside longer than this raises one `dwell` event per stay")
    hysteresis: HysteresisConfig = Field(default_factory=HysteresisConfig,
                                         description="when an `enter` or `exit` counts (margin or frames)")

    @model_validator(mode="after")
    def _simple_polygon(self) -> "ZoneConfig":
        problem = polygon_problem(self.points)
        if problem is not None:
            raise ConfigFieldError(("points",), problem)
        if self.units == "normalized":
            _check_normalized(self.points, "points")
        else:
            _check_pixels(self.points, "points")
        return self


class LineConfig(StrictModel):
    """A directed segment a->b; a track whose anchor moves across it raises a `cross` event with a direction."""

    name: Id = Field(description="unique per camera; named in events and counts")
    units: Units = Field("pixels", description="points in frame pixels, or normalized 0..1 of the frame's width/height")
    a: PointXY = Field(description="start of the line [x, y]")
    b: PointXY = Field(description="end of the line [x, y]")
    in_side: Literal["left", "right"] = Field(
        description="which side of a->b is 'in', looking from a towards b on the picture as displayed (y down)")
    hysteresis: HysteresisConfig = Field(default_factory=HysteresisConfig,
                                         description="when a `cross` counts (margin or frames)")

    @model_validator(mode="after")
    def _two_points(self) -> "LineConfig":
        if self.a == self.b:
            raise ConfigFieldError(("b",), f"a line needs two different points, a and b are both {list(self.a)}")
        for key, point in (("a", self.a), ("b", self.b)):
            x, y = point
            if self.units == "normalized" and not (0 <= x <= 1 and 0 <= y <= 1):
                raise ConfigFieldError((key,), f"normalized coordinates must be within 0..1, got [{x}, {y}]")
            if self.units == "pixels" and (x < 0 or y < 0):
                raise ConfigFieldError((key,), f"pixel coordinates must not be negative, got [{x}, {y}]")
        return self


class TrackerConfig(StrictModel):
    """ByteTrack-class association (docs/analytics.md explains each stage)."""

    low_score: float = Field(0.1, ge=0, le=1, description="detections below this are ignored; between it and the "
                             "class's min_score they only keep existing tracks alive (second stage)")
    match_iou: float = Field(0.2, gt=0, le=1, description="first stage: least IoU between a track's predicted box and "
                             "a confident detection")
    low_match_iou: float = Field(0.5, gt=0, le=1, description="second stage: least IoU for a low-score detection")
    birth_iou: float = Field(0.3, gt=0, le=1, description="least IoU that continues a tentative (unconfirmed) track")
    birth_frames: int = Field(2, ge=1, le=100, description="consecutive frames a new track must be seen to be "
                              "confirmed (and get a track_id)")
    lost_frames: int = Field(30, ge=0, le=10_000, description="frames a confirmed track is kept after it was last "
                             "seen, to bridge occlusions; about 1 s of frames (ByteTrack: 30 at 30 fps, 10 at 10 fps)")
    buffer: float = Field(0.3, ge=0, le=2, description="boxes are grown by this fraction of their size on every side "
                          "before IoU (C-BIoU), so small or fast objects still overlap their prediction")
    class_aware: bool = Field(True, description="a track only matches detections of its own class")


class SnapshotConfig(StrictModel):
    """A JPEG of the frame that triggered an event, its boxes drawn from that frame (docs/analytics.md)."""

    enabled: bool = Field(True, description="encode a snapshot for each frame that raises events")
    max_width: int = Field(640, ge=64, le=7680, description="frames wider than this are scaled down to it")
    jpeg_quality: int = Field(80, ge=10, le=100, description="JPEG quality (OpenCV's IMWRITE_JPEG_QUALITY)")
    keep: int = Field(200, ge=1, le=100_000, description="snapshots kept on disk per camera (<state>/snapshots), "
                      "newest first; GET /events/<event_id>.jpg serves those")


class AnalyticsConfig(StrictModel):
    """One camera's analytics. ``classes`` maps each class name that counts to its minimum score."""

    classes: dict[str, float] | None = Field(
        None, description="allow-list: class name -> minimum score (0..1); absent = every class at min_score")
    min_score: float = Field(0.25, ge=0, le=1, description="minimum score of classes not named in `classes`")
    anchor: Anchor = Field("bottom_center", description="which point of a box decides zone membership and crossings")
    zones: list[ZoneConfig] = Field(default_factory=list, max_length=MAX_ZONES,
                                    description=f"at most {MAX_ZONES} zones per camera")
    lines: list[LineConfig] = Field(default_factory=list, max_length=MAX_LINES,
                                    description=f"at most {MAX_LINES} lines per camera")
    counts_interval_s: float = Field(60.0, gt=0, le=86_400, description="counts are published on change and at "
                                     "least this often")
    tracker: TrackerConfig = Field(default_factory=TrackerConfig)
    snapshots: SnapshotConfig = Field(default_factory=SnapshotConfig)

    @model_validator(mode="after")
    def _consistent(self) -> "AnalyticsConfig":
        for name, score in (self.classes or {}).items():
            if not 0 <= score <= 1:
                raise ConfigFieldError(("classes", name), f"minimum score of {name!r} must be within 0..1, got {score}")
        seen: dict[str, str] = {}
        named = [("zones", i, z.name) for i, z in enumerate(self.zones)] + \
            [("lines", i, ln.name) for i, ln in enumerate(self.lines)]
        for kind, i, name in named:
            if name in seen:
                raise ConfigFieldError((kind, i, "name"), f"name {name!r} is used twice (already a "
                                       f"{seen[name]}); zones and lines share one namespace per camera")
            seen[name] = kind[:-1]
        return self
