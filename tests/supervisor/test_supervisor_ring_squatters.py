"""`appliance run` in a shared-memory root where another user got there first: what they put there (a directory
and links at the rings' names) changes nothing, and the rings go into a folder only the appliance's user can open."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from support.daemon import RunningDaemon, device_of, make_camera_dir, write_config
from support.mosquitto import Mosquitto
from support.subscriber import Subscriber

from appliance.capture.ringdir import DIR_PREFIX, find_rings

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("detector_onnx", "darknet_images")]


def test_squatters_in_the_shm_root_change_nothing(tmp_path: Path, broker: Mosquitto, shm_root: Path,
                                                  engine_seed: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    squatters = {
        "appliance-cam-line1.ring": lambda p: p.mkdir(mode=0o777),  # the configured camera's ring name
        "appliance-cam-ghost.ring": lambda p: p.symlink_to(victim),  # a stale-looking ring that is a link
        f"{DIR_PREFIX}squat": lambda p: p.symlink_to(tmp_path),  # a ring folder's name, as a link
    }
    for name, make in squatters.items():
        make(shm_root / name)
    config = write_config(tmp_path, broker, shm_root, make_camera_dir(tmp_path), engine_seed=engine_seed)
    subscriber = Subscriber(broker, f"appliance/{device_of(config)}/#")
    daemon = RunningDaemon(tmp_path, config, REPO)
    try:
        assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
        daemon.wait(lambda: subscriber.of_type("detections"), 120, "detections from line1")
        [ring] = find_rings(shm_root, "line1")
        folder = ring.parent.lstat()
        assert stat.S_ISDIR(folder.st_mode) and stat.S_IMODE(folder.st_mode) == 0o700
        assert folder.st_uid == os.geteuid() and ring.parent.parent == shm_root
        assert daemon.terminate() == 0, daemon.tail()
    finally:
        daemon.close()
        subscriber.close()
    assert victim.read_bytes() == b"precious"
    assert sorted(p.name for p in shm_root.iterdir()) == sorted(squatters)  # theirs kept, ours removed
    assert "leaving" in daemon.log_path.read_text()  # the cleanup said what it did not touch
