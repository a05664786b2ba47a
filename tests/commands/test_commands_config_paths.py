"""Commands that work on the state directory take it from --config (its paths.state_dir), and say which one they
use when neither a config nor an installed device names it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _appliance(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "appliance", *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO)


def test_ota_status_and_build_engines_read_the_configs_paths(tmp_path: Path) -> None:
    config = tmp_path / "appliance.yaml"
    config.write_text(f"device: {{id: a}}\nmqtt: {{host: localhost}}\npaths: {{state_dir: {tmp_path / 'st'}}}\n"
                      "cameras: [{id: door, source: {type: file, path: /tmp/door.mp4}}]\n")
    status = _appliance("ota", "status", "--config", str(config), "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state_dir"] == str(tmp_path / "st")
    assert f"state directory: {tmp_path / 'st'} (paths.state_dir of {config})" in status.stderr
    plain = _appliance("ota", "status")  # a checkout, no config: it says so
    assert "(no --config nor installed device: the default)" in plain.stderr, plain.stderr
    config.write_text(config.read_text().replace("paths:", "pahts:"))
    broken = _appliance("build-engines", "--config", str(config))
    assert broken.returncode == 2 and "pahts" in broken.stderr, broken.stderr
