"""The embedded demo config (what `appliance run` runs without --config): its camera plays vtest.avi with a line
and a zone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from support.cli import run_appliance

from appliance.appconfig.check import check_config
from appliance.appconfig.demo import DEMO_CONFIG, DEMO_VIDEO_ENV, prepare_demo_video
from appliance.capture.check import check_camera

VTEST = Path(__file__).resolve().parents[2] / ".models" / "vtest" / "vtest.avi"  # scripts/setup.d/40-vtest.sh


def test_demo_config_plays_vtest_with_a_line_and_a_zone(tmp_path: Path) -> None:
    video = tmp_path / "vtest.avi"
    shutil.copy(VTEST, video)
    report = check_config(DEMO_CONFIG, environ={**os.environ, DEMO_VIDEO_ENV: str(video)}, machine=False)
    assert report.ok and report.config is not None, [str(i) for i in report.issues]
    (camera,) = report.config.cameras
    assert camera.id == "hall"
    assert camera.source.type == "file" and camera.source.path == video
    assert camera.source.loop and camera.source.realtime
    assert (camera.width, camera.height) == (768, 576) and camera.fps is not None and 2 <= camera.fps <= 4
    assert camera.analytics is not None
    assert [z.name for z in camera.analytics.zones] == ["front"]
    assert [ln.name for ln in camera.analytics.lines] == ["walkway"]
    assert check_camera(camera) == []


def test_demo_config_defaults_to_the_installed_models_dir() -> None:
    environ = {k: v for k, v in os.environ.items() if k != DEMO_VIDEO_ENV}
    report = check_config(DEMO_CONFIG, environ=environ, machine=False)
    assert report.ok, [str(i) for i in report.issues]
    assert report.config.cameras[0].source.path == Path("/var/lib/appliance/models/vtest/vtest.avi")


def test_run_without_config_finds_the_video_in_the_models_dir(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "models" / "vtest").mkdir(parents=True)
    shutil.copy(VTEST, tmp_path / "models" / "vtest" / "vtest.avi")
    monkeypatch.setenv("APPLIANCE_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv(DEMO_VIDEO_ENV, "")  # empty counts as unset; monkeypatch restores it afterwards
    video = prepare_demo_video()
    assert video == tmp_path / "models" / "vtest" / "vtest.avi"
    assert os.environ[DEMO_VIDEO_ENV] == str(video)
    # Set already (scripts, operators): used as is.
    monkeypatch.setenv(DEMO_VIDEO_ENV, str(tmp_path / "elsewhere.mp4"))
    assert prepare_demo_video() == tmp_path / "elsewhere.mp4"


def test_run_without_config_says_why_when_the_video_cannot_be_built(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    done = run_appliance("run", "--once", unset={DEMO_VIDEO_ENV}, env={"APPLIANCE_MODELS_DIR": str(blocker / "models")},
                         expect=None)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot find the demo camera's video" in done.stderr and "scripts/setup.sh" in done.stderr
