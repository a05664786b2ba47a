"""A Python model with per-stage custom metrics reloaded while frames are in flight, as the appliance drives it.

The appliance loads its composing models, then the ensemble; the stubs' ``__pycache__`` makes Triton see the
composing models as changed, so it reloads them while the scheduler is already feeding frames (an OTA reload
does the same). With metric labels shared by the old and the new stub, the old stub's Metric deletion freed the
Prometheus series the new stub kept incrementing: heap corruption in the Triton process (``malloc(): unaligned
fastbin chunk``, ``tcache_thread_shutdown()``, SIGSEGV) within seconds. A crash kills the process it happens
in, so the workload runs in a child process and the test checks that the child lived and every frame came back.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

MODELS = Path(__file__).parent / "models"
MODEL = "metered"
RELOADS = 3
SERVE_AFTER_RELOAD_S = 2.5  # the new stubs push their metrics at most once a second
FPS = 50  # per camera, two cameras


def _reload_while_serving(server: Any, repo: Path) -> int:
    """Reload ``metered`` RELOADS times, serving SERVE_AFTER_RELOAD_S before and after each; how many reloads
    replaced every stub (an appliance.triton Server: imported in the child only)."""
    reloaded = 0
    time.sleep(SERVE_AFTER_RELOAD_S)
    for i in range(RELOADS):
        old = set(server.stub_pids())
        # A new file in the version directory (as the stub's __pycache__ is): Triton reloads a changed model.
        (repo / MODEL / "1" / f"changed-{i}").write_text("")
        server.load_model(MODEL)
        deadline = time.monotonic() + 60
        while set(server.stub_pids()) & old and time.monotonic() < deadline:  # old stubs drop their metrics
            time.sleep(0.05)
        new = set(server.stub_pids())
        print(f"reload {i}: stubs {sorted(old)} -> {sorted(new)}", flush=True)
        reloaded += bool(new) and not (new & old)
        time.sleep(SERVE_AFTER_RELOAD_S)
    return reloaded


def _workload(repo: Path) -> int:
    """Child process: serve ``metered`` through the appliance's scheduler and reload it RELOADS times."""
    import threading

    import numpy as np

    from appliance.pipeline.scheduler import Scheduler
    from appliance.triton import Server, ServerOptions

    frames = [np.full((480, 640, 3), value, np.uint8) for value in (10, 20, 30, 40)]
    lock = threading.Lock()
    counts = {"ok": 0, "wrong": 0, "acquired": 0, "released": 0}
    errors: list[str] = []

    class Meta:
        def __init__(self, seq: int) -> None:
            self.seq = seq
            self.t_mono = time.monotonic()  # capture time, as the ring's FrameMeta carries it
            self.value = float(frames[seq % len(frames)][0, 0, 0])

    class Lease:
        def __init__(self, seq: int) -> None:
            self.meta = Meta(seq)
            self.array = frames[seq % len(frames)].copy()

        def release(self) -> None:
            with lock:
                counts["released"] += 1

    class Reader:  # a camera whose newest frame is always a new one
        def __init__(self) -> None:
            self.seq = 0

        def acquire_latest(self, after_seq: int | None = None) -> Lease:
            self.seq += 1
            with lock:
                counts["acquired"] += 1
            return Lease(self.seq)

    server = Server(ServerOptions(repositories=[repo], startup_models=[MODEL])).start(timeout=120)

    def submit(camera_id: str, lease: Lease):  # as FramePath.submit: zero-copy input, lease released by Triton
        return server.infer_async(MODEL, {"IMAGE": lease.array}, request_id=f"{camera_id}:{lease.meta.seq}",
                                  timeout_s=10, on_inputs_released=lease.release)

    def on_result(camera_id: str, meta: Meta, future) -> None:  # runs on Triton's thread, as in the appliance
        error = future.exception() if not future.cancelled() else "cancelled"
        with lock:
            if error is not None:
                errors.append(f"{camera_id}:{meta.seq}: {error!r}")
            elif float(future.result()["MEAN"][0]) == meta.value:
                counts["ok"] += 1
            else:
                counts["wrong"] += 1

    scheduler = Scheduler(submit, on_result, max_inflight=8, per_camera_inflight=2)
    for camera in ("cam1", "cam2"):
        scheduler.add_camera(camera, Reader(), FPS)
    scheduler.start()
    reloaded = 0
    try:
        reloaded = _reload_while_serving(server, repo)
    finally:
        drained = scheduler.stop(drain_timeout_s=30)
        server.stop()
    print(f"survived: reloads={reloaded} drained={drained} counts={counts} errors={errors[:5]}", flush=True)
    ok = reloaded == RELOADS and drained and not errors and counts["wrong"] == 0 and counts["ok"] > 0
    # Every lease released exactly once: the submitted ones by Triton, the ones the rate cap skipped at once.
    return 0 if ok and counts["released"] == counts["acquired"] else 1


@pytest.mark.slow
def test_reloading_a_metered_model_while_the_scheduler_feeds_it_does_not_corrupt_the_heap(tmp_path: Path) -> None:
    from support.triton import copy_models, ensure_stub_site, kill_stubs_under

    ensure_stub_site()
    repo = copy_models(tmp_path / "repo", [MODELS / MODEL])
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    # Files, not pipes: the stubs inherit the child's output, and after a crash they would hold a pipe open.
    with out.open("w") as stdout, err.open("w") as stderr:
        child = subprocess.Popen([sys.executable, __file__, str(repo)], stdout=stdout, stderr=stderr)
        try:
            rc = child.wait(timeout=240)
        finally:
            child.kill()
            child.wait()
            orphans = kill_stubs_under(repo)
    assert rc == 0, (
        f"the serving process died or lost frames (rc={rc}; -6 abort, -11 segfault)\n"
        f"stdout: {out.read_text()[-2000:]}\nstderr: {err.read_text()[-4000:]}"
    )
    assert "survived" in out.read_text()
    assert not orphans, f"stub processes outlived their server: {orphans}"


if __name__ == "__main__":
    sys.exit(_workload(Path(sys.argv[1])))
