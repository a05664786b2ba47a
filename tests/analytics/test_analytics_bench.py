"""`appliance bench analytics` prints one key=value line per size, the 20-object line last, and the figures stay
inside a frame budget: the bench reports CPU time of the calling thread (not wall time), so the bound holds on a
loaded machine too."""

from __future__ import annotations

import re

from support.cli import run_appliance

# Sanity ceilings, not speed claims: a camera at 10 fps leaves 100 ms per frame for everything, and analytics is
# one stage of it. 20 objects over 50 ms CPU per frame (the documented figure is ~0.4 ms on a 2-core host) would
# be a regression of two orders of magnitude; 100 objects get five times that.
CEILING_MS = {1: 50.0, 20: 50.0, 100: 250.0}


def test_bench_analytics_prints_its_keys_with_20_objects_last_within_a_frame_budget() -> None:
    done = run_appliance("bench", "analytics", "--frames", "20", "--rounds", "1")
    out = done.stdout.strip().splitlines()
    keys = [re.fullmatch(r"analytics_ms_per_frame_(\d+)_objects=(\d+\.\d+)", line) for line in out]
    assert all(keys), out
    ms = {int(k.group(1)): float(k.group(2)) for k in keys if k}
    assert sorted(ms) == [1, 20, 100] and out[-1].startswith("analytics_ms_per_frame_20_objects=")
    assert all(0 < ms[n] < CEILING_MS[n] for n in ms), ms
    # The timed work was real: 20 walkers crossing two lines and two zones for 20 frames raise events (stderr).
    events = re.search(r"20 objects: .*\((\d+) events in 20 frames\)", done.stderr)
    assert events and int(events.group(1)) > 0, done.stderr
