"""A config problem is reported with its line, never with a secret: `appliance check-config` (which systemd runs
before the appliance, so its output lands in the journal) names the key of a mistyped password without its
value, and shows a camera URL with its password replaced by ***."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.cli import run_appliance


def _check(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "appliance.yaml"
    path.write_text(text)
    return run_appliance("check-config", "--no-machine", str(path), expect=None)


def test_a_mistyped_password_is_named_not_shown(tmp_path: Path) -> None:
    result = _check(tmp_path, """\
device: {id: box07}
cameras:
  - {id: line1, source: {type: file, path: /tmp/a.mp4}, width: 640, height: 480}
mqtt: {host: localhost, username: box07, password: 918273645, port: notaport}
""")
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "appliance.yaml:4: mqtt.password: Input should be a valid string" in out, out
    assert "918273645" not in out
    assert "(got 'notaport')" in out  # other values are still echoed: they help and hide nothing


def test_a_camera_url_is_shown_with_its_password_hidden(tmp_path: Path) -> None:
    result = _check(tmp_path, """\
device: {id: box07}
cameras:
  - id: line1
    source: {type: rtsp, url: "rtps://cam:Pa55@word@10.0.0.5/h264"}
    width: 640
    height: 480
mqtt: {host: localhost}
""")
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "appliance.yaml:4: cameras.0.source.url" in out and "'rtps://cam:***@10.0.0.5/h264'" in out, out
    assert "Pa55" not in out and "word@" not in out
