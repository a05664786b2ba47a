"""What a camera source needs from the service's systemd sandbox, and what a unit file would hide from it.

``systemd/appliance.service`` runs the appliance with ``DevicePolicy=closed``, ``PrivateTmp=``,
``ProtectHome=`` and a closed list of address families. Each source (and, for ``gstreamer``, each known
element of its pipeline) needs some of what that sandbox closes: a device node, nvargus-daemon's socket, a
network family, a readable path. :func:`needs` lists them for one source; :func:`gaps` reads a unit file's
text and says which of them it hides, each with the line to add. Pure: the unit text is an argument, so tests
hold the shipped unit against every documented source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from appliance.capture.config import FileSource, GStreamerSource, ImagesSource, RtspSource, Source, V4l2Source

ARGUS_SOCKET = "/tmp/argus_socket"
_NVMAP = ("/dev/nvmap", "/dev/nvhost-ctrl")
# Device nodes each Jetson GStreamer element opens (JetPack 6): NVMM buffers live in nvmap; nvvidconv and the
# camera path scale on the VIC; nvv4l2decoder drives NVDEC through its V4L2 node; nvjpegdec uses NVJPG;
# nvv4l2h264enc (the restream's encoder on a Jetson) drives NVENC through its V4L2 node.
_ELEMENT_DEVICES: dict[str, tuple[str, ...]] = {
    "nvarguscamerasrc": _NVMAP,
    "nvvidconv": (*_NVMAP, "/dev/nvhost-vic"),
    "nvv4l2decoder": (*_NVMAP, "/dev/nvhost-nvdec", "/dev/v4l2-nvdec"),
    "nvjpegdec": (*_NVMAP, "/dev/nvhost-nvjpg"),
    # NVENC, for recording a raw camera: its host1x node (a second one on boards with two) and its V4L2 node.
    "nvv4l2h264enc": (*_NVMAP, "/dev/nvhost-msenc", "/dev/nvhost-nvenc1", "/dev/v4l2-nvenc"),
}
_NETWORK_ELEMENTS = ("rtspsrc", "udpsrc", "tcpclientsrc", "souphttpsrc", "aravissrc", "uridecodebin", "rtmpsrc")
_FILE_ELEMENTS = ("filesrc", "multifilesrc")
_HIDDEN_BY = {"ProtectHome": ("/home", "/root", "/run/user"), "PrivateTmp": ("/tmp", "/var/tmp")}


@dataclass(frozen=True)
class Needs:
    """What one source opens outside the process: device nodes, unix sockets, address families, paths read."""

    devices: tuple[str, ...] = ()
    sockets: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()


# What the restream's Jetson encoder path (nvvidconv into NVMM, then nvv4l2h264enc) opens.
RESTREAM_NVENC = Needs(devices=(*_ELEMENT_DEVICES["nvvidconv"], "/dev/nvhost-msenc", "/dev/v4l2-nvenc"))


def _elements(pipeline: str) -> list[tuple[str, str]]:
    """(element name, its properties text) for each ``!``-separated part of a gst-launch pipeline."""
    parts = []
    for chunk in pipeline.split("!"):
        words = chunk.strip().split(None, 1)
        if words and "=" not in words[0] and not words[0].startswith(("video/", "audio/", "image/")):
            parts.append((words[0], words[1] if len(words) > 1 else ""))
    return parts


def needs(source: Source) -> Needs:
    """What ``source`` needs from the sandbox to open and read frames."""
    if isinstance(source, V4l2Source):
        return Needs(devices=(source.device,))
    if isinstance(source, RtspSource):
        return Needs(families=("AF_INET", "AF_INET6"))
    if isinstance(source, (FileSource, ImagesSource)):
        return Needs(paths=(str(source.path),))
    assert isinstance(source, GStreamerSource)
    devices: list[str] = []
    sockets: list[str] = []
    families: list[str] = []
    paths: list[str] = []
    for name, props in _elements(source.pipeline):
        devices.extend(d for d in _ELEMENT_DEVICES.get(name, ()) if d not in devices)
        if name == "nvarguscamerasrc":
            sockets.append(ARGUS_SOCKET)
        elif name == "v4l2src":
            match = re.search(r"\bdevice=(\S+)", props)
            devices.append(match.group(1) if match else "/dev/video0")
        elif name in _NETWORK_ELEMENTS:
            families.extend(f for f in ("AF_INET", "AF_INET6") if f not in families)
        elif name in _FILE_ELEMENTS:
            match = re.search(r"\blocation=(\S+)", props)
            if match:
                paths.append(match.group(1).strip("\"'"))
    return Needs(tuple(devices), tuple(sockets), tuple(families), tuple(paths))


def recording_needs(element: str) -> Needs:
    """What the recording encoder of a raw camera needs when it is the GStreamer ``element`` (a Jetson's
    ``nvv4l2h264enc``: nvvidconv into NVMM buffers, then NVENC); PyAV's CPU encoders need nothing."""
    from appliance.capture.recording.gstencoder import encoder_chain

    devices: list[str] = []
    for name, _ in _elements(" ".join(encoder_chain(element, 30))):
        devices.extend(d for d in _ELEMENT_DEVICES.get(name, ()) if d not in devices)
    return Needs(devices=tuple(devices))


def _settings(unit_text: str) -> dict[str, list[str]]:
    """Every ``Key=value`` of the unit's [Service] section, values in order (a key may repeat)."""
    settings: dict[str, list[str]] = {}
    section = ""
    for raw in unit_text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def _yes(settings: dict[str, list[str]], key: str) -> bool:
    values = settings.get(key, [])
    return bool(values) and values[-1].lower() in {"yes", "true", "1", "on", "read-only", "tmpfs"}


def _device_allowed(settings: dict[str, list[str]], device: str) -> bool:
    filtered = (_yes(settings, "PrivateDevices") or "DeviceAllow" in settings
                or settings.get("DevicePolicy", ["auto"])[-1] != "auto")
    if not filtered:
        return True  # no device list at all: systemd does not filter devices
    for value in settings.get("DeviceAllow", []):
        spec = value.split()[0]
        if spec == device:
            return True
        if spec == "char-video4linux" and re.fullmatch(r"/dev/(video\d+|v4l/.+)", device):
            return True
    return False


def _bound(settings: dict[str, list[str]], path: str) -> bool:
    """True when BindPaths=/BindReadOnlyPaths= makes ``path`` (or a folder above it) visible in the sandbox."""
    for key in ("BindPaths", "BindReadOnlyPaths"):
        for value in settings.get(key, []):
            for entry in value.split():
                source, _, rest = entry.lstrip("-+").partition(":")
                target = rest.split(":", 1)[0] if rest else source
                if PurePosixPath(path).is_relative_to(target):
                    return True
    return False


def gaps(unit_text: str, need: Needs) -> list[str]:
    """What the unit in ``unit_text`` hides from a source with ``need``; each item names the fix. Empty: fine."""
    settings = _settings(unit_text)
    found = []
    for device in need.devices:
        if not _device_allowed(settings, device):
            found.append(f"device {device} is not in DeviceAllow= (add: DeviceAllow={device} rw)")
    for socket in need.sockets:
        if _yes(settings, "PrivateTmp") and socket.startswith("/tmp/") and not _bound(settings, socket):
            found.append(f"{socket} is hidden by PrivateTmp= (add: BindPaths=-{socket})")
    families = " ".join(settings.get("RestrictAddressFamilies", [])).split()
    if _yes(settings, "PrivateNetwork") and need.families:
        found.append("the network is off (PrivateNetwork=yes)")
    elif families and not families[0].startswith("~"):
        found.extend(f"address family {f} is not in RestrictAddressFamilies="
                     for f in need.families if f not in families)
    for path in need.paths:
        for key, roots in _HIDDEN_BY.items():
            hidden = any(path == r or PurePosixPath(path).is_relative_to(r) for r in roots)
            if hidden and _yes(settings, key) and not _bound(settings, path):
                found.append(f"{path} is hidden by {key}= (move it, e.g. under /var/lib/appliance, or add "
                             f"BindReadOnlyPaths={path})")
    return found
