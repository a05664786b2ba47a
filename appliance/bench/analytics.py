"""``appliance bench analytics``: tracking + zones + lines + events per frame at 1, 20 and 100 objects.

Synthetic but physically plausible scenes: N people-sized boxes walk across a 1920x1080 frame at constant
velocity with detector-like jitter on their boxes and scores, bouncing off the edges, so they cross the
configured line, enter and leave the zones and overlap each other. One in ten detections is low-score (the
tracker's second stage), and a few per cent go missing (occlusions). The scenes are made before the clock
starts; the timed part is exactly :meth:`appliance.analytics.events.Analytics.step` per frame, which is what
the supervisor's result path will call. Each size runs ``--rounds`` rounds; the reported figure is the median
round's mean milliseconds per frame of the calling thread's CPU time (``time.thread_time``): on a machine whose
two cores are shared with other jobs, wall time counts the time this process waits for a core, which is not
the cost of the code; the wall-clock figure is printed beside it on stderr. The last line is
``analytics_ms_per_frame_20_objects=<ms>`` (target on a 2-core CPU: <= 1.0).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from appliance.analytics.config import AnalyticsConfig, LineConfig, ZoneConfig
from appliance.analytics.events import Analytics
from appliance.detections import Detections
from appliance.helptext import plain_help

WIDTH, HEIGHT = 1920, 1080
SIZES = (1, 100, 20)  # 20 last: its line is the benchmark's last line


def scene(objects: int, frames: int, seed: int = 0) -> list[Detections]:
    """``frames`` frames of ``objects`` walkers, as the detector would report them."""
    rng = np.random.default_rng(seed)
    size = rng.uniform([40, 100], [80, 220], size=(objects, 2))              # w, h
    pos = rng.uniform([0, 0], [WIDTH, HEIGHT], size=(objects, 2))           # centre
    vel = rng.uniform(-12, 12, size=(objects, 2))                            # pixels per frame
    out = []
    for _ in range(frames):
        pos += vel
        bounce = (pos < 0) | (pos > [WIDTH, HEIGHT])
        vel[bounce] *= -1
        pos = np.clip(pos, 0, [WIDTH, HEIGHT])
        jitter = rng.normal(0, 2.0, size=(objects, 4))
        half = size / 2
        boxes = np.concatenate([pos - half, pos + half], axis=1) + jitter
        scores = np.where(rng.random(objects) < 0.1, rng.uniform(0.15, 0.45, objects), rng.uniform(0.5, 0.95, objects))
        visible = rng.random(objects) > 0.03
        out.append(Detections.untracked(boxes[visible].astype(np.float32), scores[visible].astype(np.float32),
                                        np.zeros(int(visible.sum()), dtype=np.int64)))
    return out


def config() -> AnalyticsConfig:
    """Two zones with dwell, two lines: a typical cell."""
    return AnalyticsConfig(
        classes={"person": 0.5},
        zones=[ZoneConfig(name="cell", units="normalized", points=[(0.1, 0.1), (0.5, 0.1), (0.5, 0.6), (0.1, 0.6)],
                          dwell_s=2.0),
               ZoneConfig(name="aisle", units="normalized", points=[(0.55, 0.2), (0.95, 0.3), (0.9, 0.9), (0.6, 0.8)],
                          dwell_s=5.0)],
        lines=[LineConfig(name="door", units="normalized", a=(0.0, 0.5), b=(1.0, 0.5), in_side="right"),
               LineConfig(name="gate", units="normalized", a=(0.7, 0.0), b=(0.7, 1.0), in_side="left")])


def measure(objects: int, frames: int, rounds: int, fps: float = 10.0) -> tuple[float, float, int]:
    """Median over rounds of CPU and of wall ms per frame, and the events of one round."""
    dets = scene(objects, frames, seed=objects)
    cpu, wall, events = [], [], 0
    for _ in range(rounds):
        analytics = Analytics("bench", config(), ["person"], WIDTH, HEIGHT)
        events = 0
        start_cpu, start_wall = time.thread_time(), time.perf_counter()
        for i, d in enumerate(dets):
            _, evs, _ = analytics.step(i, i / fps, d)
            events += len(evs)
        cpu.append((time.thread_time() - start_cpu) * 1000 / frames)
        wall.append((time.perf_counter() - start_wall) * 1000 / frames)
    return statistics.median(cpu), statistics.median(wall), events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="appliance bench analytics", description=plain_help(__doc__))
    parser.add_argument("--frames", type=int, default=300, help="frames per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per size; the median round counts")
    args = parser.parse_args(argv)
    if args.frames < 1 or args.rounds < 1:
        parser.error("--frames and --rounds must be at least 1")
    results = {}
    for objects in SIZES:
        ms, wall, events = measure(objects, args.frames, args.rounds)
        results[objects] = ms
        print(f"{objects:>4} objects: {ms:.3f} ms/frame CPU, {wall:.3f} ms/frame wall "
              f"({events} events in {args.frames} frames)", file=sys.stderr, flush=True)
    for objects in SIZES:
        print(f"analytics_ms_per_frame_{objects}_objects={results[objects]:.3f}")
    return 0
