"""20,000 requests through the real server: memory stays flat and every Triton handle is released once."""

from __future__ import annotations

import gc
import os
import threading
from multiprocessing import shared_memory

import numpy as np
import pytest

from appliance.triton import infer
from appliance.triton.infer import InputBuffer
from appliance.triton.server import Server

TOTAL = 20_000
WARMUP = 2_000
WINDOW = 32  # requests in flight at once: keeps the test quick on 2 cores
ROW = 256  # floats per request: 1 KiB in, 1 KiB out; a per-request leak of either would show
ALLOWED_GROWTH = 8 * 1024 * 1024  # 18,000 leaked 1 KiB outputs alone would be 18 MiB


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_requests(server: Server, count: int, shm: shared_memory.SharedMemory) -> tuple[int, int]:
    """``count`` requests, alternating numpy and shared-memory inputs; returns (wrong results, releases)."""
    window = threading.Semaphore(WINDOW)
    tally = {"wrong": 0, "released": 0}
    src = np.ndarray((1, ROW), np.float32, buffer=shm.buf)
    src[:] = np.arange(ROW, dtype=np.float32)
    del src
    expected = np.arange(ROW, dtype=np.float32)[None] * 2
    shm_input = InputBuffer(shm.buf, np.float32, (1, ROW))

    done = threading.Condition()

    def released() -> None:
        with done:
            tally["released"] += 1
            done.notify_all()
        window.release()

    def check(fut: infer.InferFuture) -> None:
        ok = fut.exception() is None and np.array_equal(fut.result()["Y"], expected)
        with done:
            tally["done"] += 1
            tally["wrong"] += not ok
            done.notify_all()

    tally["done"] = 0
    for i in range(count):  # futures are not kept: holding 18,000 results would look like a leak
        window.acquire()
        x = shm_input if i % 2 else np.arange(ROW, dtype=np.float32)[None]
        server.infer_async("echo", {"X": x}, on_inputs_released=released).add_done_callback(check)
    with done:
        assert done.wait_for(lambda: tally["done"] == count and tally["released"] == count, timeout=120)
    return tally["wrong"], tally["released"]


@pytest.mark.slow
def test_rss_stable_and_handles_released_over_20000_requests(server: Server) -> None:
    shm = shared_memory.SharedMemory(create=True, size=ROW * 4)
    try:
        wrong, released = run_requests(server, WARMUP, shm)
        assert (wrong, released) == (0, WARMUP)
        gc.collect()
        before_rss, before = rss_bytes(), server.counters.snapshot()

        wrong, released = run_requests(server, TOTAL - WARMUP, shm)
        gc.collect()
        after_rss, after = rss_bytes(), server.counters.snapshot()
    finally:
        shm.close()  # BufferError here would mean a request still held the shared memory
        shm.unlink()
    assert (wrong, released) == (0, TOTAL - WARMUP)
    delta = {k: after[k] - before[k] for k in after}
    n = TOTAL - WARMUP
    assert delta["requests_created"] == delta["requests_deleted"] == n
    assert delta["responses_received"] == delta["responses_deleted"] == n
    assert delta["buffers_allocated"] == delta["buffers_released"] == n
    assert delta["inputs_released"] == n
    assert not server._runtime.pending and not server._runtime.buffers  # nothing left in our registries
    assert after_rss - before_rss < ALLOWED_GROWTH, f"RSS grew by {(after_rss - before_rss) / 2**20:.1f} MiB"
