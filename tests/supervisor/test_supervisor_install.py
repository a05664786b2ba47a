"""scripts/install-service.sh into a DESTDIR: the installed venv, Triton, profiles and models work together."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

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
    # The installed units reference the installed venv and verify against it.
    for unit in ("appliance.service", "appliance-build-engines.service"):
        text = (dest / "etc/systemd/system" / unit).read_text().replace("/opt/appliance/venv", str(dest / "opt/appliance/venv"))
        staged = tmp_path / unit
        staged.write_text(text)
        verify = subprocess.run(["systemd-analyze", "verify", str(staged)], capture_output=True, text=True,
                                timeout=60, cwd=tmp_path)
        assert verify.returncode == 0, verify.stderr
