"""The config of ``appliance bench e2e``'s appliance runs, and their cameras as the config file's ``cameras:``
entries: the runs and the detector-plus-decode baseline decode the same sources with the same settings."""

from __future__ import annotations

from pathlib import Path

import yaml

from appliance.capture.config import CameraConfig

# Each camera's analytics in the --analytics run (normalized, so independent of the frame size): every class,
# a zone over most of the frame (the sample video's objects, whose bottom centres sit at 0.6..0.9 of its height,
# enter it at every change of image, sit in it past the dwell time, and exit when their tracks are lost), a line
# at 0.8 of the height (some bottom edges jitter across it while the picture zooms), and a snapshot per frame
# that raised events.
ANALYTICS = """
    analytics:
      zones:
        - {name: floor, units: normalized, points: [[0.1, 0.1], [0.9, 0.1], [0.9, 0.95], [0.1, 0.95]], dwell_s: 1.0}
      lines:
        - {name: sill, units: normalized, a: [0.0, 0.8], b: [1.0, 0.8], in_side: right}
      snapshots: {enabled: true}
"""
# Each camera's recording in the --record runs: the footage stays well under a gigabyte, whatever the disk's space.
RECORD = """    record: {enabled: true, min_free_gb: 0, retain: {max_gb: 1}}
"""


def cameras_yaml(video: Path, cameras: int, fps: float, record: bool = False, analytics: bool = False) -> str:
    """``cameras`` entries ``cam0``.. playing ``video`` (a file, or a folder of images) in a loop at ``fps``, in
    real time, at 640x480; with RECORD and ANALYTICS when asked."""
    return "".join(f"""
  - id: cam{n}
    source: {{type: {'images' if video.is_dir() else 'file'}, path: {video}, loop: true, realtime: true}}
    width: 640
    height: 480
    fps: {fps}
{RECORD if record else ""}{ANALYTICS if analytics else ""}""" for n in range(cameras))


def camera_configs(video: Path, cameras: int, fps: float) -> list[CameraConfig]:
    """The cameras of a plain run (no recording, no analytics), validated as the appliance validates them."""
    return [CameraConfig.model_validate(entry) for entry in yaml.safe_load(cameras_yaml(video, cameras, fps))]


def appliance_config(workdir: Path, shm_root: Path, port: int, cameras: str, engines_dir: Path | None,
                     sections: str) -> str:
    """One run's config file: the device, its paths under ``workdir``, ``cameras`` (``cameras_yaml``), the broker
    on ``port``, then ``sections`` as they are."""
    engines = f", engines_dir: {engines_dir}" if engines_dir else ""
    return f"""
device: {{id: bench}}
paths: {{state_dir: {workdir / 'state'}, shm_root: {shm_root}{engines}}}
cameras:{cameras}
mqtt: {{host: 127.0.0.1, port: {port}}}
{sections}"""
