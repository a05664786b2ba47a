"""Jetson readings from NVIDIA's ``tegrastats``: GPU (GR3D) load, EMC, per-core CPU, RAM/SWAP, temperatures and
power rails. sysfs (``system.py``) has no GPU load, and its INA3221 files are root-only on newer JetPacks, so the
appliance runs ``tegrastats --interval <ms>`` as a child process when the binary exists and keeps the latest line.

The line format differs across JetPack 4/5/6 and modules (see tests/health/test_tegrastats.py for real lines);
the parser reads each token on its own and ignores what it does not know, so a new engine or rail never breaks it.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from appliance.backoff import capped_exponential

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CpuCore:
    load_percent: float | None    # None: the core is off
    freq_mhz: int | None


@dataclass(frozen=True)
class TegraReading:
    ram_used_mb: int | None = None
    ram_total_mb: int | None = None
    swap_used_mb: int | None = None
    swap_total_mb: int | None = None
    cpus: tuple[CpuCore, ...] = ()
    emc_percent: float | None = None
    emc_freq_mhz: int | None = None
    gpu_percent: float | None = None          # GR3D_FREQ: iGPU load
    gpu_freq_mhz: int | None = None           # the highest of the GPCs' clocks when several are listed
    temperatures_c: dict[str, float] = field(default_factory=dict)   # sensor name lower-cased: cpu, gpu, tj, soc0
    power_mw: dict[str, int] = field(default_factory=dict)           # rail -> current mW (average is dropped)

    @property
    def empty(self) -> bool:
        return self == TegraReading()


_RAM = re.compile(r"^(\d+)/(\d+)MB$")
_PCT_AT = re.compile(r"^(\d+(?:\.\d+)?)%(?:@\[?([\d,]*)\]?)?$")   # 86%@921, 0%@[114], 0%@[0,0], 0%
_CORE = re.compile(r"^(\d+(?:\.\d+)?)%(?:@(\d+))?$")                # 44%@1479 (or 44% with a shared @freq)
_TEMP = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*)@(-?\d+(?:\.\d+)?)C$")  # CPU@44C, tj@65.562C
_CPU_LIST = re.compile(r"^\[([^\]]*)\](?:@(\d+))?$")                # [44%@1479,off,...] or [2%,1%,,]@102
_RAIL_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_RAIL_VALUE = re.compile(r"^(\d+)(?:mW)?/(\d+)(?:mW)?$")          # 4531/3285 (JetPack 4), 2763mW/2846mW (5, 6)
_ABSENT_SENSOR_C = -100.0  # Orin prints -256C for sensors that are switched off: not a temperature


def _pct_at(token: str) -> tuple[float | None, int | None]:
    m = _PCT_AT.match(token)
    if not m:
        return None, None
    freqs = [int(f) for f in (m.group(2) or "").split(",") if f]
    return float(m.group(1)), (max(freqs) if freqs else None)


def _cpus(inner: str, shared_freq: str | None) -> tuple[CpuCore, ...]:
    cores = []
    for part in inner.split(","):
        part = part.strip()
        m = _CORE.match(part)
        if m:
            freq = m.group(2) or shared_freq
            cores.append(CpuCore(float(m.group(1)), int(freq) if freq else None))
        else:  # "off", or an empty slot of the old "[X%,Y%, , ]@Z" form
            cores.append(CpuCore(None, None))
    return tuple(cores)


def parse_line(line: str) -> TegraReading:
    """One tegrastats line -> a reading. Never raises; unknown or malformed tokens are skipped."""
    tokens = line.split()
    values: dict[str, object] = {"temperatures_c": {}, "power_mw": {}}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok in ("RAM", "SWAP") and _RAM.match(nxt):
            used, total = _RAM.match(nxt).groups()  # type: ignore[union-attr]
            values[f"{tok.lower()}_used_mb"], values[f"{tok.lower()}_total_mb"] = int(used), int(total)
            i += 2
        elif tok == "CPU" and nxt.startswith("["):
            end = next((j for j in range(i + 1, len(tokens)) if "]" in tokens[j]), len(tokens) - 1)
            m = _CPU_LIST.match("".join(tokens[i + 1:end + 1]))  # the old "[X%,Y%, , ]@Z" form has blanks
            if m:
                values["cpus"] = _cpus(m.group(1), m.group(2))
            i = end + 1
        elif tok in ("EMC_FREQ", "GR3D_FREQ"):
            pct, freq = _pct_at(nxt)
            key = "emc" if tok == "EMC_FREQ" else "gpu"
            if pct is not None:
                values[f"{key}_percent"], values[f"{key}_freq_mhz"] = pct, freq
                i += 2
            else:
                i += 1
        elif _RAIL_NAME.match(tok) and _RAIL_VALUE.match(nxt):
            # after the checks above: "CPU 618/618" on JetPack 4.2 Xavier is a rail, "CPU [..]" the load
            values["power_mw"][tok] = int(_RAIL_VALUE.match(nxt).group(1))  # type: ignore[index, union-attr]
            i += 2
        else:
            m = _TEMP.match(tok)
            if m and float(m.group(2)) > _ABSENT_SENSOR_C:
                values["temperatures_c"][m.group(1).lower()] = float(m.group(2))  # type: ignore[index]
            i += 1
    return TegraReading(**values)  # type: ignore[arg-type]


def system_fields(reading: TegraReading) -> dict[str, float | int]:
    """Flat fields for the MQTT health message's ``system`` section (numbers only; absent values left out)."""
    out: dict[str, float | int] = {}
    for key, value in (("gpu_load_percent", reading.gpu_percent), ("gpu_freq_mhz", reading.gpu_freq_mhz),
                       ("emc_load_percent", reading.emc_percent), ("emc_freq_mhz", reading.emc_freq_mhz),
                       ("ram_used_mb", reading.ram_used_mb), ("ram_total_mb", reading.ram_total_mb),
                       ("swap_used_mb", reading.swap_used_mb), ("swap_total_mb", reading.swap_total_mb)):
        if value is not None:
            out[key] = value
    if reading.cpus:
        out["cpu_cores_online"] = sum(1 for core in reading.cpus if core.load_percent is not None)
    out.update({f"tegra_temp_{name}": celsius for name, celsius in reading.temperatures_c.items()})
    out.update({f"power_{rail}_w": milliwatts / 1000.0 for rail, milliwatts in reading.power_mw.items()})
    return out


class TegrastatsMonitor:
    """Runs ``tegrastats --interval <ms>`` on a reader thread and keeps the latest reading.

    Nothing here blocks the caller: ``start()`` returns at once (False when there is no tegrastats binary),
    ``latest()`` only takes a lock, ``stop()`` is bounded by its timeout. A child that exits is restarted after
    a backoff that doubles up to ``max_backoff_s`` (reset once a child has run ``stable_s``); every exit is
    logged with its code and last stderr line and counted in ``status()``."""

    def __init__(self, interval_ms: int = 1000, *, binary: str = "tegrastats", initial_backoff_s: float = 1.0,
                 max_backoff_s: float = 60.0, stable_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_ms = interval_ms
        self.binary = binary
        self._initial_backoff, self._max_backoff, self._stable_s = initial_backoff_s, max_backoff_s, stable_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._latest: tuple[float, TegraReading] | None = None
        self._state = "stopped"      # stopped | absent | running | restarting
        self.starts = 0
        self.exits = 0
        self.last_error = ""

    # -- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> bool:
        """Start reading if the binary is on PATH; False (state ``absent``) when it is not."""
        path = shutil.which(self.binary)
        if path is None:
            self._state = "absent"
            return False
        self._stop.clear()
        self._state = "running"
        self._thread = threading.Thread(target=self._run, args=(path,), name="tegrastats", daemon=True)
        self._thread.start()
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the child (SIGTERM to its process group, SIGKILL after ``timeout``) and the reader thread."""
        self._stop.set()
        with self._lock:
            proc = self._proc
        if proc is not None:
            _terminate(proc, timeout)
        if self._thread is not None:
            self._thread.join(timeout)
        if self._state != "absent":
            self._state = "stopped"

    # -- readings ------------------------------------------------------------------------------------------
    def latest(self, max_age_s: float | None = None) -> TegraReading | None:
        """The newest reading, or None when there is none younger than ``max_age_s`` (default: three intervals,
        at least 5 s), so a hung or dead tegrastats never passes off old numbers as current."""
        limit = max_age_s if max_age_s is not None else max(5.0, 3 * self.interval_ms / 1000)
        with self._lock:
            if self._latest is None or self._clock() - self._latest[0] > limit:
                return None
            return self._latest[1]

    @property
    def active(self) -> bool:
        """Started and not stopped (False where there is no tegrastats binary)."""
        return self._state in ("running", "restarting")

    def health(self) -> str:
        """``ok`` (a fresh reading), ``stale`` (running but nothing fresh: starting or hung), ``restarting``
        (the child exited; waiting out the backoff), ``absent`` or ``stopped``."""
        if self._state == "running":
            return "ok" if self.latest() is not None else "stale"
        return self._state

    def status(self) -> dict[str, object]:
        with self._lock:
            pid = self._proc.pid if self._proc is not None and self._proc.poll() is None else None
        return {"state": self._state, "pid": pid, "starts": self.starts, "exits": self.exits,
                "last_error": self.last_error}

    # -- the reader thread ---------------------------------------------------------------------------------
    def _run(self, path: str) -> None:
        failures = 0  # in a row: a child that ran stable_s starts the doubling over
        while not self._stop.is_set():
            started = self._clock()
            code, stderr_tail = self._run_child(path)
            if self._stop.is_set():
                break
            self.exits += 1
            if self._clock() - started >= self._stable_s:
                failures = 0
            backoff = capped_exponential(self._initial_backoff, self._max_backoff, 2.0, failures)
            failures += 1
            self.last_error = f"tegrastats exited with code {code}" + (f": {stderr_tail}" if stderr_tail else "")
            self._state = "restarting"
            log.warning("%s; restarting in %.1f s (exit %d)", self.last_error, backoff, self.exits)
            if self._stop.wait(backoff):
                break
            self._state = "running"

    def _run_child(self, path: str) -> tuple[int | None, str]:
        try:
            # own session: a stop can signal the whole group, and a Ctrl-C at the terminal does not reach it
            proc = subprocess.Popen([path, "--interval", str(self.interval_ms)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, bufsize=1,
                                    errors="replace", start_new_session=True)
        except OSError as exc:
            return None, str(exc)
        self.starts += 1
        with self._lock:
            self._proc = proc
        if self._stop.is_set():  # stop() ran between the loop's check and the Popen: it did not see this child
            _terminate(proc, 5.0)
        tail: deque[str] = deque(maxlen=1)

        def read_stderr() -> None:
            assert proc.stderr is not None
            tail.extend(text.strip() for text in proc.stderr if text.strip())

        err_thread = threading.Thread(target=read_stderr, name="tegrastats-stderr", daemon=True)
        err_thread.start()
        assert proc.stdout is not None
        for line in proc.stdout:
            reading = parse_line(line)
            if not reading.empty:
                with self._lock:
                    self._latest = (self._clock(), reading)
        code = proc.wait()
        err_thread.join(1.0)
        with self._lock:
            self._proc = None
        return code, tail[0] if tail else ""


def _terminate(proc: subprocess.Popen[str], timeout: float) -> None:
    """SIGTERM the child's process group, SIGKILL it if the child outlives ``timeout``; then SIGKILL whatever
    is left in the group (a grandchild would keep the pipe open and the reader thread waiting)."""
    if proc.poll() is not None:  # already reaped: its pid is free and may be someone else's group by now
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("tegrastats ignored SIGTERM for %.1f s; killing it", timeout)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log.error("tegrastats (pid %d) did not exit after SIGKILL", proc.pid)
