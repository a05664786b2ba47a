"""Commands that print data have --json: password's hash as an object that verifies; a benchmark's key=value
results as one object."""

from __future__ import annotations

import json

from support.cli import run_appliance

from appliance.passwords import verify_password


def test_password_json() -> None:
    result = run_appliance("password", "--user", "plc", "--role", "operator", "--json", input="a-long-password\n")
    doc = json.loads(result.stdout)
    assert (doc["user"], doc["role"]) == ("plc", "operator") and verify_password("a-long-password", doc["hash"])


def test_bench_json_is_its_key_value_results() -> None:
    result = run_appliance("bench", "analytics", "--frames", "20", "--rounds", "1", "--json")
    doc = json.loads(result.stdout)
    assert doc["benchmark"] == "analytics" and doc["exit"] == 0
    assert sorted(doc["results"]) == sorted(f"analytics_ms_per_frame_{n}_objects" for n in (1, 20, 100))
    assert all(isinstance(v, float) and v > 0 for v in doc["results"].values())
    assert "analytics_ms_per_frame_1_objects=" in result.stderr  # the benchmark's own lines, on stderr
