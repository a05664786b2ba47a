"""`appliance check-config` as operators run it: YAML merge keys in a multi-camera config, the deprecated backoff
key, and a value the YAML loader cannot take (FILE:LINE: message, never a traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

MULTI_CAMERA = """\
device: {id: line1-box}
mqtt: {host: localhost, backoff: {initial_s: 1, max_s: 60, %s: 3}}
x-camera: &camera
  width: 640
  height: 480
  fps: 15
  backoff: {initial_s: 0.5, max_s: 30}
cameras:
  - <<: *camera
    id: door
    source: {type: file, path: /tmp/door.mp4}
  - <<: *camera
    id: belt
    height: 360
    source: {type: rtsp, url: 'rtsp://10.0.0.7/stream'}
"""


def _check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "appliance", "check-config", "--no-machine", str(path)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


def test_a_multi_camera_config_with_merge_keys_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "appliance.yaml"
    path.write_text(MULTI_CAMERA % "factor")
    result = _check(path)
    assert result.returncode == 0, result.stderr
    assert "cameras door (file), belt (rtsp)" in result.stdout and "OK" in result.stdout
    assert "deprecated" not in result.stderr and "Traceback" not in result.stderr


def test_the_old_backoff_key_is_a_warning_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "appliance.yaml"
    path.write_text(MULTI_CAMERA % "multiplier")
    result = _check(path)
    assert result.returncode == 0, result.stderr
    assert "backoff key 'multiplier' is deprecated; use 'factor'" in result.stderr
    assert "WARNING" in result.stderr and "OK" in result.stdout


def test_what_the_loader_cannot_take_is_file_line_message_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "appliance.yaml"
    path.write_text(MULTI_CAMERA.replace("<<: *camera\n    id: belt", "<<: !defaults camera\n    id: belt")
                    % "factor")
    result = _check(path)
    assert result.returncode == 1, result.stderr  # check-config's documented code for "problems found"
    assert f"{path}:12: cameras.1.<<: a merge key (<<) takes a mapping" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_the_old_recovery_backoff_keys_are_a_warning_in_check_config(tmp_path: Path) -> None:
    path = tmp_path / "appliance.yaml"
    path.write_text(MULTI_CAMERA % "factor" + "pipeline:\n  recovery: {initial_backoff_s: 0.5, max_backoff_s: 5}\n")
    result = _check(path)
    assert result.returncode == 0, result.stderr
    assert "recovery key 'initial_backoff_s' is deprecated; use 'backoff.initial_s'" in result.stderr
    assert "recovery key 'max_backoff_s' is deprecated; use 'backoff.max_s'" in result.stderr
    assert "WARNING" in result.stderr and "OK" in result.stdout
