"""The demo camera's sample video, built from Debian's real darknet images and read back with OpenCV."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from appliance.capture.sample import (
    DARKNET_IMAGES,
    SAMPLE_IMAGES,
    SampleVideoError,
    build_sample_video,
    ensure_sample_video,
    video_info,
)

pytestmark = pytest.mark.usefixtures("darknet_images")  # fails, not skips, without the images (tests/conftest.py)

PER_IMAGE = 20  # 2 s at 10 fps


def read_all(path: Path) -> list[np.ndarray]:
    cap = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG)
    frames = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(frame)
    cap.release()
    return frames


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    path = build_sample_video(tmp_path_factory.mktemp("sample") / "sample.mp4")
    return path, read_all(path)


def frames_of(frames: list[np.ndarray], name: str) -> list[np.ndarray]:
    start = SAMPLE_IMAGES.index(name) * PER_IMAGE
    return frames[start:start + PER_IMAGE]


def mean_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def test_video_has_every_image_for_two_seconds_at_10_fps_in_640x480(built) -> None:
    path, frames = built
    assert len(frames) == len(SAMPLE_IMAGES) * PER_IMAGE == 120
    assert {f.shape for f in frames} == {(480, 640, 3)}
    assert video_info(path) == (120, 10.0)
    assert not list(path.parent.glob(".sample.*")), "the temporary file was left behind"


def test_images_are_letterboxed_with_black_bars(built) -> None:
    _, frames = built
    # eagle.jpg is 773x512 (wider than 4:3): 424 rows of picture, 28 black rows above and below.
    for frame in frames_of(frames, "eagle")[::5]:
        assert frame[:24].max() < 40 and frame[:24].mean() < 4, "top bar not black"
        assert frame[-24:].max() < 40 and frame[-24:].mean() < 4, "bottom bar not black"
        assert frame[40:440].mean() > 40, "picture missing"
    # giraffe.jpg is square: 480x480 in the middle, 80 black columns left and right.
    for frame in frames_of(frames, "giraffe")[::5]:
        assert frame[:, :76].mean() < 4 and frame[:, -76:].mean() < 4
        assert frame[:, 90:550].mean() > 40
    # dog.jpg is exactly 4:3: it fills the frame.
    assert frames_of(frames, "dog")[0][:24].mean() > 40


def test_consecutive_frames_of_one_image_differ_a_little_like_a_camera(built) -> None:
    _, frames = built
    for name in SAMPLE_IMAGES:
        shots = frames_of(frames, name)
        steps = [mean_diff(a, b) for a, b in zip(shots, shots[1:])]
        assert min(steps) > 0.5, f"{name}: a frame repeats the previous one ({min(steps):.2f})"
        assert max(steps) < 15, f"{name}: consecutive frames jump ({max(steps):.2f})"
        # The zoom adds up: the last frame is further from the first than any neighbour is.
        assert mean_diff(shots[0], shots[-1]) > max(steps)
    # Between images the picture changes completely.
    assert mean_diff(frames[PER_IMAGE - 1], frames[PER_IMAGE]) > 25


def test_a_missing_image_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    for name in SAMPLE_IMAGES:
        if name != "kite":
            shutil.copy(DARKNET_IMAGES / f"{name}.jpg", images)
    out = tmp_path / "out"
    with pytest.raises(SampleVideoError, match=r"kite\.jpg is missing.*'darknet' apt package"):
        build_sample_video(out / "sample.mp4", images)
    assert not out.exists() or not list(out.iterdir())


def test_an_unreadable_image_is_named(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    for name in SAMPLE_IMAGES:
        shutil.copy(DARKNET_IMAGES / f"{name}.jpg", images)
    (images / "horses.jpg").write_bytes(b"not a jpeg at all")
    with pytest.raises(SampleVideoError, match=r"horses\.jpg is not a readable image"):
        build_sample_video(tmp_path / "sample.mp4", images)
    assert not (tmp_path / "sample.mp4").exists()
    assert not list(tmp_path.glob(".sample.*"))


def test_ensure_keeps_a_good_video_and_rebuilds_a_broken_one(built, tmp_path: Path) -> None:
    good, _ = built
    dest = tmp_path / "models" / "sample" / "sample.mp4"
    assert ensure_sample_video(dest) == dest
    first = dest.stat()
    assert ensure_sample_video(dest) == dest
    assert dest.stat().st_mtime_ns == first.st_mtime_ns and dest.stat().st_ino == first.st_ino, "rebuilt a good file"

    data = good.read_bytes()
    for broken in (b"", b"garbage" * 100, data[: len(data) // 2], data[:-4096]):
        dest.write_bytes(broken)
        assert video_info(dest) is None
        ensure_sample_video(dest)
        assert video_info(dest) == (120, 10.0)


def test_module_command_builds_then_reuses(tmp_path: Path) -> None:
    dest = tmp_path / "sample.mp4"
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "appliance.capture.sample", str(dest)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"{dest}: 120 frames at 10 fps"
    missing = subprocess.run([sys.executable, "-m", "appliance.capture.sample", str(tmp_path / "x.mp4"),
                              "--images", str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "dog.jpg is missing" in missing.stderr


def test_ensure_sweeps_temp_files_of_killed_builds_but_not_a_live_one(tmp_path: Path) -> None:
    dest = tmp_path / "sample.mp4"
    killed = tmp_path / ".sample.killed1.mp4"  # what a build SIGKILLed before its rename leaves
    live = tmp_path / ".sample.live22.mp4"  # a build in progress right now, in another process
    unrelated = tmp_path / ".other.old.mp4"
    for path in (killed, live, unrelated):
        path.write_bytes(b"partial")
    hours_ago = time.time() - 2 * 3600
    os.utime(killed, (hours_ago, hours_ago))
    os.utime(unrelated, (hours_ago, hours_ago))
    ensure_sample_video(dest)
    assert video_info(dest) is not None
    assert not killed.exists() and live.exists() and unrelated.exists()
