"""The operator's page served by the real WebServer with the real page routes, site and event feed, filled
with as many events as a test wants: the running appliance's feed is in its own process, and waiting for 500
real events would take an hour of vtest.avi. Only the health summary is a stand-in (a camera list)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from appliance.events import Event
from appliance.health.routes import health_routes
from appliance.pipeline.layouts import Layouts
from appliance.supervisor.page import ApplianceSite
from appliance.web.auth import Auth
from appliance.web.feed import EventFeed
from appliance.web.live import LiveFrames
from appliance.web.routes import page_routes
from appliance.webserver.server import WebServer

KINDS = ("enter", "exit", "cross", "dwell")


def event(n: int, camera: str, start: float) -> Event:
    """The n-th event (1-based): kinds in turn; a line's for `cross`, else zone `floor`; one a second."""
    kind: Any = KINDS[(n - 1) % len(KINDS)]
    return Event(uuid.uuid4().hex, camera, n, kind, n, 0, "person", 0.9, start + n, n, 768, 576,
                 zone=None if kind == "cross" else "floor", line="walkway" if kind == "cross" else None,
                 direction="in" if kind == "cross" else None)


@contextmanager
def page_with_events(state_dir: Path, counts: dict[str, int], start: float) -> Iterator[int]:
    """The page on 127.0.0.1 (no login) with ``counts[camera]`` events per camera, interleaved; yields the port."""
    feed = EventFeed()
    for n in range(1, max(counts.values()) + 1):
        feed.note([event(n, camera, start) for camera, count in sorted(counts.items()) if n <= count])
    cameras = {camera: {"state": "running", "fps": 0.0} for camera in counts}
    site = ApplianceSite({"id": "demo", "name": "demo"}, lambda: {"ok": True, "cameras": cameras},
                         Layouts([], state_dir, lambda: ["person"]), sorted(counts))
    routes = page_routes(site, Auth({}, open_access=True, session_s=60), LiveFrames(), feed)
    server = WebServer("127.0.0.1", 0, health_routes(lambda: b"", lambda: {"ok": True}) + routes)
    try:
        assert server.port is not None
        yield server.port
    finally:
        server.close()
