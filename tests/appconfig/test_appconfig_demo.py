"""The embedded demo config (what `appliance run` runs without --config): its camera is the sample video."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.capture.check import check_camera
from appliance.capture.sample import DARKNET_IMAGES, SAMPLE_IMAGES, build_sample_video, video_info
from appliance.appconfig.check import check_config
from appliance.appconfig.demo import DEMO_CONFIG, DEMO_VIDEO_ENV, prepare_demo_video

pytestmark = pytest.mark.skipif(not all((DARKNET_IMAGES / f"{n}.jpg").is_file() for n in SAMPLE_IMAGES),
                                reason="needs Debian's darknet test images (apt package darknet)")


def test_demo_config_plays_the_sample_video(tmp_path: Path) -> None:
    video = build_sample_video(tmp_path / "sample.mp4")
    report = check_config(DEMO_CONFIG, environ={**os.environ, DEMO_VIDEO_ENV: str(video)}, machine=False)
    assert report.ok and report.config is not None, [str(i) for i in report.issues]
    (camera,) = report.config.cameras
    assert camera.id == "sample"
    assert camera.source.type == "file" and camera.source.path == video
    assert camera.source.loop and camera.source.realtime
    assert (camera.width, camera.height, camera.resize) == (640, 480, True)
    assert check_camera(camera) == []


def test_demo_config_defaults_to_the_installed_models_dir() -> None:
    environ = {k: v for k, v in os.environ.items() if k != DEMO_VIDEO_ENV}
    report = check_config(DEMO_CONFIG, environ=environ, machine=False)
    assert report.ok, [str(i) for i in report.issues]
    assert report.config.cameras[0].source.path == Path("/var/lib/appliance/models/sample/sample.mp4")


def test_run_without_config_builds_the_video_in_the_models_dir(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLIANCE_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv(DEMO_VIDEO_ENV, "")  # empty counts as unset; monkeypatch restores it afterwards
    video = prepare_demo_video()
    assert video == tmp_path / "models" / "sample" / "sample.mp4"
    assert os.environ[DEMO_VIDEO_ENV] == str(video)
    assert video_info(video) == (120, 10.0)
    # Set already (scripts, operators): used as is, nothing built.
    monkeypatch.setenv(DEMO_VIDEO_ENV, str(tmp_path / "elsewhere.mp4"))
    assert prepare_demo_video() == tmp_path / "elsewhere.mp4"
    assert not (tmp_path / "elsewhere.mp4").exists()


def test_run_without_config_says_why_when_the_video_cannot_be_built(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    env = {k: v for k, v in os.environ.items() if k != DEMO_VIDEO_ENV}
    env["APPLIANCE_MODELS_DIR"] = str(blocker / "models")
    done = subprocess.run([sys.executable, "-m", "appliance", "run", "--once"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot build the sample camera's video" in done.stderr and "scripts/setup.sh" in done.stderr
