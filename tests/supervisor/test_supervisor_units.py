"""The systemd units in systemd/ pass `systemd-analyze verify`, and the service stays well sandboxed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNITS = sorted((REPO / "systemd").glob("*.service"))
INSTALLED_BIN = "/opt/appliance/venv/bin/appliance"

pytestmark = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")


def _staged(tmp_path: Path) -> Path:
    """Copy the units with the install path pointed at this checkout's venv (verify checks that binaries exist)."""
    real_bin = str(Path(sys.executable).with_name("appliance"))
    for unit in UNITS:
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALLED_BIN, real_bin))
    return tmp_path


def test_there_are_units_to_check() -> None:
    assert "appliance.service" in [u.name for u in UNITS]


@pytest.mark.parametrize("unit", [u.name for u in UNITS])
def test_unit_verifies_cleanly(unit: str, tmp_path: Path) -> None:
    staged = _staged(tmp_path)
    result = subprocess.run(["systemd-analyze", "verify", str(staged / unit)], capture_output=True, text=True,
                            cwd=staged, timeout=60)
    problems = [line for line in result.stderr.splitlines() if unit in line or "appliance" in line]
    assert result.returncode == 0 and not problems, result.stderr


def test_service_exposure_score_stays_low(tmp_path: Path) -> None:
    staged = _staged(tmp_path)
    result = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(staged / "appliance.service")],
                            capture_output=True, text=True, timeout=60)
    match = re.search(r"Overall exposure level for appliance\.service: ([0-9.]+)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= 2.5  # "OK"; README states the current score


def test_service_is_notify_with_watchdog_and_restart() -> None:
    text = (REPO / "systemd" / "appliance.service").read_text()
    for line in ("Type=notify", "Restart=on-failure", "StateDirectory=appliance", "ProtectSystem=strict",
                 "NoNewPrivileges=yes", "DevicePolicy=closed"):
        assert re.search(rf"^{re.escape(line)}$", text, re.M), line
    assert re.search(r"^WatchdogSec=\d+", text, re.M)


def test_no_start_step_before_run_refuses_a_config_whose_camera_is_unplugged(tmp_path: Path) -> None:
    """An ExecStartPre= that fails stops the start, and only the main process's exit status is one
    RestartPreventExitStatus= can act on: a camera absent at boot must not fail any step before `run`."""
    config = tmp_path / "appliance.yaml"
    config.write_text("device: {id: dev1}\nmqtt: {host: localhost}\ncameras:\n"
                      "  - {id: usb, source: {type: v4l2, device: /dev/video97}, width: 640, height: 480}\n")
    real_bin = str(Path(sys.executable).with_name("appliance"))
    text = (REPO / "systemd" / "appliance.service").read_text()
    for step in re.findall(r"^ExecStartPre=[-@:+!]*(.+)$", text, re.M):
        argv = step.replace(INSTALLED_BIN, real_bin).replace("/etc/appliance/appliance.yaml", str(config)).split()
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert result.returncode == 0, f"{step}: {result.stdout}{result.stderr}"
    exec_start = re.findall(r"^ExecStart=(.+)$", text, re.M)
    assert exec_start == [f"{INSTALLED_BIN} run --config /etc/appliance/appliance.yaml"], exec_start
