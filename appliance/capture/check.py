"""Machine-dependent checks for ``appliance check-config``: things the config models cannot know.

Each check returns readable problems instead of raising, so one run reports all of them. A source that is not
there now (an unplugged camera, a file not yet copied) is no problem but a warning: the camera waits for it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, Sequence

from appliance.capture.config import CameraConfig
from appliance.capture.layout import RingGeometry
from appliance.capture.ringdir import find_rings
from appliance.capture.ringfile import shm_free_bytes


def ring_bytes(camera: CameraConfig) -> int:
    """The ring's size; 0 for a camera whose frame size is read from its source at start (unknown here)."""
    if camera.width is None or camera.height is None:
        return 0
    return RingGeometry(*camera.frame_size, camera.ring_slots, camera.pixel_format).total_bytes


def check_camera(camera: CameraConfig) -> list[str]:
    """Problems with one camera's source on this machine that a restart cannot fix (a missing tool)."""
    src, name, problems = camera.source, f"camera {camera.id!r}", []
    if src.type == "gstreamer" and shutil.which("gst-launch-1.0") is None:
        problems.append(f"{name}: gstreamer source needs gst-launch-1.0 on PATH (apt install gstreamer1.0-tools)")
    return problems


def absent_source(camera: CameraConfig) -> str | None:
    """Why one camera's source is not there now (no device node, no file, an empty folder), or None.

    Not a problem: the appliance starts without it and the camera waits, picking it up when it appears.
    """
    src, name = camera.source, f"camera {camera.id!r}"
    waits = "the camera waits for it and starts when it appears"
    if src.type == "file" and not src.path.is_file():
        return f"{name}: video file {src.path} does not exist now; {waits}"
    if src.type == "images":
        from appliance.capture.sources.images import list_images

        if not src.path.is_dir():
            return f"{name}: image folder {src.path} does not exist now; {waits}"
        if not list_images(src.path):
            return f"{name}: image folder {src.path} has no .jpg/.jpeg/.png/.bmp files now; {waits}"
    if src.type == "v4l2" and not os.path.exists(src.device):
        return f"{name}: {src.device} does not exist now (unplugged?); {waits}"
    return None


def check_cameras(
    cameras: Sequence[CameraConfig], shm_root: Path | str = "/dev/shm", statvfs: Callable = os.statvfs
) -> list[str]:
    """Problems with a set of cameras: duplicate ids, each source, and /dev/shm room for every ring."""
    problems: list[str] = []
    seen: set[str] = set()
    for camera in cameras:
        if camera.id in seen:
            problems.append(f"camera id {camera.id!r} is used twice; ids name the shared-memory rings")
        seen.add(camera.id)
        problems += check_camera(camera)
    if not Path(shm_root).is_dir():
        return problems + [f"shared-memory root {shm_root} does not exist"]
    # Rings already there (a running or crashed appliance) are reused in place, so they need no new room.
    needed = sum(ring_bytes(c) for c in cameras if not find_rings(shm_root, c.id))
    free = shm_free_bytes(shm_root, statvfs)
    if needed > free:
        detail = ", ".join(f"{c.id}: {ring_bytes(c) / 2**20:.1f} MiB" if c.width else f"{c.id}: its source's size"
                           for c in cameras)
        problems.append(
            f"rings need {needed / 2**20:.1f} MiB in {shm_root} but only {free / 2**20:.1f} MiB is free ({detail}); "
            f"enlarge it (docker --shm-size, or mount -o remount,size=...) or lower ring_slots / resolution"
        )
    return problems
