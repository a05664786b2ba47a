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

from appliance.harness.ports import free_port

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
    """The appliance with its page served, nobody watching and one viewer on cam0 in turn, twice each, one after
    another under the same load (``bench``: e2e.bench_appliance), after a run that is not counted (the first
    run of a process is slower: caches, the model's first sessions); alternating cancels drift. The report's
    lines, the ratio of the means last."""
    bench(workdir, video, port, cameras, fps, seconds / 2, page={"viewers": 0})  # warm-up, not counted
    rates: dict[int, list[float]] = {0: [], 1: []}
    p50s: dict[int, list[float]] = {0: [], 1: []}
    pictures = 0
    for viewers in (0, 1, 0, 1):
        page = {"viewers": viewers}
        rate, latencies = bench(workdir, video, port, cameras, fps, seconds, page=page)
        rates[viewers].append(rate)
        p50s[viewers].append(statistics.median(latencies) if latencies else float("nan"))
        pictures += page.get("pictures", 0)
    per_s = pictures / (2 * seconds)
    rows = [("page served, nobody watching (runs 1, 3)", 0),
            (f"one viewer on cam0 ({per_s:.1f} pictures/s; runs 2, 4)", 1)]
    return [f"{'alternative':<56}{'results/s':>18}{'p50 ms':>16}",
            *(f"{label:<56}{' / '.join(f'{r:.2f}' for r in rates[v]):>18}"
              f"{' / '.join(f'{p:.0f}' for p in p50s[v]):>16}" for label, v in rows),
            f"viewer_pictures_per_s={per_s:.2f}",
            f"e2e_viewer_vs_unwatched={statistics.fmean(rates[1]) / statistics.fmean(rates[0]):.3f}"]
