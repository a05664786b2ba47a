"""Commands that print data have --json: opcua-password's hash as an object that verifies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from appliance.opcua.passwords import verify_password

REPO = Path(__file__).resolve().parents[2]


def test_opcua_password_json() -> None:
    result = subprocess.run([sys.executable, "-m", "appliance", "opcua-password", "--user", "plc", "--role",
                             "operator", "--json"], input="a-long-password\n", capture_output=True, text=True,
                            timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["user"], doc["role"]) == ("plc", "operator") and verify_password("a-long-password", doc["hash"])
