"""Every command loads its config and reports problems the same way, and exits with the shared codes; the
codes systemd's unit relies on are the ones the commands use."""

from __future__ import annotations

import re
from pathlib import Path

from support.cli import run_appliance

from appliance.appconfig.demo import DEMO_CONFIG
from appliance.exitcodes import ExitCode

REPO = Path(__file__).resolve().parents[2]
BROKEN = "device: {id: dev1}\ncameras: []\nmqtt: {host: localhost}\n"


def test_systemd_refuses_to_restart_on_the_code_run_uses_for_a_bad_config() -> None:
    text = (REPO / "systemd" / "appliance.service").read_text()
    codes = re.findall(r"^RestartPreventExitStatus=(.+)$", text, re.M)
    assert codes == [str(int(ExitCode.BAD_INPUT))], codes


def test_check_config_and_spool_report_a_broken_file_the_same_way(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BROKEN)
    checked = run_appliance("check-config", "--no-machine", str(bad), expect=ExitCode.FAILED)  # "is it valid?" no
    spool = run_appliance("spool", "list", "--config", str(bad), expect=ExitCode.BAD_INPUT)  # it cannot do its job
    for result in (checked, spool):
        lines = result.stderr.splitlines()
        assert lines[0].startswith(f"{bad}:2: cameras"), result.stderr
        assert lines[-1] == f"{bad}: 1 problem(s)", result.stderr
        assert result.stdout == ""
    assert checked.stderr == spool.stderr


def test_check_config_prints_the_summary_of_a_good_file_on_stdout() -> None:
    checked = run_appliance("check-config", "--no-machine", str(DEMO_CONFIG), expect=ExitCode.OK)
    assert checked.stdout.startswith(f"{DEMO_CONFIG}: OK: device demo"), checked.stdout
    assert checked.stderr == ""


def test_check_config_without_a_file_is_bad_input() -> None:
    checked = run_appliance("check-config", expect=None)
    assert checked.returncode == ExitCode.BAD_INPUT and "give a config FILE" in checked.stderr
