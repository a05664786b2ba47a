"""The ``restream:`` section: RTSP out of every camera's picture, plain and annotated (docs/restream.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from appliance.config.base import StrictModel

Encoder = Literal["auto", "x264", "openh264", "nvv4l2"]


class RestreamConfig(StrictModel):
    """Served on the health endpoint's address: loopback needs no login, anything else the page's users."""

    enabled: bool = Field(False, description="serve rtsp://<device>:<port>/<camera> and /<camera>/annotated")
    port: int = Field(8554, ge=1, le=65535, description="the RTSP server's TCP port")
    annotated: bool = Field(True, description="also serve /<camera>/annotated: boxes, track ids, zones and lines "
                            "with their counts drawn")
    fps: float = Field(10.0, gt=0, le=60, description="frames per second sent to a client; the newest inferred "
                       "frame is repeated where inference runs slower")
    bitrate_kbps: int = Field(2000, ge=100, le=50_000, description="the H.264 encoder's target bit rate")
    encoder: Encoder = Field("auto", description="auto: the device's choice, as the recorder's (the Jetson's "
                             "nvv4l2h264enc where present, else x264enc, else openh264enc)")
