"""The embedded server's stubs start with glibc's malloc settings for frame-sized blocks, and those settings stop
the page faults a stub's per-frame copies cause (counted by the kernel, not timed); an operator's own
GLIBC_TUNABLES is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from appliance.triton import stubmalloc
from appliance.triton.server import Server

# A preprocess stub's allocations for one 640x480 frame, 200 times: the input copied out of shared memory, the
# resized frame, the letterboxed canvas and its copy into the response. Prints the minor page faults of the
# last 200 (the first round warms the heap up).
FRAMES = """
import resource
import numpy as np
def frames():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(200):
        frame = np.empty((480, 640, 3), np.uint8); frame.fill(1)
        small = np.empty((312, 416, 3), np.uint8); small.fill(2)
        canvas = np.empty((416, 416, 3), np.uint8); canvas.fill(114)
        del frame, small
        out = canvas.copy(); del canvas, out
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
frames()
print(frames())
"""


def _environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    return dict(e.split("=", 1) for e in entries if "=" in e)


def _faults(env: dict[str, str]) -> int:
    return int(subprocess.run([sys.executable, "-c", FRAMES], env=env, capture_output=True, text=True,
                              check=True).stdout)


def test_the_stubs_start_with_settings_that_stop_the_per_frame_page_faults(server: Server) -> None:
    pids = server.stub_pids()
    assert pids, "the shared server runs Python models"
    assert os.environ["GLIBC_TUNABLES"] == stubmalloc.TUNABLES  # what a stub inherits when Triton starts it
    for pid in pids:
        # glibc (2.36) parses the variable in place at start-up: /proc shows it cut after the first tunable
        seen = _environ(pid).get("GLIBC_TUNABLES", "")
        assert seen and (stubmalloc.TUNABLES + ":").startswith(seen + ":"), (pid, seen)
    plain = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    without, with_them = _faults(plain), _faults({**plain, "GLIBC_TUNABLES": stubmalloc.TUNABLES})
    assert without > 200 * 100, without  # glibc's defaults fault a few hundred pages in per frame
    assert with_them < without / 50, (with_them, without)


def test_an_operators_own_tunables_are_kept() -> None:
    env = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}
    assert not stubmalloc.keep_frame_blocks(env)
    assert env == {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}
    empty = {"GLIBC_TUNABLES": ""}  # set empty on purpose: glibc's defaults
    assert not stubmalloc.keep_frame_blocks(empty) and empty["GLIBC_TUNABLES"] == ""
    fresh: dict[str, str] = {}
    assert stubmalloc.keep_frame_blocks(fresh) and fresh == {"GLIBC_TUNABLES": stubmalloc.TUNABLES}
