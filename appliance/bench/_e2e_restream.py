"""``appliance bench e2e --restream``: the appliance with the restream off, on with nobody watching, with one
RTSP client on cam0's annotated stream and with four (sharing its encoder), so the run shows that an unwatched
restream costs nothing and what a watched one costs. The clients are ffmpeg, receiving the stream without decoding it
(they share the machine's CPUs)."""

from __future__ import annotations

import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance.harness.ports import free_port
from appliance.procs import stop_process

# (label, restream enabled, clients on cam0/annotated)
MODES = {"off": ("restream off", False, 0), "unwatched": ("restream on, no client", True, 0),
         "one": ("one client on cam0/annotated", True, 1), "four": ("four clients on cam0/annotated", True, 4)}
ORDER = ("off", "unwatched", "one", "four", "four", "one", "unwatched", "off")  # drift cancels out


def restream_section(restream: dict[str, Any] | None) -> str:
    """The config's restream section (with its line break before), or nothing when the restream is off."""
    if restream is None or not restream.get("enabled"):
        return ""
    return f"\nrestream: {{enabled: true, port: {free_port()}, fps: 10}}"


class Clients:
    """``count`` ffmpeg processes reading rtsp://127.0.0.1:<port>/cam0/annotated; :meth:`stop` ends them."""

    def __init__(self, port: int, count: int, report: dict[str, Any]) -> None:
        url, self._report = f"rtsp://127.0.0.1:{port}/cam0/annotated", report
        # -c copy: the clients receive without decoding, so their CPU is not counted against the appliance's
        command = ["ffmpeg", "-v", "error", "-rtsp_transport", "tcp", "-i", url, "-c", "copy", "-f", "null", "-"]
        self._procs: list[subprocess.Popen[bytes]] = [
            subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(count)]

    def stop(self) -> None:
        """Ends the clients; the report's "alive": how many were still reading (one that failed early is not)."""
        self._report["alive"] = sum(proc.poll() is None for proc in self._procs)
        for proc in self._procs:
            stop_process(proc, timeout_s=5)


def watch_rtsp(app: Any, restream: dict[str, Any] | None) -> Clients:
    """``restream["clients"]`` ffmpeg clients on the running appliance's cam0/annotated (none: no process)."""
    if restream is None or not restream.get("clients"):
        return Clients(0, 0, restream if restream is not None else {})
    found = app.running.inference.restream
    assert found is not None, "the restream is not running"
    return Clients(found.server.port, int(restream["clients"]), restream)


def alternate(bench: Callable[..., tuple[float, list[float]]], workdir: Path, video: Path, port: int,
              cameras: int, fps: float, seconds: float) -> list[str]:
    """Every mode twice in ORDER after an uncounted warm-up (``bench``: e2e.bench_appliance); the report's
    lines, ``e2e_restream_unwatched_vs_off`` and the watched cost last."""
    bench(workdir, video, port, cameras, fps, seconds / 2)  # warm-up, not counted
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    alive: dict[str, int] = {mode: 0 for mode in MODES}
    for mode in ORDER:
        _label, enabled, clients = MODES[mode]
        restream: dict[str, Any] = {"enabled": enabled, "clients": clients}
        rate, _latencies = bench(workdir, video, port, cameras, fps, seconds, restream=restream)
        rates[mode].append(rate)
        alive[mode] += restream.get("alive", 0)
    mean = {mode: statistics.fmean(r) for mode, r in rates.items()}
    return [f"{'alternative':<44}{'results/s':>18}{'clients at the end':>22}",
            *(f"{MODES[m][0]:<44}{' / '.join(f'{r:.2f}' for r in rates[m]):>18}{alive[m]:>22}" for m in MODES),
            f"e2e_restream_one_client_vs_off={mean['one'] / mean['off']:.3f}",
            f"e2e_restream_four_clients_vs_off={mean['four'] / mean['off']:.3f}",
            f"e2e_restream_unwatched_vs_off={mean['unwatched'] / mean['off']:.3f}"]
