"""`appliance check-config` as operators run it: YAML merge keys in a multi-camera config, the deprecated backoff
key, and a value the YAML loader cannot take (FILE:LINE: message, never a traceback)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.cli import run_appliance
from support.ports import free_port

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
    return run_appliance("check-config", "--no-machine", str(path), expect=None)


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


def test_a_camera_absent_now_is_a_warning_and_the_config_is_ok(tmp_path: Path) -> None:
    """An unplugged USB camera or a video not copied yet heals by itself, and so does a broker that does not
    answer now: exit 0, a warning naming where."""
    path = tmp_path / "appliance.yaml"
    port = free_port()  # nothing listens there
    path.write_text(f"""\
device: {{id: line1-box}}
mqtt: {{host: 127.0.0.1, port: {port}}}
cameras:
  - id: door
    source: {{type: file, path: {REPO / '.models/sample/sample.mp4'}}}
    width: 640
    height: 480
  - id: usb
    source: {{type: v4l2, device: /dev/video97}}
    width: 640
    height: 480
  - id: later
    source: {{type: file, path: {tmp_path / 'later.mp4'}}}
    width: 640
    height: 480
""")
    result = run_appliance("check-config", str(path))
    assert "OK, 3 warning(s)" in result.stdout, result.stdout
    assert f"warning: {path}:2: mqtt.host: broker at 127.0.0.1:{port} does not answer now" in result.stderr, \
        result.stderr
    assert (f"warning: {path}:9: cameras.1.source: camera 'usb': /dev/video97 does not exist now (unplugged?); "
            "the camera waits for it and starts when it appears") in result.stderr, result.stderr
    assert f"warning: {path}:13: cameras.2.source: camera 'later': video file {tmp_path / 'later.mp4'} does not " \
           "exist now" in result.stderr, result.stderr
