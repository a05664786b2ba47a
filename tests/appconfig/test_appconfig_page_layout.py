"""`appliance check-config` says which cameras run zones and lines from the operator's page (the layout file in
the state directory) instead of the file's, and refuses a layout file that no longer fits its camera."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support.cli import run_appliance

from appliance.appconfig.demo import DEMO_CONFIG, DEMO_VIDEO_ENV

REPO = Path(__file__).resolve().parents[2]
VTEST = REPO / ".models" / "vtest" / "vtest.avi"


def _check(config: Path) -> subprocess.CompletedProcess[str]:
    return run_appliance("check-config", str(config), env={DEMO_VIDEO_ENV: str(VTEST)}, expect=None)


def test_check_config_names_the_pages_layout_and_refuses_one_that_does_not_fit(tmp_path: Path) -> None:
    config = tmp_path / "demo.yaml"
    config.write_text(f"{DEMO_CONFIG.read_text()}\npaths:\n  state_dir: {tmp_path / 'state'}\n")
    plain = _check(config)
    assert "zones and lines from" not in plain.stdout + plain.stderr
    layout = tmp_path / "state" / "layouts" / "hall.json"
    layout.parent.mkdir(parents=True)
    layout.write_text(json.dumps({"zones": [], "lines": [{"name": "aisle", "a": [300, 200], "b": [300, 470],
                                                          "in_side": "right"}], "edited_by": "olga",
                                  "edited_at": 1_700_000_000}))
    noted = _check(config)
    assert noted.returncode == plain.returncode, noted.stderr
    assert (f"camera hall: zones and lines from {layout} (applied on the page by olga at 2023-11-14T22:13:20Z), "
            "not from this file") in noted.stdout
    layout.write_text(layout.read_text().replace("470", "900"))  # below the 768x576 frame
    refused = _check(config)
    assert refused.returncode != 0
    assert "hall.json: the page's layout for camera 'hall' does not fit: lines.0.b" in refused.stderr
