"""Reproduce the abort a stub killed inside a shared lock causes, and show stop_unlocked avoids it.

    .venv/bin/python scripts/repro_stub_lock_kill.py --rounds 8

Each round runs in a child process: a real Triton server on the ``slow`` test model, a request the model is busy
with (it polls ``is_cancelled()``, a round trip to the server through shared locks), then the stub is SIGSTOPped
again and again until one of its threads holds a robust mutex (``robustlocks.stop_and_look``). From there:

- ``unguarded``: SIGKILL it there, then ``Server.stop()``. When the lock is one the server locks again, Boost
  throws ``lock_exception`` and the process aborts (exit -6).
- ``guarded``: SIGCONT it, ``robustlocks.stop_unlocked`` (what ``stubs.wait_gone`` does), SIGKILL, ``stop()``.

Prints one ``<mode> <round> rc=<exit>`` line per round, then ``unguarded_aborts=`` and ``guarded_aborts=``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLOW_MODEL = ROOT / "tests" / "triton" / "models" / "slow"  # model files, copied as data: it polls is_cancelled()


def _round(mode: str, workdir: Path) -> int:
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from appliance.triton import robustlocks, stubsite
    from appliance.triton.server import Server, ServerOptions

    if stubsite.needed():  # the numpy<2 directory the Python-backend stub needs
        stubsite.ensure()
    repo = workdir / "repo"  # a copy: the server writes its stub hook into the model's directory
    shutil.copytree(SLOW_MODEL, repo / "slow", ignore=shutil.ignore_patterns("__pycache__", "_appliance_site.py"))
    server = Server(ServerOptions([repo], startup_models=["slow"], exit_timeout_s=0))
    server.start(120)
    marker = workdir / "started"
    server.infer_async("slow", {"SECONDS": np.array([600], np.float32),
                                "MARKER": np.array([str(marker).encode()], dtype=object)})  # fmt: skip
    while not marker.exists():
        time.sleep(0.02)
    (pid,) = server.stub_pids()
    for tries in range(1, 200_000):
        if robustlocks.stop_and_look(pid):
            break
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.0003 * (tries % 7))  # vary the phase against the stub's own timers
    print(f"stub {pid} stopped inside a lock after {tries} tries", flush=True)
    if mode == "guarded":
        os.kill(pid, signal.SIGCONT)
        print(f"stop_unlocked: {robustlocks.stop_unlocked(pid)}", flush=True)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    server.stop(timeout=30)
    print("survived", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    aborts = {"unguarded": 0, "guarded": 0}
    for i in range(args.rounds):
        for mode in aborts:
            with tempfile.TemporaryDirectory() as tmp:
                log = Path(tmp) / "log"
                with log.open("w") as out:  # a file, not a pipe: stubs inherit it
                    rc = subprocess.call([sys.executable, __file__, "--round", mode, tmp], stdout=out,
                                         stderr=subprocess.STDOUT, timeout=300)  # fmt: skip
            print(f"{mode} {i} rc={rc}", flush=True)
            aborts[mode] += rc == -signal.SIGABRT
    print(f"unguarded_aborts={aborts['unguarded']}/{args.rounds}")
    print(f"guarded_aborts={aborts['guarded']}/{args.rounds}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--round":
        sys.exit(_round(sys.argv[2], Path(sys.argv[3])))
    sys.exit(main())
