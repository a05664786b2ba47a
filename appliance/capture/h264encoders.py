"""Which H.264 encoder this device has, chosen the way the detector chooses its runtime: probe the device
(``/etc/nv_tegra_release``, as the detector's DeviceProbe reads it), then check the tool is really there; fall
back to the CPU with a log line.

On a Jetson: GStreamer's ``nvv4l2h264enc`` (NVENC). Elsewhere, or when that element is missing: PyAV's
``libx264`` (or ``libopenh264`` where the FFmpeg build lacks x264) for the recorder of raw cameras, GStreamer's
``x264enc`` (or ``openh264enc``) for the restream: :func:`device_encoder_element` is the one device choice.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

JETSON_ELEMENT = "nvv4l2h264enc"
CPU_CODECS = ("libx264", "libopenh264")
NVENC_NODES = ("nvhost-msenc", "v4l2-nvenc")
GST_INSPECT = "gst-inspect-1.0"


@dataclass(frozen=True)
class H264Encoder:
    """``kind`` "gstreamer": ``name`` is a GStreamer element; "pyav": an FFmpeg encoder name."""

    kind: str
    name: str


def gst_has_element(element: str, binary: str = GST_INSPECT) -> bool:
    exe = shutil.which(binary)
    if exe is None:
        return False
    try:
        return subprocess.run([exe, "--exists", element], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def l4t_release(root: Path | str = "/") -> str | None:
    """The first line of ``/etc/nv_tegra_release`` (a Jetson), or None."""
    try:
        text = (Path(root) / "etc/nv_tegra_release").read_text(errors="replace")
    except OSError:
        return None
    return (text.splitlines() or ["?"])[0].strip("# ").strip() or "?"


def cpu_encoder() -> H264Encoder:
    import av

    for name in CPU_CODECS:
        if name in av.codecs_available:
            return H264Encoder("pyav", name)
    raise RuntimeError(f"this FFmpeg build has none of the H.264 encoders {', '.join(CPU_CODECS)}")


def named_encoder(name: str) -> H264Encoder:
    """``name`` as configured: "auto" (:func:`choose_h264_encoder`), an FFmpeg encoder known to PyAV, else a
    GStreamer element if one by that name exists; anything else is tried (and fails) as an FFmpeg name."""
    import av

    if name == "auto":
        return choose_h264_encoder()
    if name not in av.codecs_available and gst_has_element(name):
        return H264Encoder("gstreamer", name)
    return H264Encoder("pyav", name)


def device_encoder_element(root: Path | str = "/", element: str = JETSON_ELEMENT) -> str | None:
    """The device's hardware H.264 encoder, the GStreamer ``element`` (NVENC), on a Jetson that has it and an
    NVENC device node; None: encode on the CPU (a Jetson without it says why: an Orin Nano has no NVENC). The one
    choice for every part that encodes: the recorder of raw cameras and the restream (appliance/restream)."""
    l4t = l4t_release(root)
    if l4t is None:
        return None
    if not any((Path(root) / "dev" / node).exists() for node in NVENC_NODES):
        log.warning("Jetson (%s) without NVENC (no /dev/%s): encoding (recordings, restream) on the CPU", l4t,
                    " or /dev/".join(NVENC_NODES))
    elif not gst_has_element(element):
        log.warning("Jetson (%s) without the GStreamer element %s: encoding (recordings, restream) on the CPU; "
                    "install nvidia-l4t-gstreamer for hardware encoding", l4t, element)
    else:
        return element
    return None


def choose_h264_encoder(root: Path | str = "/", element: str = JETSON_ELEMENT) -> H264Encoder:
    """The recorder's encoder: NVENC through GStreamer where :func:`device_encoder_element` finds it, else PyAV's
    CPU encoder."""
    found = device_encoder_element(root, element)
    return H264Encoder("gstreamer", found) if found is not None else cpu_encoder()
