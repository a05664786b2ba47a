"""Build progress to three places: the log, systemd (STATUS= and EXTEND_TIMEOUT_USEC=), and a callback.

The callback is how the supervisor forwards progress to MQTT status; it must not be able to break a build,
so its exceptions are logged and swallowed. A heartbeat re-announces the current phase while a long native
call (TensorRT's builder) runs without reporting, so systemd's start timeout keeps being extended and
operators see elapsed time instead of a silent wait.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, Mapping

from appliance.sdnotify import Notifier

log = logging.getLogger(__name__)

# A build's steps in order; done, cached and failed end it. (The engines/status MQTT schema lists the same.)
PHASES = ("fingerprint", "waiting", "parse", "build", "verify", "install", "done", "cached", "failed")
FINAL_PHASES = frozenset({"done", "cached", "failed"})


@dataclass(frozen=True)
class ProgressEvent:
    model: str
    phase: str  # one of PHASES
    percent: float  # 0..100 for this model
    message: str
    elapsed_s: float
    # The detection gate's numbers (GateReport.to_dict()) on the events that have them: the gate's own verify
    # event, the refusal, and the done/cached event of an engine that passed one.
    gate: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


ProgressCallback = Callable[[ProgressEvent], None]


class ProgressReporter:
    """Fans progress events out. ``extend_s`` is how much more start time systemd grants per report."""

    def __init__(
        self,
        notifier: Notifier | None = None,
        callback: ProgressCallback | None = None,
        *,
        extend_s: float = 300.0,
        heartbeat_s: float = 30.0,
        heartbeat_limit_s: float = 7200.0,
        log_every_percent: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._notifier = notifier or Notifier()
        self._callback = callback
        self._extend_s = extend_s
        self._heartbeat_s = heartbeat_s
        self._heartbeat_limit_s = heartbeat_limit_s
        self._log_step = log_every_percent
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self._last_logged: tuple[str, str, float] | None = None
        self._last: ProgressEvent | None = None

    def report(self, model: str, phase: str, percent: float, message: str = "",
               gate: Mapping[str, Any] | None = None) -> ProgressEvent:
        percent = max(0.0, min(100.0, float(percent)))
        event = ProgressEvent(model, phase, round(percent, 1), message, round(self._clock() - self._start, 1),
                              dict(gate) if gate is not None else None)
        with self._lock:
            self._last = event
            self._log(event)
        text = f"engines: {model} {phase} {percent:.0f}%" + (f" - {message}" if message else "")
        self._notifier.notify(status=text.replace("\n", " "), extend_timeout_usec=int(self._extend_s * 1e6))
        if self._callback is not None:
            try:
                self._callback(event)
            except Exception:  # a broken MQTT link must not fail the build
                log.exception("engine progress callback failed (build continues)")
        return event

    def _log(self, event: ProgressEvent) -> None:
        last = self._last_logged
        if (
            last is None
            or last[:2] != (event.model, event.phase)
            or event.percent >= last[2] + self._log_step
            or event.percent in (0.0, 100.0)
        ):
            level = logging.WARNING if event.phase == "failed" else logging.INFO
            log.log(level, "%s: %s %.0f%% %s(%.0fs)", event.model, event.phase, event.percent,
                    f"{event.message} " if event.message else "", event.elapsed_s)
            self._last_logged = (event.model, event.phase, event.percent)

    @contextlib.contextmanager
    def heartbeat(self) -> Iterator[None]:
        """Re-send the latest event every ``heartbeat_s`` until the block ends (for long native calls).

        Beats stop after ``heartbeat_limit_s`` so that a build hung inside native code stops extending
        systemd's start timeout and gets killed instead of blocking boot forever.
        """
        stop = threading.Event()
        started = self._clock()

        def beat() -> None:
            while not stop.wait(self._heartbeat_s):
                if self._clock() - started > self._heartbeat_limit_s:
                    log.error("engine build still running after %.0fs; no longer extending the start timeout",
                              self._clock() - started)
                    return
                last = self._last
                if last is not None:
                    self.report(last.model, last.phase, last.percent, last.message.split(" (still ")[0]
                                + f" (still working, {self._clock() - self._start:.0f}s elapsed)")

        thread = threading.Thread(target=beat, name="engine-build-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
