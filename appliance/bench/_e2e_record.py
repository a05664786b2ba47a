"""``appliance bench e2e --record``: the appliance with every camera recording versus recording off, alternated
(off, on, on, off after an uncounted warm-up run) so a drift in the machine's load cancels out; twice:

- the sample video as a compressed file camera: what recording a compressed stream costs (PyAV demuxing and
  decoding instead of OpenCV, the packets copied into MP4 segments; no second decode, no encode);
- the same frames as an ``images`` camera (a raw source, as a USB or CSI camera is): what encoding the frames
  to H.264 for the recording costs (the CPU's libx264 here; NVENC on a Jetson that has it).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from pathlib import Path


def _footage_bytes(workdir: Path) -> int:
    return sum(p.stat().st_size for p in (workdir / "state" / "recordings").glob("*/*.mp4"))


def _alternate(bench: Callable[..., tuple[float, list[float]]], workdir: Path, video: Path, port: int,
               cameras: int, fps: float, seconds: float, images: Path | None) -> tuple[dict, dict, int]:
    """results/s and p50 ms of the runs off, on, on, off (after a warm-up), and the footage they wrote; with
    ``images``, the cameras play that folder (bench_appliance takes a folder as an images camera)."""
    shown = images or video
    bench(workdir, shown, port, cameras, fps, seconds / 2)  # warm-up, not counted
    rates: dict[bool, list[float]] = {False: [], True: []}
    p50s: dict[bool, list[float]] = {False: [], True: []}
    kept = 0
    for record in (False, True, True, False):
        before = _footage_bytes(workdir)
        rate, latencies = bench(workdir, shown, port, cameras, fps, seconds, record=record)
        kept += _footage_bytes(workdir) - before if record else 0
        rates[record].append(rate)
        p50s[record].append(statistics.median(latencies) if latencies else float("nan"))
    return rates, p50s, kept


def _still_frames(video: Path, folder: Path) -> Path:
    """The sample video's frames as JPEG files: a raw ``images`` camera showing what the file camera shows."""
    import cv2

    from appliance.bench._e2e_baselines import video_frames

    folder.mkdir(parents=True, exist_ok=True)
    for n, frame in enumerate(video_frames(video)):
        cv2.imwrite(str(folder / f"{n:05d}.jpg"), frame, [cv2.IMWRITE_JPEG_QUALITY, 95])
    return folder


def record_vs_off(bench: Callable[..., tuple[float, list[float]]], workdir: Path, video: Path, port: int,
                  cameras: int, fps: float, seconds: float) -> list[str]:
    """The report's lines (``bench``: e2e.bench_appliance), ``e2e_record_vs_off=`` (the file camera) and
    ``e2e_record_raw_vs_off=`` (the raw camera, its frames encoded) last, each the ratio of the means."""
    lines = [f"{'alternative':<66}{'results/s':>18}{'p50 ms':>16}"]
    ratios = []
    raw = _still_frames(video, workdir / "raw")
    for name, images in (("file camera", None), ("raw camera (images, encoded)", raw)):
        rates, p50s, kept = _alternate(bench, workdir, video, port, cameras, fps, seconds, images)
        rows = [(f"{name}: recording off (runs 1, 4)", False), (f"{name}: every camera recording (runs 2, 3)", True)]
        lines += [*(f"{label:<66}{' / '.join(f'{r:.2f}' for r in rates[v]):>18}"
                    f"{' / '.join(f'{p:.0f}' for p in p50s[v]):>16}" for label, v in rows),
                  f"{name}: footage written: {kept / 1e6:.1f} MB in {2 * seconds:g} s of {cameras} cameras; load "
                  f"average {os.getloadavg()[0]:.1f} at the end on {os.cpu_count()} CPUs"]
        ratios.append(statistics.fmean(rates[True]) / statistics.fmean(rates[False]))
    return [*lines, f"e2e_record_vs_off={ratios[0]:.3f}", f"e2e_record_raw_vs_off={ratios[1]:.3f}"]
