"""`appliance bench analytics` prints one key=value line per size, the 20-object line last."""

from __future__ import annotations

import re
import subprocess
import sys


def test_bench_analytics_prints_its_keys_with_20_objects_last() -> None:
    out = subprocess.run([sys.executable, "-m", "appliance", "bench", "analytics", "--frames", "20", "--rounds", "1"],
                         capture_output=True, text=True, timeout=120, check=True).stdout.strip().splitlines()
    keys = [re.fullmatch(r"analytics_ms_per_frame_(\d+)_objects=(\d+\.\d+)", line) for line in out]
    assert all(keys), out
    assert sorted(int(k.group(1)) for k in keys if k) == [1, 20, 100]
    assert out[-1].startswith("analytics_ms_per_frame_20_objects=") and all(float(k.group(2)) > 0 for k in keys if k)
