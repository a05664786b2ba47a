"""What every stage shares: reading the model's own config and profile, typed errors, per-stage metrics, and
skipping requests Triton has cancelled.

Cancellation: when the appliance gives up on a frame (``pipeline.request_timeout_s``), it cancels the ensemble
request in Triton. Triton 2.51 does not interrupt the step that is running then, but creates every later step's
request already cancelled (and hands it to the model all the same; only a dynamic batcher's queue drops
cancelled requests). So each stage asks ``request.is_cancelled()`` before its work and answers a cancelled
request with Triton's CANCELLED error without computing. One check costs an IPC round trip to the Triton
process (15-50 µs measured on a loaded 2-core host), small beside a stage's work.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from appliance.detector.prepost.errors import InputRejected
from appliance.detector.profile import ModelProfile

LATENCY_METRIC = "appliance_stage_busy_seconds_total"
REQUESTS_METRIC = "appliance_stage_requests_total"
REJECTED_METRIC = "appliance_stage_rejected_inputs_total"
CANCELLED_METRIC = "appliance_stage_cancelled_requests_total"
PROFILE_FILE = "profile.json"
FLUSH_NS = 1_000_000_000


def model_parameters(args: dict[str, str]) -> dict[str, str]:
    """The ``parameters`` block of the model's config.pbtxt as plain strings."""
    config = json.loads(args["model_config"])
    return {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}


def load_model_profile(args: dict[str, str]) -> ModelProfile:
    """The profile the materializer wrote beside config.pbtxt."""
    path = Path(args["model_repository"]) / PROFILE_FILE
    return ModelProfile.model_validate_json(path.read_text())


class StageMetrics:
    """Per-stage counters in Triton's metrics endpoint: total latency, requests, rejected inputs by reason.

    Latency is exported as a running sum (µs) plus a request count, the pair Prometheus turns into a mean with
    ``rate(sum)/rate(count)``; counters work on every Triton release that has custom metrics. Rejections are
    pushed at once (they are rare and an operator wants to see them); latency at most once a second.

    Every Metric gets a label set that no other live Metric in the Triton process has: ``model_instance``
    (Triton's instance name, e.g. ``preprocess_0_1``) and ``pid`` (this stub process) beside ``stage`` and
    ``model``. Triton 2.51 hands two Metrics with the same family name and labels one shared Prometheus series,
    and deleting either Metric frees it while the other still writes to it: with the old labels a model reload
    (the old version's stub drops its metrics while the new one serves) or a second instance corrupted the
    Triton process's heap. Sum over ``model_instance``/``pid`` for a stage's totals.
    """

    def __init__(self, pb_utils: ModuleType, stage: str, model: str, instance: str = "") -> None:
        fam = pb_utils.MetricFamily
        self._labels = {"stage": stage, "model": model, "model_instance": instance or stage, "pid": str(os.getpid())}
        # Triton invalidates a Metric whose family object is garbage-collected: keep the families alive
        # (until close() drops them, hence a tuple of any length).
        self._families: tuple[Any, ...] = (
            fam(name=LATENCY_METRIC, description="cumulative time spent per stage, seconds", kind=fam.COUNTER),
            fam(name=REQUESTS_METRIC, description="requests handled per stage", kind=fam.COUNTER),
            fam(name=REJECTED_METRIC, description="inputs rejected per stage, by reason", kind=fam.COUNTER),
            fam(name=CANCELLED_METRIC, description="cancelled requests answered without computing, per stage",
                kind=fam.COUNTER),
        )
        self._latency = self._families[0].Metric(labels=self._labels)
        self._requests = self._families[1].Metric(labels=self._labels)
        self._rejected: dict[str, Any] = {}
        self._cancelled: Any = None  # made at the first cancelled request: no series while nothing times out
        self._pending_s, self._pending_n = 0.0, 0
        self._flushed_ns: int | None = None  # None: push the first request at once, so the series appear early

    def observe(self, started_ns: int) -> None:
        """Count one request. Each Metric update is an IPC round trip to the Triton process, so updates are
        summed here and pushed at most once per ``FLUSH_NS`` (and on close)."""
        now = time.perf_counter_ns()
        self._pending_s += (now - started_ns) / 1e9
        self._pending_n += 1
        if self._flushed_ns is None or now - self._flushed_ns >= FLUSH_NS:
            self.flush(now)

    def flush(self, now: int | None = None) -> None:
        if self._pending_n and self._latency is not None:
            self._latency.increment(self._pending_s)
            self._requests.increment(self._pending_n)
        self._pending_s, self._pending_n = 0.0, 0
        self._flushed_ns = time.perf_counter_ns() if now is None else now

    def reject(self, reason: str) -> None:
        metric = self._rejected.get(reason)
        if metric is None:
            metric = self._families[2].Metric(labels={**self._labels, "reason": reason})
            self._rejected[reason] = metric
        metric.increment(1)

    def cancelled(self, count: int = 1) -> None:
        if self._cancelled is None:
            self._cancelled = self._families[3].Metric(labels=self._labels)
        self._cancelled.increment(count)

    def close(self) -> None:
        """Drop the metrics before their families (the order Triton requires). Up to a second of latency counts
        is dropped with them: no IPC is started while Triton is shutting the stub down."""
        self._latency = self._requests = self._cancelled = None
        self._rejected.clear()
        self._families = ()


def error_response(pb_utils: ModuleType, message: str, invalid_arg: bool = True) -> Any:
    code = pb_utils.TritonError.INVALID_ARG if invalid_arg else pb_utils.TritonError.INTERNAL
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message, code))


def is_cancelled(request: Any) -> bool:
    """Whether Triton has cancelled ``request`` (its deadline passed in the appliance, or the step's ensemble
    request was cancelled before this step was scheduled)."""
    return bool(request.is_cancelled())


def cancelled_response(pb_utils: ModuleType, stage: str) -> Any:
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(
        f"{stage}: request cancelled before it was computed", pb_utils.TritonError.CANCELLED))


def execute_each(pb_utils: ModuleType, stage: str, metrics: StageMetrics, one: Callable[[Any], Any],
                 requests: list[Any]) -> list[Any]:
    """Run ``one`` per request: a cancelled request is answered CANCELLED without running ``one`` (and counted);
    a rejected input becomes INVALID_ARG naming the problem (and is counted by reason), any other error fails
    that request only, never the stage; each computed request's latency is recorded. Requests are checked one
    by one as their turn comes: one cancelled while the stage works on an earlier one is skipped too."""
    responses = []
    for request in requests:
        if is_cancelled(request):
            metrics.cancelled()
            responses.append(cancelled_response(pb_utils, stage))
            continue
        started = time.perf_counter_ns()
        try:
            responses.append(one(request))
        except InputRejected as exc:
            metrics.reject(exc.reason)
            responses.append(error_response(pb_utils, f"{stage}: {exc}"))
        except Exception as exc:  # a bug must fail this request, not the stage
            logging.getLogger(f"{__package__}.{stage}").exception("%s failed", stage)
            responses.append(error_response(pb_utils, f"{stage}: internal error: {exc}", invalid_arg=False))
        metrics.observe(started)
    return responses
