"""Recovery of the served pipeline when Triton loses one of its models.

The supervisor's tick hands ``step()`` the route being served and the faults ``ModelProbe`` found; the frame
path hands ``note()`` the faults its failed requests showed. A broken pipeline is reloaded through explicit
model control, the first time at once, then with exponential backoff (``RestartPolicy``, as for capture
processes). While it is broken, ``drop_reason()`` tells the scheduler to drop frames (counted), not queue them.

Failures are counted in a sliding window: the pipeline found broken, and each reload that did not bring it
back. ``max_restarts`` of them within ``window_s`` is a crash loop: reported (state, log line with what to
check) and retried only every ``max_backoff_s``, so a model that cannot stay up never spins the CPU and is
never hidden behind endless reloads. A reload that works ends it, but the failures stay counted for the
window: a model that dies again soon is straight back in the crash loop.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from appliance.backoff import RestartPolicy
from appliance.detector.serving.errors import RouteChanged
from appliance.detector.serving.probe import Fault
from appliance.detector.serving.router import Route

log = logging.getLogger(__name__)

# reload(route, models): load ``models`` of ``route`` again and check them; raises when they are still broken.
Reload = Callable[[Route, Sequence[str]], None]


def _one_line(exc: BaseException, limit: int = 500) -> str:
    """Triton's load errors span lines (the backend's traceback): one line for the log and STATUS=."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class PipelineState(str, enum.Enum):
    SERVING = "serving"
    RECOVERING = "recovering"
    CRASH_LOOP = "crash_loop"


@dataclass(frozen=True)
class RecoveryStatus:
    state: PipelineState
    route: str | None           # the served version's label, e.g. yolov3-tiny@2
    models: tuple[str, ...]     # the broken models
    reason: str                 # the last fault or reload error
    failures: int               # within the window
    attempt: int                # reload attempts since the pipeline broke
    next_retry_s: float | None  # from now
    reloads: int                # successful recoveries since start

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state.value, "models": list(self.models)}

    def line(self) -> str:
        """One line for STATUS= and `appliance status`."""
        if self.state is PipelineState.SERVING:
            return "pipeline serving" + (f" ({self.failures} model failure(s) recently)" if self.failures else "")
        retry = f", next reload in {self.next_retry_s:.0f} s" if self.next_retry_s is not None else ""
        what = "CRASH LOOP" if self.state is PipelineState.CRASH_LOOP else "recovering"
        return (f"pipeline {what}: {', '.join(self.models)} ({self.reason}; {self.failures} failure(s), "
                f"attempt {self.attempt}{retry})")


class PipelineRecovery:
    """The served pipeline's recovery state machine; the clock is injectable and the reload is a callable."""

    def __init__(self, reload: Reload, policy: RestartPolicy, *, clock: Callable[[], float] = time.monotonic,
                 metrics: Any = None) -> None:
        self._reload = reload
        self._policy = policy
        self._clock = clock
        self._metrics = metrics  # appliance.health.metrics.ApplianceMetrics, optional
        self._lock = threading.Lock()
        self._noted: list[tuple[str, Fault, float]] = []  # from the frame path: (ensemble, fault, submitted)
        self._route: Route | None = None
        self._state = PipelineState.SERVING
        self._faulted: dict[str, Fault] = {}
        self._failures: deque[float] = deque(maxlen=1000)
        self._retry_at: float | None = None
        self._attempt = 0
        self._reason = ""
        self._broken_since: float | None = None
        self._serving_since = clock()
        self._reloads = 0
        self._set_state(PipelineState.SERVING)

    # -- read by other threads ---------------------------------------------------------------------------
    def drop_reason(self) -> str | None:
        """None while frames may go to Triton; else why they are dropped (the scheduler asks per frame)."""
        if self._state is not PipelineState.SERVING:
            return self._state.value
        return "model_failed" if self._noted else None

    @property
    def state(self) -> PipelineState:
        return self._state

    @property
    def broken_since(self) -> float | None:
        return self._broken_since

    def note(self, route: Route, fault: Fault, submitted: float) -> None:
        """A request failed in a way that means ``fault`` (from Triton's completion thread): frames stop at
        once; the next ``step()`` recovers. Requests sent before the last recovery finished say nothing new."""
        if submitted < self._serving_since:
            return
        with self._lock:
            self._noted.append((route.ensemble, fault, submitted))

    def status(self) -> RecoveryStatus:
        now = self._clock()
        retry = None if self._retry_at is None else max(0.0, self._retry_at - now)
        return RecoveryStatus(self._state, self._route.label if self._route else None, tuple(self._faulted),
                              self._reason, self._recent(now), self._attempt, retry, self._reloads)

    # -- the tick ------------------------------------------------------------------------------------------
    def step(self, route: Route | None, faults: Sequence[Fault]) -> None:
        """Take what the probe found for the served ``route``; reload when the backoff allows."""
        if route is None:
            return
        now = self._clock()
        with self._lock:
            noted = [f for ensemble, f, submitted in self._noted
                     if ensemble == route.ensemble and submitted >= self._serving_since]
            self._noted.clear()
        if self._route is None or self._route.ensemble != route.ensemble:
            self._serve(route)
        found: dict[str, Fault] = {}
        for fault in [*faults, *noted]:  # the probe's account first: it says what is wrong now
            found.setdefault(fault.model, fault)
        if self._state is PipelineState.SERVING:
            if not found:
                return
            self._broken(now, found)
        else:
            for model, fault in found.items():
                self._faulted.setdefault(model, fault)
        if self._retry_at is not None and now >= self._retry_at:
            self._try_reload(route, now)

    def _serve(self, route: Route) -> None:
        """Another version serves (an OTA switch or rollback): its models are freshly loaded."""
        if self._route is not None and self._state is not PipelineState.SERVING:
            log.warning("pipeline: %s serves now; recovery of %s (%s) ends", route.label, self._route.label,
                        ", ".join(self._faulted))
        self._route = route
        self._faulted = {}
        self._failures.clear()  # the old version's failures say nothing about this one
        self._retry_at = self._broken_since = None
        self._attempt = 0
        self._serving_since = self._clock()
        self._set_state(PipelineState.SERVING)

    def _broken(self, now: float, found: dict[str, Fault]) -> None:
        self._faulted = dict(found)
        self._broken_since = now
        self._attempt = 0
        for fault in found.values():
            if self._metrics is not None:
                self._metrics.model_failures.labels(model=fault.model, reason=fault.kind).inc()
        reason = "; ".join(f"{f.model}: {f.detail}" for f in found.values())
        delay = self._fail(now, reason)
        log.error("pipeline %s: model failure: %s. Frames are dropped (counted) until it is reloaded; %s",
                  self._label, reason, "reloading now" if delay == 0 else f"next reload in {delay:.1f} s",
                  extra={"stage": "inference"})

    def _fail(self, now: float, reason: str) -> float:
        """Count a failure; set the state and when to retry. Returns the delay."""
        self._failures.append(now)
        self._reason = reason
        recent = self._recent(now)
        policy = self._policy
        if recent >= policy.max_restarts:
            delay = policy.max_backoff_s
            if self._state is not PipelineState.CRASH_LOOP:
                log.error("pipeline %s: crash loop: %s failed %d times in %.0f s (last: %s); retrying every %.0f s. "
                          "Check the model's files in the repository, memory (a killed stub: dmesg, OOM), and "
                          "Triton's log lines above.", self._label, ", ".join(self._faulted), recent,
                          policy.window_s, reason, delay, extra={"stage": "inference"})
            self._set_state(PipelineState.CRASH_LOOP)
        else:
            delay = 0.0 if recent == 1 else policy.backoff(recent - 1)
            self._set_state(PipelineState.RECOVERING)
        self._retry_at = now + delay
        return delay

    def _try_reload(self, route: Route, now: float) -> None:
        models = [m for m in route.models if m in self._faulted]  # route order: the ensemble last
        self._attempt += 1
        log.warning("pipeline %s: reloading %s (attempt %d)", self._label, ", ".join(models), self._attempt,
                    extra={"stage": "inference"})
        try:
            self._reload(route, models)
        except RouteChanged as exc:  # the next step() takes the new route
            log.warning("pipeline %s: reload abandoned: %s", self._label, exc)
            return
        except Exception as exc:  # noqa: BLE001 - any reload failure is counted and retried
            self._count_reloads(models, "failed")
            done = self._clock()
            error = _one_line(exc)
            delay = self._fail(done, f"reload failed: {error}")
            log.error("pipeline %s: reloading %s failed (attempt %d, %d failure(s) in %.0f s): %s; next reload "
                      "in %.1f s", self._label, ", ".join(models), self._attempt, self._recent(done),
                      self._policy.window_s, error, delay, extra={"stage": "inference"})
            return
        self._count_reloads(models, "ok")
        self._reloads += 1
        done = self._clock()
        log.warning("pipeline %s: %s reloaded (attempt %d, %.1f s without inference); frames flow again",
                    self._label, ", ".join(models), self._attempt, done - (self._broken_since or done),
                    extra={"stage": "inference"})
        self._faulted = {}
        self._retry_at = self._broken_since = None
        self._attempt = 0
        self._serving_since = done
        self._set_state(PipelineState.SERVING)

    # -- helpers -------------------------------------------------------------------------------------------
    @property
    def _label(self) -> str:
        return self._route.label if self._route is not None else "?"

    def _recent(self, now: float) -> int:
        return sum(1 for t in self._failures if now - t <= self._policy.window_s)

    def _count_reloads(self, models: Sequence[str], result: str) -> None:
        if self._metrics is not None:
            for model in models:
                self._metrics.model_reloads.labels(model=model, result=result).inc()

    def _set_state(self, state: PipelineState) -> None:
        self._state = state
        if self._metrics is not None:
            for s in PipelineState:
                self._metrics.pipeline_state.labels(state=s.value).set(1 if s is state else 0)
