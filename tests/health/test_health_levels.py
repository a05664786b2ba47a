"""The health level and its reasons (health.levels), /livez and /readyz on the real HTTP endpoint, and the free
space checks (appliance.diskspace) on a real small filesystem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.httpclient import get
from support.smalldisk import fill, small_tmpfs

from appliance import diskspace
from appliance.health.levels import Readings, assess
from appliance.health.routes import health_routes
from appliance.webserver.server import WebServer

STREAMING = {"state": "streaming"}


def test_the_level_is_the_worst_reading_with_every_reason() -> None:
    assert assess(Readings(progressing=True, serving=True, cameras={"a": STREAMING})) == ("ok", [])
    dead = {"a": STREAMING, "b": {"state": "error", "detail": "could not open rtsp://cam-b/"},
            "c": {"state": "waiting", "waiting_for": "/media/line3.mp4 is not there"}}
    assert assess(Readings(True, True, cameras=dead, disk="disk low: 80 MB free in /var/lib/appliance")) == (
        "degraded", ["camera b is error: could not open rtsp://cam-b/",
                     "camera c is waiting: /media/line3.mp4 is not there",
                     "disk low: 80 MB free in /var/lib/appliance"])
    assert assess(Readings(True, True, results=["disk full: 12 result(s) held in memory"]))[0] == "degraded"
    level, reasons = assess(Readings(False, True, pipeline_error="crash loop: reload failed", cameras=dead))
    assert level == "failed" and reasons[:2] == ["pipeline: crash loop: reload failed",
                                                 "the frame path is not progressing"]
    assert assess(Readings(True, False)) == ("failed", ["the served model is not ready in Triton"])


def _get(url: str) -> tuple[int, dict[str, Any]]:
    reply = get(url)
    return reply.status, reply.json()


def test_livez_follows_the_frame_path_and_readyz_the_level() -> None:
    summary: dict[str, Any] = {"ok": True, "level": "degraded", "live": True,
                               "reasons": ["camera b is error: could not open rtsp://cam-b/"]}
    server = WebServer("127.0.0.1", 0, health_routes(lambda: b"", lambda: summary))
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert _get(f"{base}/livez") == (200, {"ok": True, "level": "degraded", "reasons": summary["reasons"]})
        assert _get(f"{base}/readyz")[0] == 503
        assert _get(f"{base}/healthz") == (200, summary)  # the whole summary, 503 only when failed
        summary.update(level="ok", reasons=[])
        assert _get(f"{base}/readyz") == (200, {"ok": True, "level": "ok", "reasons": []})
        summary.update(ok=False, level="failed", live=False, reasons=["the frame path is not progressing"])
        assert [_get(f"{base}/{path}")[0] for path in ("livez", "readyz", "healthz")] == [503, 503, 503]
    finally:
        server.close()


def test_free_space_is_named_with_the_folder_and_both_sizes(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "state", 8 * diskspace.MB) as state:
        fill(state, 3 * diskspace.MB)
        assert 2.5 * diskspace.MB < diskspace.free_bytes(state / "engines" / "not-yet") <= 3 * diskspace.MB
        assert diskspace.low_space(state, 2 * diskspace.MB) is None
        assert diskspace.low_space(state, 4 * diskspace.MB) == f"disk low: 3.0 MB free in {state} (below 4.0 MB)"
        diskspace.require_space(state, 2 * diskspace.MB, "the engine build")
        with pytest.raises(diskspace.NotEnoughSpace) as refused:
            diskspace.require_space(state, 40 * diskspace.MB, "the engine build")
        assert str(refused.value) == f"not enough space in {state}: the engine build needs about 40 MB, 3.0 MB free"
