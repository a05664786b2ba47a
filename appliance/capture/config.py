"""Camera configuration: one :class:`CameraConfig` per camera, its source a discriminated union on ``type:``.

The models only check what can be checked anywhere (shapes, bounds, cross-field rules). Checks that
depend on this machine (a file exists, ``gst-launch-1.0`` is installed, /dev/shm is big enough) live in
:mod:`appliance.capture.check` so ``appliance check-config`` can report them without starting anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal, Union

from pydantic import Field, field_validator, model_validator

from appliance.analytics.config import AnalyticsConfig
from appliance.backoff import BackoffConfig as BaseBackoffConfig
from appliance.capture.recordconfig import RecordConfig
from appliance.config.base import StrictModel
from appliance.config.ids import Id
from appliance.config.redact import redact_credentials
from appliance.errors import ApplianceError

PixelFormat = Literal["bgr", "rgb"]
DECODE_THREADS_HELP = ("FFmpeg decoder threads. 1: each frame leaves the decoder as soon as its packet is in, at the "
                       "least CPU per frame. N > 1: frame threads hold N-1 frames back (a frame period each) and "
                       "cost more CPU in all; for a stream one core cannot decode in time. 0: one per core")
#: Source types whose own compressed packets are kept when recording is on (capture/sources/pyav.py); the
#: others are encoded from their frames (capture/recording/encoder.py).
RECORDED_SOURCES = ("file", "rtsp")


class SizeNotResolved(ApplianceError, RuntimeError):
    """A camera's frame size was asked for before it was read from its source."""


class V4l2Source(StrictModel):
    """A USB/V4L2 camera opened through OpenCV's V4L2 backend."""

    type: Literal["v4l2"]
    device: str = Field("/dev/video0",
                        description="device node, e.g. /dev/video0 (or /dev/v4l/by-id/... for a stable name)")
    fourcc: Literal["MJPG", "YUYV", "UYVY", "H264", "GREY", "NV12"] | None = Field(
        None, description="pixel format the camera should send; None keeps the driver default"
    )

    @field_validator("device")
    @classmethod
    def _device_is_a_node(cls, value: str) -> str:
        if not value.startswith("/dev/"):
            raise ValueError(f"device must be a /dev path such as /dev/video0, got {value!r}")
        return value


class RtspSource(StrictModel):
    """An RTSP or HTTP(S) stream decoded by OpenCV's FFmpeg backend."""

    type: Literal["rtsp"]
    url: str = Field(description="rtsp://, rtsps://, http:// or https:// URL, credentials included if needed")
    transport: Literal["tcp", "udp"] = Field("tcp", description="RTSP transport; tcp survives lossy networks better")
    open_timeout_s: float = Field(10.0, gt=0, le=120, description="give up connecting after this long")
    decode_threads: int = Field(1, ge=0, le=16, description=DECODE_THREADS_HELP)

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        if value.split("://", 1)[0].lower() not in {"rtsp", "rtsps", "http", "https"} or "://" not in value:
            raise ValueError(f"url must start with rtsp://, rtsps://, http:// or https://, got "
                             f"{redact_credentials(value)!r}")
        return value


class FileSource(StrictModel):
    """A video file, for demos and tests."""

    type: Literal["file"]
    path: Path = Field(description="video file readable by FFmpeg")
    loop: bool = Field(True, description="start again at the end instead of reconnecting")
    realtime: bool = Field(True, description="pace frames at the camera fps (or the file's own rate)")
    decode_threads: int = Field(1, ge=0, le=16, description=DECODE_THREADS_HELP)


class ImagesSource(StrictModel):
    """A folder of still images played as a video, for demos and tests."""

    type: Literal["images"]
    path: Path = Field(description="folder of .jpg/.jpeg/.png/.bmp files, played in name order")
    loop: bool = Field(True, description="start again after the last image")
    realtime: bool = Field(True, description="pace images at the camera fps (needs fps)")


class GStreamerSource(StrictModel):
    """Any GStreamer pipeline (CSI cameras via nvarguscamerasrc, GigE via aravissrc...).

    The pipeline is run by ``gst-launch-1.0`` in a child process; the capture appends
    ``videoconvert ! video/x-raw,format=BGR|RGB,width=W,height=H ! fdsink`` itself, so give it the part
    up to the decoded video, without a sink.
    """

    type: Literal["gstreamer"]
    pipeline: str = Field(min_length=1, description="gst-launch-1.0 pipeline up to decoded video, without a sink")

    @field_validator("pipeline")
    @classmethod
    def _no_sink(cls, value: str) -> str:
        if "sink" in value.split("!")[-1]:
            raise ValueError("pipeline must not end in a sink; capture appends its own conversion and fdsink")
        return value


Source = Annotated[
    Union[V4l2Source, RtspSource, FileSource, ImagesSource, GStreamerSource], Field(discriminator="type")
]


class BackoffConfig(BaseBackoffConfig):
    """Reconnect delays: initial * factor**attempt, capped at max, then spread by +/- jitter (which may take a
    capped delay above max, so cameras at the cap still spread out)."""

    order_message: ClassVar[str] = "backoff max_s ({max_s}) must be >= initial_s ({initial_s})"

    initial_s: float = Field(0.5, gt=0, le=60, description="first delay after a failure")
    max_s: float = Field(30.0, gt=0, le=3600, description="longest delay")
    factor: float = Field(2.0, ge=1, le=10, description="growth per consecutive failure")
    jitter: float = Field(0.2, ge=0, le=1, description="relative random spread so cameras do not retry in lockstep")


class CameraConfig(StrictModel):
    """One camera: where frames come from and the shared-memory ring they land in."""

    id: Id = Field(description="unique camera id; names the shm ring")
    source: Source
    width: int | None = Field(None, ge=16, le=7680, description="frame width in the ring, pixels; absent (with "
                              "height): the source's own size, read when the appliance starts")
    height: int | None = Field(None, ge=16, le=4320, description="frame height in the ring, pixels; absent (with "
                               "width): the source's own size")
    pixel_format: PixelFormat = Field("bgr", description="channel order of frames in the ring")
    fps: float | None = Field(None, gt=0, le=240, description="target rate: pacing for files/images, cap for live")
    resize: bool = Field(False, description="scale frames of another size; False makes a size mismatch an error")
    ring_slots: int = Field(4, ge=3, le=64, description="slots in the ring; needs max concurrent leases + 2")
    stall_timeout_s: float = Field(10.0, ge=0.2, le=600, description="no frame for this long means stalled")
    max_decode_errors: int = Field(25, ge=1, le=10_000, description="consecutive bad reads before reconnecting")
    backoff: BackoffConfig = Field(default_factory=BackoffConfig)
    analytics: AnalyticsConfig | None = Field(
        None, description="tracking, zones, lines, events, counts and snapshots (docs/analytics.md); absent: off")
    record: RecordConfig = Field(default_factory=RecordConfig, description="keep the camera's footage for event "
                                 "clips (docs/capture.md, \"Recording and event clips\"); off by default")

    @property
    def frame_size(self) -> tuple[int, int]:
        """(width, height) of the ring's frames. A camera configured without a size has one only once
        ``appliance.capture.probe.resolve_sizes`` read it from the source, at start."""
        if self.width is None or self.height is None:
            raise SizeNotResolved(f"camera {self.id!r}: its size is read from the source when the appliance starts")
        return self.width, self.height

    @model_validator(mode="after")
    def _size_given_whole(self) -> "CameraConfig":
        if (self.width is None) != (self.height is None):
            raise ValueError("give width and height together, or neither to take the source's own size")
        if self.width is None and isinstance(self.source, GStreamerSource):
            raise ValueError("a gstreamer source needs width and height (the appliance sets the pipeline's caps)")
        if self.width is None and self.analytics is not None:
            pixels = [z.name for z in self.analytics.zones if z.units == "pixels"] + \
                [line.name for line in self.analytics.lines if line.units == "pixels"]
            if pixels:
                raise ValueError(f"{', '.join(map(repr, pixels))} use pixel points, which need the frame size: give "
                                 "width and height, or draw them with units: normalized")
        return self

    @model_validator(mode="after")
    def _paced_images_need_fps(self) -> "CameraConfig":
        if isinstance(self.source, ImagesSource) and self.source.realtime and self.fps is None:
            raise ValueError("an images source with realtime: true needs fps (images carry no frame rate)")
        return self

    @model_validator(mode="after")
    def _stall_longer_than_a_frame(self) -> "CameraConfig":
        if self.fps is not None and self.stall_timeout_s <= 1.0 / self.fps:
            raise ValueError(
                f"stall_timeout_s ({self.stall_timeout_s}) must be longer than one frame at fps {self.fps} "
                f"({1.0 / self.fps:.3g}s), or every frame gap would count as a stall"
            )
        return self
