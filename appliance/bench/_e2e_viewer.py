"""One person on a camera's live view in ``appliance bench e2e --viewer``: the picture fetched as the camera page
fetches it (the next request as soon as the last answer came, plus the page's 250 ms pause) and the page's event
stream held open, so the run measures what a watched camera costs the appliance."""

from __future__ import annotations

import http.client
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance.mqtt.localbroker import free_port

FRAME_PAUSE_S = 0.25  # camera.js waits this long between pictures


class Viewer:
    """Start with :meth:`start`; :meth:`stop` returns how many pictures it received."""

    def __init__(self, port: int, camera: str) -> None:
        self._port, self._camera = port, camera
        self._stop = threading.Event()
        self.pictures = 0
        self._threads = [threading.Thread(target=self._pictures, name="bench-viewer", daemon=True),
                         threading.Thread(target=self._stream, name="bench-viewer-sse", daemon=True)]

    def start(self) -> "Viewer":
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        return self.pictures

    def _pictures(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self._port, timeout=5)
        while not self._stop.is_set():
            try:
                conn.request("GET", f"/api/cameras/{self._camera}/frame.jpg")
                response = conn.getresponse()
                body = response.read()
                if response.status == 200 and body:
                    self.pictures += 1
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self._port, timeout=5)
            self._stop.wait(FRAME_PAUSE_S)
        conn.close()

    def _stream(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self._port, timeout=2)
        try:
            conn.request("GET", f"/api/stream?camera={self._camera}")
            response = conn.getresponse()
            while not self._stop.is_set():
                try:
                    response.readline()
                except TimeoutError:
                    continue
        except (OSError, http.client.HTTPException):
            time.sleep(0)  # the appliance went away: nothing more to read
        finally:
            conn.close()


def health_section(page: dict[str, int] | None) -> str:
    if page is None:
        return "health: {enabled: false, tegrastats_interval_ms: null}"
    return f"health: {{host: 127.0.0.1, port: {free_port()}, tegrastats_interval_ms: null}}"


def watch(app: Any, page: dict[str, int] | None) -> Viewer | None:
    """Someone on cam0's live view, when ``page`` asks for a viewer."""
    if page is None or not page.get("viewers"):
        return None
    server = app.running.health_server
    assert server is not None and server.port is not None, "the page is not served"
    return Viewer(server.port, "cam0").start()


def side_by_side(bench: Callable[..., tuple[float, list[float]]], workdir: Path, video: Path, port: int,
                 cameras: int, fps: float, seconds: float) -> list[str]:
    """The appliance with its page served and nobody watching, with one viewer on cam0, and unwatched again,
    one after another under the same load (``bench``: e2e.bench_appliance); the report's lines, the ratio last."""
    runs = []
    for viewers in (0, 1, 0):
        page = {"viewers": viewers}
        rate, latencies = bench(workdir, video, port, cameras, fps, seconds, page=page)
        runs.append((rate, statistics.median(latencies) if latencies else float("nan"), page.get("pictures", 0)))
    (before, p50_before, _), (watched, p50_watched, pictures), (after, p50_after, _) = runs
    unwatched = (before + after) / 2
    return [f"{'alternative':<56}{'results/s':>10}{'p50 ms':>9}",
            f"{'page served, nobody watching (before)':<56}{before:>10.2f}{p50_before:>9.1f}",
            f"{f'one viewer on cam0 ({pictures} pictures, {pictures / seconds:.1f}/s)':<56}{watched:>10.2f}"
            f"{p50_watched:>9.1f}",
            f"{'page served, nobody watching (after)':<56}{after:>10.2f}{p50_after:>9.1f}",
            f"viewer_pictures_per_s={pictures / seconds:.2f}",
            f"e2e_viewer_vs_unwatched={watched / unwatched:.3f}"]
