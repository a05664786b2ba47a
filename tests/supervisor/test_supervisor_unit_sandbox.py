"""The shipped unit's sandbox lets every documented camera source through, and the check says what a unit hides.

The sources are the ones docs/capture.md and docs/jetson.md document (a USB camera, RTSP, files under the state
directory, a CSI camera through nvarguscamerasrc, hardware-decoded RTSP, GigE through aravissrc). Each negative
test removes one line from the real unit and expects the gap that line closed, so the check cannot pass vacuously.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter

from appliance.capture.config import Source
from appliance.capture.sandbox import ARGUS_SOCKET, RESTREAM_NVENC, Needs, gaps, needs, recording_needs

REPO = Path(__file__).resolve().parents[2]
UNIT = (REPO / "systemd" / "appliance.service").read_text()

CSI = "nvarguscamerasrc sensor-id=0 ! video/x-raw(memory:NVMM),width=1920,height=1080,framerate=30/1 ! nvvidconv"
RTSP_HW = ("rtspsrc location=rtsp://10.0.0.5/stream latency=200 ! rtph264depay ! h264parse ! nvv4l2decoder "
           "! nvvidconv")
GIGE = "aravissrc camera-name=Basler-1234 ! videoconvert"
DOCUMENTED = {
    "usb": {"type": "v4l2", "device": "/dev/video0"},
    "usb-by-id": {"type": "v4l2", "device": "/dev/v4l/by-id/usb-Logitech_C920-video-index0"},
    "rtsp": {"type": "rtsp", "url": "rtsp://10.0.0.5/stream"},
    "file": {"type": "file", "path": "/var/lib/appliance/models/sample/sample.mp4"},
    "images": {"type": "images", "path": "/var/lib/appliance/images"},
    "csi": {"type": "gstreamer", "pipeline": CSI},
    "rtsp-hw-decode": {"type": "gstreamer", "pipeline": RTSP_HW},
    "gige": {"type": "gstreamer", "pipeline": GIGE},
}


def _source(spec: dict) -> Source:
    return TypeAdapter(Source).validate_python(spec)


def _without(line: str) -> str:
    assert f"\n{line}\n" in UNIT, f"the unit no longer has {line!r}: update this test"
    return UNIT.replace(f"\n{line}\n", "\n")


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_shipped_unit_lets_every_documented_source_through(name: str) -> None:
    need = needs(_source(DOCUMENTED[name]))
    assert need != Needs(), f"{name}: a documented source needs something from the sandbox"
    assert gaps(UNIT, need) == []


def test_csi_needs_the_argus_socket_and_nvmm_devices() -> None:
    need = needs(_source(DOCUMENTED["csi"]))
    assert need.sockets == (ARGUS_SOCKET,)
    assert {"/dev/nvmap", "/dev/nvhost-vic"} <= set(need.devices)


def test_private_tmp_without_the_bind_hides_the_argus_socket() -> None:
    found = gaps(_without("BindPaths=-/tmp/argus_socket"), needs(_source(DOCUMENTED["csi"])))
    assert found == [f"{ARGUS_SOCKET} is hidden by PrivateTmp= (add: BindPaths=-{ARGUS_SOCKET})"]


@pytest.mark.parametrize("line, source, device", [
    ("DeviceAllow=/dev/nvmap rw", "csi", "/dev/nvmap"),
    ("DeviceAllow=/dev/nvhost-vic rw", "csi", "/dev/nvhost-vic"),
    ("DeviceAllow=/dev/nvhost-nvdec rw", "rtsp-hw-decode", "/dev/nvhost-nvdec"),
    ("DeviceAllow=char-video4linux rw", "usb", "/dev/video0"),
])
def test_a_missing_device_line_is_named(line: str, source: str, device: str) -> None:
    found = gaps(_without(line), needs(_source(DOCUMENTED[source])))
    assert f"device {device} is not in DeviceAllow= (add: DeviceAllow={device} rw)" in found


def test_network_sources_need_inet_families() -> None:
    unit = UNIT.replace("RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
                        "RestrictAddressFamilies=AF_UNIX AF_NETLINK")
    assert unit != UNIT
    for name in ("rtsp", "gige", "rtsp-hw-decode"):
        found = gaps(unit, needs(_source(DOCUMENTED[name])))
        assert "address family AF_INET is not in RestrictAddressFamilies=" in found


def test_a_video_under_home_is_hidden_by_protect_home() -> None:
    need = needs(_source({"type": "file", "path": "/home/operator/line1.mp4"}))
    assert gaps(UNIT, need) == ["/home/operator/line1.mp4 is hidden by ProtectHome= (move it, e.g. under "
                                "/var/lib/appliance, or add BindReadOnlyPaths=/home/operator/line1.mp4)"]


def test_shipped_unit_lets_the_restreams_jetson_encoder_through() -> None:
    assert gaps(UNIT, RESTREAM_NVENC) == []
    assert gaps(_without("DeviceAllow=/dev/v4l2-nvenc rw"), RESTREAM_NVENC) == [
        "device /dev/v4l2-nvenc is not in DeviceAllow= (add: DeviceAllow=/dev/v4l2-nvenc rw)"]


def test_the_jetson_recording_encoder_is_let_through_and_each_of_its_nodes_named() -> None:
    need = recording_needs("nvv4l2h264enc")
    assert {"/dev/nvhost-msenc", "/dev/v4l2-nvenc", "/dev/nvhost-vic", "/dev/nvmap"} <= set(need.devices)
    assert gaps(UNIT, need) == []
    for device in ("/dev/nvhost-msenc", "/dev/v4l2-nvenc"):
        found = gaps(_without(f"DeviceAllow={device} rw"), need)
        assert found == [f"device {device} is not in DeviceAllow= (add: DeviceAllow={device} rw)"]
    assert recording_needs("x264enc") == Needs()  # a CPU encoder opens no device
