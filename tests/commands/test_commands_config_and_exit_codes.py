"""Every command loads its config and reports problems the same way, and exits with the shared codes; the
codes systemd's unit relies on are the ones the commands use."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from appliance.appconfig.demo import DEMO_CONFIG
from appliance.exitcodes import ExitCode

REPO = Path(__file__).resolve().parents[2]
BROKEN = "device: {id: dev1}\ncameras: []\nmqtt: {host: localhost}\n"


def _appliance(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "appliance", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO)


def test_systemd_refuses_to_restart_on_the_code_run_uses_for_a_bad_config() -> None:
    text = (REPO / "systemd" / "appliance.service").read_text()
    codes = re.findall(r"^RestartPreventExitStatus=(.+)$", text, re.M)
    assert codes == [str(int(ExitCode.BAD_INPUT))], codes


def test_check_config_and_spool_report_a_broken_file_the_same_way(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BROKEN)
    checked = _appliance("check-config", "--no-machine", str(bad))
    spool = _appliance("spool", "list", "--config", str(bad))
    assert checked.returncode == ExitCode.FAILED, checked.stderr  # the answer to "is it valid?" is no
    assert spool.returncode == ExitCode.BAD_INPUT, spool.stderr  # it cannot do its job with this file
    for result in (checked, spool):
        lines = result.stderr.splitlines()
        assert lines[0].startswith(f"{bad}:2: cameras"), result.stderr
        assert lines[-1] == f"{bad}: 1 problem(s)", result.stderr
        assert result.stdout == ""
    assert checked.stderr == spool.stderr


def test_check_config_prints_the_summary_of_a_good_file_on_stdout() -> None:
    checked = _appliance("check-config", "--no-machine", str(DEMO_CONFIG))
    assert checked.returncode == ExitCode.OK, checked.stderr
    assert checked.stdout.startswith(f"{DEMO_CONFIG}: OK: device demo"), checked.stdout
    assert checked.stderr == ""


def test_check_config_without_a_file_is_bad_input() -> None:
    checked = _appliance("check-config")
    assert checked.returncode == ExitCode.BAD_INPUT and "give a config FILE" in checked.stderr
