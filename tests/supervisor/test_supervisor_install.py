"""scripts/install-service.sh into a DESTDIR: the installed venv, Triton, profiles and models work together."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from appliance.mqtt.config import SpoolConfig
from appliance.mqtt.spool import Spool

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("detector_onnx"),  # fails, not skips, without the detector (tests/conftest.py)
]


def test_installed_tree_checks_its_config_finds_triton_and_builds_the_engine(tmp_path: Path) -> None:
    dest = tmp_path / "root"
    result = subprocess.run([str(REPO / "scripts/install-service.sh")], env={**os.environ, "DESTDIR": str(dest)},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    bin_ = dest / "opt/appliance/venv/bin/appliance"
    for path in ["etc/appliance/appliance.yaml", "etc/appliance/engines/yolov3-tiny.yaml",
                 "var/lib/appliance/models/yolov3-tiny/model.onnx", "var/lib/appliance/models/sample/sample.mp4",
                 "etc/systemd/system/appliance.service",
                 "etc/systemd/system/appliance-build-engines.service"]:
        assert (dest / path).is_file(), path
    # the commented starting config to edit, not the demo
    assert (dest / "etc/appliance/appliance.yaml").read_text() == (REPO / "docs/examples/appliance.yaml").read_text()
    env = {**os.environ, "APPLIANCE_STATE_DIR": str(dest / "var/lib/appliance"),
           "APPLIANCE_ENGINES_DIR": str(dest / "etc/appliance/engines"),
           "APPLIANCE_MODELS_DIR": str(dest / "var/lib/appliance/models"),
           "APPLIANCE_TRITON_HOME": str(dest / "opt/appliance/triton")}
    checked = subprocess.run([str(bin_), "check-config", "--no-machine", str(dest / "etc/appliance/appliance.yaml")],
                             env=env, capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr
    info = subprocess.run([str(bin_), "triton-info"], env=env, capture_output=True, text=True, timeout=120)
    assert info.returncode == 0 and str(dest / "opt/appliance/triton") in info.stdout, info.stdout + info.stderr
    built = subprocess.run([str(bin_), "build-engines", "--json"], env=env, capture_output=True, text=True,
                           timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    assert (dest / "var/lib/appliance/engines").is_dir()
    _operator_commands_find_the_installed_config_and_state(dest, bin_)
    # The installed units reference the installed venv and verify against it.
    for unit in ("appliance.service", "appliance-build-engines.service"):
        text = (dest / "etc/systemd/system" / unit).read_text().replace("/opt/appliance/venv",
                                                                         str(dest / "opt/appliance/venv"))
        staged = tmp_path / unit
        staged.write_text(text)
        verify = subprocess.run(["systemd-analyze", "verify", str(staged)], capture_output=True, text=True,
                                timeout=60, cwd=tmp_path)
        assert verify.returncode == 0, verify.stderr


def _operator_commands_find_the_installed_config_and_state(dest: Path, bin_: Path) -> None:
    """An operator's shell has none of the unit's APPLIANCE_* variables and gives no flags: `ota status`,
    `spool list`, `check-config` (with its Triton) and `status` still find /etc/appliance/appliance.yaml and
    /var/lib/appliance (here under DESTDIR), not the source copy's own .state or the bundled demo config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    state = dest / "var/lib/appliance"
    spool = Spool(state / "mqtt-spool.sqlite3", SpoolConfig())  # what the appliance leaves after a run
    spool.open()
    spool.close()

    def appliance(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(bin_), *args], env=env, capture_output=True, text=True, timeout=120, cwd=dest)

    status = appliance("ota", "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state_dir"] == str(state), status.stdout
    listed = appliance("spool", "list")
    assert listed.returncode == 0, listed.stderr
    assert f"0 message(s) set aside in {state / 'mqtt-spool.sqlite3'}" in listed.stderr, listed.stderr
    checked = appliance("check-config", "--no-machine")
    assert checked.returncode == 0 and checked.stdout.startswith(f"{dest / 'etc/appliance/appliance.yaml'}: OK"), \
        checked.stdout + checked.stderr
    machine = appliance("check-config")  # the machine checks too: Triton from installed.json, no variable
    assert "triton.home" not in machine.stdout + machine.stderr, machine.stdout + machine.stderr
    asked = appliance("status")  # nothing runs here: it names the installed config's health address
    assert asked.returncode == 3 and f"health.port of {dest / 'etc/appliance/appliance.yaml'}" in asked.stderr, \
        asked.stderr
    assert not (dest / "opt/appliance/src/.state").exists()
