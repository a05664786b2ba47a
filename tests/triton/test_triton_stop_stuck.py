"""Stopping a server whose model is stuck must never free Triton while its backend threads still run.

Triton's ServerDelete fails when its exit timeout expires and leaves the server half stopped; a second
ServerDelete then skips the wait and frees it at once. Made after killing the busy stub, while the model (which
Triton 2.51 can never finish unloading once its stub died mid-request) keeps executing the queued requests, that
second call lets its backend thread read the freed server (valgrind: invalid read in
``TritonBackendThread::BackendThread`` of a block freed by ``TRITONSERVER_ServerDelete``; core dump: SIGSEGV
there) and Triton read request inputs that stop() had already released. The process crashes later, in
whatever runs next: the next test, the next server's start or stop. So stop() calls ServerDelete once only.

A crash kills the process it happens in, so the workload runs in a child process. Deterministic check: when
stop() returns, Triton has released every request of that server (one it still held would go on executing
against the freed server). Then a second server is started and used in the same process,
while the old model's threads would have run on freed memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

MODELS = Path(__file__).parent / "models"


def _workload(repo: Path) -> int:
    import time

    import numpy as np

    from appliance.triton.server import Server, ServerOptions

    released: list[int] = []
    server = Server(ServerOptions([repo], startup_models=["slow", "echo"], exit_timeout_s=0))
    before = server.counters.snapshot()
    server.start(120)
    marker = repo.parent / "started"
    futures = [server.infer_async("slow", {"SECONDS": np.array([600], np.float32),
                                           "MARKER": np.array([str(marker).encode() if i == 0 else b""], dtype=object)},
                                  on_inputs_released=lambda i=i: released.append(i))
               for i in range(3)]  # fmt: skip
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:  # the model is busy with the first one
        time.sleep(0.02)
    server.stop(timeout=60)
    after = server.counters.snapshot()
    report = {
        "outcomes": [type(f.exception(0)).__name__ for f in futures],
        "released": sorted(released),
        # Triton has let go of every request when stop() returns: none is left to run against the server.
        "created": after["requests_created"] - before["requests_created"],
        "deleted": after["requests_deleted"] - before["requests_deleted"],
        "pending": sum(1 for p in server._runtime.pending.values() if p.owner is server),
    }
    print("stopped", json.dumps(report), flush=True)
    # The same process goes on serving, as the next test or an OTA restart would, for as long as the old model's
    # queued requests take to fail against its dead stub (about a second each).
    with Server(ServerOptions([repo], startup_models=["echo"])) as again:
        end = time.monotonic() + 4
        while time.monotonic() < end:
            assert again.infer("echo", {"X": np.ones((1, 2), np.float32)})["Y"].tolist() == [[2.0, 2.0]]
            time.sleep(0.05)
    print("survived", flush=True)
    ok = (report["outcomes"] == ["UnavailableError"] * 3 and report["released"] == [0, 1, 2]
          and report["created"] == report["deleted"] == 3 and report["pending"] == 0)  # fmt: skip
    return 0 if ok else 1


@pytest.mark.slow
def test_stop_with_a_stuck_model_never_frees_triton_under_running_requests(tmp_path: Path) -> None:
    from support.triton import copy_models, ensure_stub_site, kill_stubs_under

    ensure_stub_site()
    repo = copy_models(tmp_path / "repo", [MODELS / "slow", MODELS / "echo"])
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    # Files, not pipes: the stubs inherit the child's output, and after a crash they would hold a pipe open.
    with out.open("w") as stdout, err.open("w") as stderr:
        child = subprocess.Popen([sys.executable, "-X", "faulthandler", __file__, str(repo)], stdout=stdout,
                                 stderr=stderr)  # fmt: skip
        try:
            rc = child.wait(timeout=240)
        finally:
            child.kill()
            child.wait()
    orphans = kill_stubs_under(repo)
    text = out.read_text()
    assert rc == 0, (
        f"the process died or stop() let Triton keep requests (rc={rc}; -6 abort, -11 segfault)\n"
        f"stdout: {text[-2000:]}\nstderr: {err.read_text()[-4000:]}"
    )
    assert "survived" in text
    assert not orphans, f"stub processes outlived their server: {orphans}"


if __name__ == "__main__":
    sys.exit(_workload(Path(sys.argv[1])))
