"""`appliance status` against a real health endpoint."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support.cli import run_appliance

from appliance.commands.status import format_bytes, format_duration, format_status
from appliance.health.routes import health_routes
from appliance.webserver.server import WebServer


def _status(url: str) -> subprocess.CompletedProcess[str]:
    return run_appliance("status", "--url", url, expect=None)


def test_status_prints_a_readable_summary_and_exit_code_follows_health() -> None:
    summary = {"ok": True, "triton_ready": True, "status": "1/1 cameras streaming, 2.0 inferences/s, mqtt connected",
               "cameras": {"line1": {"state": "streaming", "size": "768x576", "inferred": 40, "skipped": 2,
                                     "errors": 0}}}
    server = WebServer("127.0.0.1", 0, health_routes(lambda: b"", lambda: summary))
    try:
        result = _status(f"http://127.0.0.1:{server.port}")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [
            "OK: 1/1 cameras streaming, 2.0 inferences/s, mqtt connected",
            "  triton  ready",
            "",
            "CAMERA  STATE         SIZE  FPS  INFERRED  SKIPPED  DROPPED  ERRORS  RECONNECTS",
            "line1   streaming  768x576    -        40        2        -       0           -",
        ]
        summary.update(level="degraded", reasons=["camera line2 is error: could not open /dev/video4"])
        result = _status(f"http://127.0.0.1:{server.port}")
        assert result.returncode == 1, result.stderr  # WARNING, as a monitoring plugin says it
        assert result.stdout.splitlines()[:2] == ["WARNING: 1/1 cameras streaming, 2.0 inferences/s, mqtt connected",
                                                  "  - camera line2 is error: could not open /dev/video4"]
        summary.update(ok=False, level="failed", reasons=["the frame path is not progressing"])
        result = _status(f"http://127.0.0.1:{server.port}")
        assert result.returncode == 2 and result.stdout.startswith("CRITICAL: "), result.stdout  # CRITICAL
        result = run_appliance("status", "--url", f"http://127.0.0.1:{server.port}", "--json", expect=None)
        assert json.loads(result.stdout) == summary  # --json: the raw summary, untouched
    finally:
        server.close()


# A summary as the appliance sends it (appliance.supervisor.reporting: health_summary + service_readings), with
# every part present; the expected lines below are written by hand.
FULL = {
    "ok": False, "triton_ready": True, "status": "1/2 cameras streaming, 7.9 inferences/s, mqtt connecting",
    "model": "yolov3-tiny@1.4.0", "served": {"model": "yolov3-tiny", "version": "1.4.0"},
    "cameras": {
        "line1": {"state": "streaming", "inferred": 9120, "skipped": 12, "dropped": 0, "errors": 0, "fps": 8.02,
                  "frames": 9200, "reconnects": 0},
        "dock-door-2": {"state": "stalled", "inferred": 310, "skipped": 0, "dropped": 4, "errors": 1, "fps": 0.0,
                        "frames": 320, "reconnects": 3},
    },
    "pipeline": {"state": "serving", "route": "yolov3-tiny@1.4.0", "models": [], "failures": 0, "reloads": 1},
    "version": "0.1.0", "uptime_s": 7925.4,
    "inference": {"inferred": 9430, "per_s": 2.05, "per_s_since_start": 1.19,
                  "latency_ms": {"p50": 41.4, "p99": 187.6, "frames": 9430}},
    "spool": {"mqtt": "connecting", "broker": "[fd00::7]:8883", "backlog": 1532, "bytes": 3 * 1024 * 1024 + 300 * 1024,
              "acked": 7890, "dropped": 7},
    "engine": {"model": "yolov3-tiny", "state": "built", "builder": "tensorrt", "triton_kind": "tensorrt_plan",
               "precision": "fp16", "key": "0123456789abcdef", "build_s": 412.3},
    "ota": {"active": "1.4.0", "version_floor": "1.3.0", "state": "active", "version": "1.4.0",
            "message": "serving 1.4.0", "code": None},
}


def test_format_status_reads_at_a_glance() -> None:
    assert format_status(FULL).splitlines() == [
        "CRITICAL: 1/2 cameras streaming, 7.9 inferences/s, mqtt connecting",
        "  appliance  0.1.0, up 2h 12m",
        "  model      yolov3-tiny, version 1.4.0; engine tensorrt fp16 (tensorrt_plan), built in 412 s",
        "  triton     ready",
        "  pipeline   serving (yolov3-tiny@1.4.0), 1 model reload(s), 0 recent failure(s)",
        "  inference  2.0/s over the last 10 s (1.2/s since start), 9430 frames",
        "  latency    p50 41 ms, p99 188 ms, capture to result (newest 9430 frames)",
        "  spool      1532 message(s) waiting (3.3 MiB), 7 dropped, 7890 acknowledged; mqtt CONNECTING "
        "(trying [fd00::7]:8883)",
        "  ota        active 1.4.0; last update 1.4.0: active: serving 1.4.0",
        "",
        "CAMERA       STATE      FPS  INFERRED  SKIPPED  DROPPED  ERRORS  RECONNECTS",
        "dock-door-2  STALLED    0.0       310        0        4       1           3",
        "line1        streaming  8.0      9120       12        0       0           0",
    ]


def test_format_status_while_the_engine_builds_and_after_a_rejected_update() -> None:
    health = {**FULL, "engine": {"model": "yolov3-tiny", "state": "building", "phase": "build", "percent": 42.4},
              "served": None, "model": None, "cameras": {},
              "ota": {"active": None, "version_floor": None, "state": "rejected", "version": "0.9.0",
                      "message": "0.9.0 is older than the floor 1.0.0", "code": "downgrade"}}
    lines = format_status(health).splitlines()
    assert "  model      engine for yolov3-tiny building: build 42 %" in lines
    assert "  ota        active base; last update 0.9.0: rejected (downgrade): 0.9.0 is older than the floor 1.0.0" \
        in lines
    assert lines[-1].startswith("  ota")  # no camera table without cameras
    health["ota"] = {"active": None, "state": None}
    assert "  ota        active base; no update since start" in format_status(health).splitlines()


def test_format_helpers() -> None:
    assert [format_duration(s) for s in (0, 59.9, 61, 3 * 3600 + 12 * 60 + 5, 2 * 86400 + 3 * 3600 + 7)] == \
        ["0s", "59s", "1m 1s", "3h 12m", "2d 3h"]
    assert [format_bytes(n) for n in (0, 1023, 1024, 1536 * 1024, 5 * 1024 ** 3)] == \
        ["0 B", "1023 B", "1.0 KiB", "1.5 MiB", "5.0 GiB"]


def test_status_when_nothing_listens_says_what_to_check(tmp_path: Path) -> None:
    result = _status("http://127.0.0.1:9")
    assert result.returncode == 3
    assert "is the appliance running" in result.stderr
    (tmp_path / "broken.yaml").write_text("device: [\n")  # a config it cannot read: UNKNOWN too, never CRITICAL
    unread = run_appliance("status", "--config", str(tmp_path / "broken.yaml"), expect=None)
    assert unread.returncode == 3 and unread.stderr.startswith("error: "), unread.stderr


def test_format_status_without_cameras() -> None:
    assert format_status({"ok": False, "triton_ready": False, "status": "starting"}) == \
        "CRITICAL: starting\n  triton  NOT READY"


def test_format_status_shows_the_pipeline_and_dropped_frames() -> None:
    health = {"ok": False, "triton_ready": True, "status": "1/1 cameras streaming",
              "pipeline": {"state": "crash_loop", "route": "yolov3-tiny@2", "models": ["ota-2-detector"],
                           "reason": "reload failed: bad model", "failures": 5, "attempt": 4, "next_retry_s": 59.6,
                           "reloads": 0},
              "cameras": {"line1": {"state": "streaming", "inferred": 40, "skipped": 2, "dropped": 12, "errors": 3}}}
    assert format_status(health).splitlines() == [
        "CRITICAL: 1/1 cameras streaming",
        "  triton    ready",
        "  pipeline  CRASH LOOP (yolov3-tiny@2): ota-2-detector: reload failed: bad model; 5 failure(s), attempt 4, "
        "next reload in 60 s",
        "",
        "CAMERA  STATE      FPS  INFERRED  SKIPPED  DROPPED  ERRORS  RECONNECTS",
        "line1   streaming    -        40        2       12       3           -",
    ]
    health["pipeline"] = {"state": "serving", "route": "yolov3-tiny@2", "models": [], "failures": 1, "reloads": 1}
    assert format_status(health).splitlines()[2] == \
        "  pipeline  serving (yolov3-tiny@2), 1 model reload(s), 1 recent failure(s)"


def test_format_status_shows_each_zone_and_line_count() -> None:
    analytics = {"line1": {"active_tracks": 3, "events": 5, "events_by_type": {"cross": 2, "enter": 3},
                           "last_event_seq": 5, "snapshots_dropped": 0,
                           "zones": {"cell": {"current": 1, "entered": 3, "exited": 2}},
                           "lines": {"door": {"in": 2, "out": 0}}}}
    lines = format_status({**FULL, "analytics": analytics}).splitlines()
    assert lines[-4:] == [
        "CAMERA  ZONE/LINE                             NOW  ENTERED  EXITED  IN  OUT",
        "line1   zone cell                               1        3       2",
        "line1   line door                                                    2    0",
        "line1   (3 tracks; events: cross 2, enter 3)",
    ], "\n".join(lines)
