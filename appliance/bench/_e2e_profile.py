"""``appliance bench e2e --profile``: the CPU of one appliance run, by part. py-spy samples the supervisor (the
bench process itself: the appliance runs in it) and each capture process over the measured window; ``/proc``
gives the CPU of every thread of those, of the Triton Python-backend stubs, of the broker and of py-spy itself.
``_profile_parts`` splits it; docs/benchmarks.md says how to read the table. py-spy needs ptrace (root, or
``kernel.yama.ptrace_scope`` 0)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.bench._profile_parts import ProcessCpu, attribute, key_lines, parse_raw, table
from appliance.triton.stubs import StubScanner

# Samples per second (off the beat of the cameras' rates): py-spy costs about half a millisecond of CPU a sample,
# so the capture processes, which run the same simple loop, are sampled less often.
RATE_HZ = 49
CAPTURE_RATE_HZ = 19
_TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def thread_cpu_ms(pid: int, proc: Path = Path("/proc")) -> dict[int, float]:
    """CPU ms (user + system) so far of each live thread of ``pid``; empty when it is gone."""
    out: dict[int, float] = {}
    try:
        tids = [int(t) for t in os.listdir(proc / str(pid) / "task")]
    except OSError:
        return out
    for tid in tids:
        try:
            fields = (proc / str(pid) / "task" / str(tid) / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # ended between the listing and the read
        out[tid] = (int(fields[11]) + int(fields[12])) * _TICK_MS  # utime, stime: fields 14 and 15 of stat
    return out


def stub_part(model: str) -> str:
    """The profile part of a stub serving ``model`` (a prefixed name too: ``l0_preprocess``)."""
    if model.endswith("preprocess"):
        return "stub_preprocess"
    return "stub_postprocess" if model.endswith("postprocess") else "stub_detector"


def _delta(after: dict[int, float], before: dict[int, float]) -> dict[int, float]:
    return {tid: ms - before.get(tid, 0.0) for tid, ms in after.items()}


@dataclass
class Profile:
    """Started at the measured window's start with the running appliance, stopped at its end with the results
    the subscriber received in it; ``lines`` is then the table and its key=value lines."""

    workdir: Path
    broker_pid: int | None
    lines: list[str] = field(default_factory=list)
    _spies: dict[int, tuple[subprocess.Popen[bytes], Path]] = field(default_factory=dict)
    _kinds: dict[int, str] = field(default_factory=dict)  # pid -> supervisor, capture, broker, or a stub's part
    _cameras: dict[str, Any] = field(default_factory=dict)  # camera id -> its CaptureProcess
    _before: dict[int, dict[int, float]] = field(default_factory=dict)
    _frames_before: dict[str, int] = field(default_factory=dict)
    _t0: float = 0.0

    def start(self, app: Any) -> None:
        executable = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(executable).exists():
            raise SystemExit("error: --profile needs py-spy (pip install -e '.[test]' installs it)")
        self._cameras = {cid: cam.capture for cid, cam in app.running.capture.cameras.items()}
        stubs = StubScanner().models(app.running.server.stub_pids())
        self._kinds = {os.getpid(): "supervisor", **{c.pid: "capture" for c in self._cameras.values()},
                       **{pid: stub_part(model) for pid, model in stubs.items()}}
        if self.broker_pid is not None:
            self._kinds[self.broker_pid] = "broker"
        # the supervisor's last: its samples of the bench starting the others would fall outside the window's CPU
        for pid, kind in sorted(self._kinds.items(), key=lambda item: item[1] == "supervisor"):
            if kind in ("supervisor", "capture"):
                self._spies[pid] = self._spy(executable, pid, RATE_HZ if kind == "supervisor" else CAPTURE_RATE_HZ)
        self._before = {pid: thread_cpu_ms(pid) for pid in [*self._kinds, *(p.pid for p, _ in self._spies.values())]}
        self._frames_before = {cid: c.health().frames for cid, c in self._cameras.items()}
        self._t0 = time.perf_counter()

    def _spy(self, executable: str, pid: int, rate_hz: int) -> tuple[subprocess.Popen[bytes], Path]:
        out = self.workdir / f"py-spy-{pid}.txt"
        log = (self.workdir / f"py-spy-{pid}.log").open("wb")
        spy = subprocess.Popen([executable, "record", "--pid", str(pid), "--format", "raw", "--threads",
                                "--nonblocking", "--rate", str(rate_hz), "--output", str(out)],
                               stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 30
        while b"Sampling process" not in (self.workdir / f"py-spy-{pid}.log").read_bytes():
            if spy.poll() is not None or time.monotonic() > deadline:
                spy.kill()
                raise SystemExit(f"error: py-spy could not sample process {pid} (it needs ptrace: root, or "
                                 f"kernel.yama.ptrace_scope 0): {(self.workdir / f'py-spy-{pid}.log').read_text()}")
            time.sleep(0.05)
        return spy, out

    def stop(self, frames: int) -> None:
        """End the window: read the CPU, stop py-spy, split, and write ``lines``."""
        seconds = time.perf_counter() - self._t0
        after = {pid: thread_cpu_ms(pid) for pid in self._before}
        written = {cid: c.health().frames - self._frames_before[cid] for cid, c in self._cameras.items()}
        for spy, _ in self._spies.values():
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
        samples = {}
        for pid, (spy, out) in self._spies.items():
            spy.wait(timeout=60)
            samples[pid] = parse_raw(out.read_text() if out.exists() else "")
        unsampled = {"supervisor": "triton_core", "capture": "decode"}  # the broker and each stub: their own part
        cpu = {pid: _delta(after[pid], self._before.get(pid, {})) for pid in after}
        processes = [ProcessCpu(cpu[pid], unsampled.get(kind, kind), samples.get(pid))
                     for pid, kind in self._kinds.items()]
        processes += [ProcessCpu(cpu[spy.pid], "profiler") for spy, _ in self._spies.values()]
        ms = attribute(processes)
        cameras = max(len(self._cameras), 1)
        self.lines = [f"profile of the {len(self._cameras)}-camera appliance run: {seconds:.1f} s, {frames} results, "
                      f"py-spy at {RATE_HZ} Hz on the supervisor, {CAPTURE_RATE_HZ} Hz on each capture process; "
                      f"ms/frame: CPU per result"]
        self.lines += table(ms, seconds, frames, cameras)
        for cid, capture in self._cameras.items():
            capture_ms = sum(cpu.get(capture.pid, {}).values())
            self.lines.append(f"camera {cid}: capture process {capture_ms / seconds:.1f} ms/s, "
                              f"{written[cid] / seconds:.1f} frames/s written, "
                              f"{capture_ms / max(written[cid], 1):.2f} ms per frame written")
        self.lines += key_lines(ms, frames)
