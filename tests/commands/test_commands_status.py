"""`appliance status` against a real health endpoint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from appliance.health.server import HealthServer
from appliance.commands.status import format_status

REPO = Path(__file__).resolve().parents[2]


def _status(url: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance", "status", "--url", url], capture_output=True,
                          text=True, timeout=60, cwd=REPO)


def test_status_prints_a_readable_summary_and_exit_code_follows_health() -> None:
    summary = {"ok": True, "triton_ready": True, "status": "1/1 cameras streaming, 2.0 inferences/s, mqtt connected",
               "cameras": {"line1": {"state": "streaming", "inferred": 40, "skipped": 2, "errors": 0}}}
    server = HealthServer("127.0.0.1", 0, lambda: b"", lambda: summary)
    try:
        result = _status(f"http://127.0.0.1:{server.port}")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [
            "OK: 1/1 cameras streaming, 2.0 inferences/s, mqtt connected",
            "triton: ready",
            "cameras:",
            "  line1  streaming  inferred 40  skipped 2  errors 0",
        ]
        summary["ok"] = False
        result = _status(f"http://127.0.0.1:{server.port}")
        assert result.returncode == 1 and result.stdout.startswith("NOT HEALTHY")
    finally:
        server.close()


def test_status_when_nothing_listens_says_what_to_check() -> None:
    result = _status("http://127.0.0.1:9")
    assert result.returncode == 3
    assert "is the appliance running" in result.stderr


def test_format_status_without_cameras() -> None:
    assert format_status({"ok": False, "triton_ready": False, "status": "starting"}) == \
        "NOT HEALTHY: starting\ntriton: NOT READY"


def test_format_status_shows_the_pipeline_and_dropped_frames() -> None:
    health = {"ok": False, "triton_ready": True, "status": "1/1 cameras streaming",
              "pipeline": {"state": "crash_loop", "route": "yolov3-tiny@2", "models": ["ota-2-detector"],
                           "reason": "reload failed: bad model", "failures": 5, "attempt": 4, "next_retry_s": 59.6,
                           "reloads": 0},
              "cameras": {"line1": {"state": "streaming", "inferred": 40, "skipped": 2, "dropped": 12, "errors": 3}}}
    assert format_status(health).splitlines() == [
        "NOT HEALTHY: 1/1 cameras streaming",
        "triton: ready",
        "pipeline: CRASH LOOP (yolov3-tiny@2): ota-2-detector: reload failed: bad model; 5 failure(s), attempt 4, "
        "next reload in 60 s",
        "cameras:",
        "  line1  streaming  inferred 40  skipped 2  dropped 12  errors 3",
    ]
    health["pipeline"] = {"state": "serving", "route": "yolov3-tiny@2", "models": [], "failures": 1, "reloads": 1}
    assert format_status(health).splitlines()[2] == \
        "pipeline: serving (yolov3-tiny@2), 1 model reload(s), 1 recent failure(s)"
