"""A corpus of broken config files: `appliance run` says what is wrong, where (file:line: key), exits 2 (so
systemd does not restart it), and never shows a traceback. `check-config` reports the same problem.

Each file's first line is ``# expect: <text>``: what must follow the file name in the report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.appconfig.check import check_config

CORPUS = sorted((Path(__file__).parent / "broken_configs").glob("*.yaml"))
REPO = Path(__file__).resolve().parents[2]


def _expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name}: first line must say what to expect"
    return first.removeprefix("# expect: ")


def test_the_corpus_has_at_least_20_files() -> None:
    assert len(CORPUS) >= 20


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_run_reports_the_problem_at_its_line_and_exits_2_without_a_traceback(path: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "APPLIANCE_TEST_SURELY_UNSET"}
    env["APPLIANCE_STATE_DIR"] = str(tmp_path / "state")  # never touch a real state directory
    result = subprocess.run([sys.executable, "-m", "appliance", "run", "--config", str(path), "--once"],
                            capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert f"{path}{_expected(path)}" in output, output
    assert "Traceback" not in output, output
    assert not (tmp_path / "state").exists()  # nothing was started


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_check_config_reports_the_same_problem(path: Path) -> None:
    report = check_config(path, environ={}, machine=False)
    assert not report.ok
    assert any(f"{path}{_expected(path)}" in str(issue) for issue in report.issues), report.issues


def test_a_broken_device_section_is_reported_once_not_again_as_a_missing_mqtt_device_id(tmp_path: Path) -> None:
    # mqtt.device_id defaults to device.id: when device is broken, that default is not "missing" as well.
    for device in ("device: demo", "device: {name: line 3}"):
        path = tmp_path / "app.yaml"
        path.write_text(f"{device}\ncameras:\n  - id: a\n    source: {{type: file, path: /tmp/v.mp4}}\n"
                        "    width: 640\n    height: 480\nmqtt: {host: localhost}\n")
        report = check_config(path, environ={}, machine=False)
        assert [str(issue).removeprefix(str(path)) for issue in report.issues][:1] in (
            [":1: device: must be a mapping of keys (key: value), not text ('demo')"],
            [":1: device.id: required key is missing"]), report.issues
        assert len(report.issues) == 1, report.issues
