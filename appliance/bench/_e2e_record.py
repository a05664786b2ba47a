"""``appliance bench e2e --record``: the appliance with every camera recording versus recording off, alternated
(off, on, on, off after an uncounted warm-up run) so a drift in the machine's load cancels out. The sample video
is a compressed file, so this measures what recording a compressed stream costs: PyAV demuxing and decoding
instead of OpenCV, and the packets copied into MP4 segments (no second decode, no encode)."""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from pathlib import Path


def _footage_bytes(workdir: Path) -> int:
    return sum(p.stat().st_size for p in (workdir / "state" / "recordings").glob("*/*.mp4"))


def record_vs_off(bench: Callable[..., tuple[float, list[float]]], workdir: Path, video: Path, port: int,
                  cameras: int, fps: float, seconds: float) -> list[str]:
    """The report's lines (``bench``: e2e.bench_appliance), ``e2e_record_vs_off=<ratio of the means>`` last."""
    bench(workdir, video, port, cameras, fps, seconds / 2)  # warm-up, not counted
    rates: dict[bool, list[float]] = {False: [], True: []}
    p50s: dict[bool, list[float]] = {False: [], True: []}
    kept = 0
    for record in (False, True, True, False):
        before = _footage_bytes(workdir)
        rate, latencies = bench(workdir, video, port, cameras, fps, seconds, record=record)
        kept += _footage_bytes(workdir) - before if record else 0
        rates[record].append(rate)
        p50s[record].append(statistics.median(latencies) if latencies else float("nan"))
    rows = [("recording off (runs 1, 4)", False), ("every camera recording (runs 2, 3)", True)]
    return [f"{'alternative':<56}{'results/s':>18}{'p50 ms':>16}",
            *(f"{label:<56}{' / '.join(f'{r:.2f}' for r in rates[v]):>18}"
              f"{' / '.join(f'{p:.0f}' for p in p50s[v]):>16}" for label, v in rows),
            f"footage written: {kept / 1e6:.1f} MB in {2 * seconds:g} s of {cameras} cameras; load average "
            f"{os.getloadavg()[0]:.1f} at the end on {os.cpu_count()} CPUs",
            f"e2e_record_vs_off={statistics.fmean(rates[True]) / statistics.fmean(rates[False]):.3f}"]
