"""Frame rings that no other user can take, block or trick: the private ring directory and the ring file checks."""

from __future__ import annotations

import logging
import os
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from appliance.capture.errors import RingForeignError
from appliance.capture.layout import RingGeometry
from appliance.capture.ringdir import DIR_PREFIX, RESTREAM_SOCKET, RingDirectory, find_rings, reclaim_stale_ring_dirs
from appliance.capture.ringfile import create_ring, reclaim_stale_rings, ring_path

GEOM = RingGeometry(width=32, height=16, slots=3)
OTHER_UID = 65534  # nobody: the tests run as root, so they can hand a file to another user


def test_a_symlink_at_a_rings_name_is_refused_and_its_target_untouched(shm_root: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    path = ring_path(shm_root, "cam0")
    path.symlink_to(victim)
    with pytest.raises(RingForeignError, match="not this appliance's ring"):
        create_ring(path, GEOM, "cam0")
    assert victim.read_bytes() == b"precious" and path.is_symlink()
    path.unlink()


@pytest.mark.parametrize("make", ["directory", "other user's file", "file others may open"])
def test_what_is_not_our_own_private_file_is_never_adopted(shm_root: Path, make: str) -> None:
    path = ring_path(shm_root, "cam0")
    if make == "directory":
        path.mkdir()
    else:
        create_ring(path, GEOM, "cam0").close(remove=False)  # a valid leftover ring, but...
        if make == "other user's file":
            os.chown(path, OTHER_UID, OTHER_UID)
        else:
            path.chmod(0o666)
    with pytest.raises(RingForeignError, match="leaving it alone"):
        create_ring(path, GEOM, "cam0")
    assert path.exists()
    path.rmdir() if make == "directory" else path.unlink()


def test_a_new_ring_is_private_to_its_user(shm_root: Path) -> None:
    path = ring_path(shm_root, "cam0")
    with create_ring(path, GEOM, "cam0"):
        st = path.lstat()
        assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o600


def test_stale_ring_cleanup_skips_and_logs_what_is_not_ours(shm_root: Path, tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (shm_root / "appliance-cam-dir.ring").mkdir()
    (shm_root / "appliance-cam-link.ring").symlink_to(victim)
    create_ring(ring_path(shm_root, "theirs"), GEOM, "theirs").close(remove=False)
    os.chown(ring_path(shm_root, "theirs"), OTHER_UID, OTHER_UID)
    create_ring(ring_path(shm_root, "dead"), GEOM, "dead").close(remove=False)
    with caplog.at_level(logging.WARNING):
        removed = reclaim_stale_rings(shm_root)
    assert removed == [ring_path(shm_root, "dead")]
    assert victim.read_bytes() == b"precious"
    assert sorted(p.name for p in shm_root.iterdir()) == [
        "appliance-cam-dir.ring", "appliance-cam-link.ring", "appliance-cam-theirs.ring"]
    assert sum("leaving it alone" in r.getMessage() for r in caplog.records) == 3
    for p in shm_root.iterdir():
        p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()


def test_the_ring_directory_is_fresh_private_and_removed_at_close(shm_root: Path) -> None:
    (shm_root / f"{DIR_PREFIX}squat").symlink_to(shm_root)  # a taken name changes nothing: the name is new each run
    with RingDirectory.create(shm_root) as rings:
        st = rings.path.lstat()
        assert rings.path.parent == shm_root and rings.path.name.startswith(DIR_PREFIX)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
        with create_ring(ring_path(rings.path, "cam0"), GEOM, "cam0"):
            assert find_rings(shm_root, "cam0") == [ring_path(rings.path, "cam0")]
    assert sorted(p.name for p in shm_root.iterdir()) == [f"{DIR_PREFIX}squat"]
    (shm_root / f"{DIR_PREFIX}squat").unlink()


def test_a_dead_runs_directory_is_reclaimed_a_live_ones_and_foreign_ones_kept(shm_root: Path,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    live = RingDirectory.create(shm_root)
    dead = RingDirectory.create(shm_root)
    create_ring(ring_path(dead.path, "cam0"), GEOM, "cam0").close(remove=False)  # its supervisor was killed
    with socket.socket(socket.AF_UNIX) as restream:  # and its RTSP server's packet socket stayed
        restream.bind(str(dead.path / RESTREAM_SOCKET))
    os.close(dead._fd)  # the kernel drops a dead run's lock
    theirs = shm_root / f"{DIR_PREFIX}theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    open_dir = shm_root / f"{DIR_PREFIX}open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with caplog.at_level(logging.WARNING):
        assert reclaim_stale_ring_dirs(shm_root) == [dead.path]
    assert live.path.is_dir() and theirs.is_dir() and open_dir.is_dir() and not dead.path.exists()
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"{theirs} alone" in m and f"uid {OTHER_UID}" in m for m in messages)
    assert any(f"{open_dir} alone" in m and "mode 0777" in m for m in messages)
    live.close()
    theirs.rmdir()
    open_dir.rmdir()


def test_a_start_whose_new_folder_another_starts_cleanup_removes_makes_another(
        shm_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between making its folder and locking it, another instance's cleanup may find it unlocked and remove it."""
    made: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp_then_cleanup(**kw: str) -> str:
        made.append(real_mkdtemp(**kw))
        if len(made) == 1:
            assert reclaim_stale_ring_dirs(shm_root) == [Path(made[0])]  # the other start lands in the window
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp_then_cleanup)
    with RingDirectory.create(shm_root) as rings:
        assert len(made) == 2 and rings.path == Path(made[1]) and rings.path.is_dir()
    assert list(shm_root.iterdir()) == []
