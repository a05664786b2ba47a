"""Commands that work on the state directory take it from --config (its paths.state_dir), and say which one they
use when neither a config nor an installed device names it."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import run_appliance


def test_ota_status_and_build_engines_read_the_configs_paths(tmp_path: Path) -> None:
    config = tmp_path / "appliance.yaml"
    config.write_text(f"device: {{id: a}}\nmqtt: {{host: localhost}}\npaths: {{state_dir: {tmp_path / 'st'}}}\n"
                      "cameras: [{id: door, source: {type: file, path: /tmp/door.mp4}}]\n")
    status = run_appliance("ota", "status", "--config", str(config), "--json")
    assert json.loads(status.stdout)["state_dir"] == str(tmp_path / "st")
    assert f"state directory: {tmp_path / 'st'} (paths.state_dir of {config})" in status.stderr
    plain = run_appliance("ota", "status", expect=None)  # a checkout, no config: it says so
    assert "(no --config nor installed device: the default)" in plain.stderr, plain.stderr
    config.write_text(config.read_text().replace("paths:", "pahts:"))
    broken = run_appliance("build-engines", "--config", str(config), expect=None)
    assert broken.returncode == 2 and "pahts" in broken.stderr, broken.stderr
