"""The snapshot ring on disk through the real health HTTP server: the newest ``keep`` per camera, 404 once
trimmed, nothing but indexed snapshots served whatever the path says, and the index rebuilt after a restart
from the sidecars (even when the files share one mtime)."""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest

from appliance.analytics.config import SnapshotConfig
from appliance.analytics.draw import DrawnBox
from appliance.health.routes import health_routes
from appliance.pipeline.snapshots import SnapshotJob, SnapshotStore, SnapshotWorker, encode_snapshot
from appliance.web.files import snapshot_routes
from appliance.webserver.server import WebServer

W, H = 160, 120


def _job(n: int, camera: str = "cam") -> SnapshotJob:
    """Snapshot n of a camera: its own grey level, one box, events ``ev-<camera>-<n>-a`` and ``-b``."""
    pixels = np.full((H, W, 3), 20 * n, np.uint8)
    return SnapshotJob(f"snap{camera}{n:04d}", camera, n, 1000.0 + n, pixels, "bgr",
                       [DrawnBox((10.0, 10.0, 50.0, 90.0), n, "person", 0.9)],
                       [f"ev-{camera}-{n}-a", f"ev-{camera}-{n}-b"], frozenset({n}))


def _save(store: SnapshotStore, jobs: list[SnapshotJob]) -> list[bytes]:
    """Encode and save through the real worker; returns what it published (the JPEG of each, in order)."""
    published: list[bytes] = []
    configs = {camera: SnapshotConfig(max_width=W) for camera in {j.camera_id for j in jobs}}
    worker = SnapshotWorker(store, configs, lambda _c, jpeg, _p: published.append(jpeg), queue_size=len(jobs))
    for job in jobs:
        assert worker.offer(job)
    worker.stop()
    assert len(published) == len(jobs)
    return published


class Http:
    """The HTTP server serving ``store``'s snapshots, as the appliance wires it with the page off."""

    def __init__(self, store: SnapshotStore) -> None:
        routes = health_routes(lambda: b"", lambda: {"ok": True}) + snapshot_routes(store)
        self.server = WebServer("127.0.0.1", 0, routes)

    def get(self, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=10)
        try:
            conn.request("GET", path)  # sent as written: no client-side normalisation of ".."
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


@pytest.fixture
def serve() -> Iterator[list[Http]]:
    servers: list[Http] = []
    yield servers
    for s in servers:
        s.server.close()


def _http(serve: list[Http], store: SnapshotStore) -> Http:
    serve.append(Http(store))
    return serve[-1]


def test_only_the_newest_keep_stay_and_a_trimmed_event_is_404(tmp_path: Path, serve: list[Http]) -> None:
    store = SnapshotStore(tmp_path, {"cam": 3})
    jpegs = _save(store, [_job(n) for n in range(1, 6)])
    files = sorted(p.name for p in (tmp_path / "cam").iterdir())
    assert files == sorted(f"snapcam{n:04d}{ext}" for n in (3, 4, 5) for ext in (".jpg", ".json"))
    web = _http(serve, store)
    for n in (1, 2):
        assert web.get(f"/events/ev-cam-{n}-a.jpg")[0] == 404
        assert web.get(f"/events/ev-cam-{n}-b.jpg")[0] == 404
    for n in (3, 4, 5):
        assert web.get(f"/events/ev-cam-{n}-a.jpg") == (200, jpegs[n - 1])
        assert web.get(f"/events/ev-cam-{n}-b.jpg") == (200, jpegs[n - 1])  # one snapshot, two events
    assert web.get("/cameras/cam/latest.jpg") == (200, jpegs[4])
    assert jpegs[4][:2] == b"\xff\xd8" and len(set(jpegs)) == 5


def test_paths_that_leave_the_index_are_404(tmp_path: Path, serve: list[Http]) -> None:
    root = tmp_path / "snapshots"
    store = SnapshotStore(root, {"cam": 5})
    _save(store, [_job(1)])
    # decoys a traversal would reach: a JPEG beside the camera folders, one outside the snapshot root, and a
    # folder of a camera that is not configured
    (root / "latest.jpg").write_bytes(b"\xff\xd8root")
    (tmp_path / "secret.jpg").write_bytes(b"\xff\xd8secret")
    (root / "other").mkdir()
    (root / "other" / "latest.jpg").write_bytes(b"\xff\xd8other")
    web = _http(serve, store)
    assert web.get("/cameras/cam/latest.jpg")[0] == 200  # the real route works on this server
    for path in ("/cameras/../latest.jpg", "/cameras/..%2F../latest.jpg", "/cameras/cam/../../secret.jpg",
                 "/cameras/other/latest.jpg", "/cameras/%2E%2E/latest.jpg", "/cameras//latest.jpg",
                 "/events/../secret.jpg", "/events/..%2F..%2Fsecret.jpg", "/events/../../secret.jpg",
                 "/events/snapcam0001.jpg",  # a snapshot's file name is not an event id
                 "/events/ev-cam-1-a", "/cameras/cam/latest.png", "/snapshots/cam/snapcam0001.jpg"):
        status, body = web.get(path)
        assert status == 404, path
        assert not body.startswith(b"\xff\xd8"), path


def test_the_index_is_rebuilt_after_a_restart(tmp_path: Path, serve: list[Http]) -> None:
    first = SnapshotStore(tmp_path, {"cam": 4, "yard": 4})
    jpegs = _save(first, [_job(n) for n in range(1, 5)])
    yard = _save(first, [_job(1, "yard")])
    # file times can be one kernel tick coarse: snapshots saved back to back then share an mtime
    for p in (tmp_path / "cam").iterdir():
        os.utime(p, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    (tmp_path / "cam" / "broken.json").write_text("{not json")  # a torn sidecar is skipped, not fatal
    (tmp_path / "cam" / "partial.json").write_text(json.dumps({"snapshot_id": "partial"}))

    again = SnapshotStore(tmp_path, {"cam": 2, "yard": 4})  # restarted with a smaller keep
    assert sorted(p.name for p in (tmp_path / "cam").glob("snap*")) == sorted(
        f"snapcam{n:04d}{ext}" for n in (3, 4) for ext in (".jpg", ".json"))  # the oldest two trimmed
    web = _http(serve, again)
    assert web.get("/cameras/cam/latest.jpg") == (200, jpegs[3])  # newest by capture time, not by glob order
    assert web.get("/events/ev-cam-3-b.jpg") == (200, jpegs[2])
    assert web.get("/events/ev-cam-1-a.jpg")[0] == 404
    assert web.get("/cameras/yard/latest.jpg") == (200, yard[0])
    assert web.get("/events/ev-yard-1-a.jpg") == (200, yard[0])
    # and it carries on as a ring from there
    more = _save(again, [_job(5)])
    assert web.get("/cameras/cam/latest.jpg") == (200, more[0])
    assert web.get("/events/ev-cam-3-a.jpg")[0] == 404 and web.get("/events/ev-cam-4-a.jpg")[0] == 200


def test_the_event_box_is_drawn_over_the_boxes_that_overlap_it() -> None:
    # Two walkers side by side, the event's one listed first: its red edge stays whole where the other's green
    # box crosses it (x=40 and 70 cross the event box's top and bottom edges).
    pixels = np.zeros((H, W, 3), np.uint8)
    boxes = [DrawnBox((20.0, 20.0, 60.0, 100.0), 1, "person", 0.9),
             DrawnBox((40.0, 10.0, 70.0, 110.0), 2, "person", 0.9)]
    job = SnapshotJob("snapoverlap", "cam", 1, 1000.0, pixels, "bgr", boxes, ["ev"], frozenset({1}))
    image = cv2.imdecode(np.frombuffer(encode_snapshot(job, SnapshotConfig(max_width=W, jpeg_quality=100)), np.uint8),
                         cv2.IMREAD_COLOR).astype(int)
    top, bottom = image[20, 20:61], image[100, 20:61]
    for edge in (top, bottom):
        red = (edge[:, 2] > 150) & (edge[:, 1] < 110) & (edge[:, 0] < 110)
        assert red.all(), edge[~red]
