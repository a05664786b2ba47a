"""The model recovery state machine (appliance.detector.serving.recovery) and the probe's pure parts, on a fake clock.

The reload is a plain function that fails as told; the real server is exercised in
test_serving_model_recovery.py. Error texts are the ones Triton 2.51 gives (seen there)."""

from __future__ import annotations

import logging
from typing import Sequence

import pytest

from appliance.backoff import RestartPolicy
from appliance.detector.serving.errors import RouteChanged
from appliance.detector.serving.probe import Fault, expected_stubs, fault_from_error
from appliance.detector.serving.recovery import PipelineRecovery, PipelineState
from appliance.detector.serving.router import Route
from appliance.health.metrics import ApplianceMetrics
from appliance.triton.errors import InternalError, NotFoundError

BASE = Route("detect", ("preprocess", "detector", "postprocess", "detect"), "yolov3-tiny", None, ("dog",))
V2 = Route("ota-2-detect", ("ota-2-preprocess", "ota-2-detector", "ota-2-postprocess", "ota-2-detect"),
           "yolov3-tiny", "2", ("dog",))
DEAD = Fault("detector", "stub_died", "0 of 1 stub process(es) running")
POLICY = RestartPolicy(initial_backoff_s=1.0, max_backoff_s=4.0, max_restarts=4, window_s=100.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Reloads:
    """Records reloads; fails the next ``failures`` of them."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def __call__(self, route: Route, models: Sequence[str]) -> None:
        self.calls.append((route.ensemble, tuple(models)))
        if self.failures:
            self.failures -= 1
            raise RuntimeError("Triton could not load detector")


def _value(metrics: ApplianceMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def _recovery(reloads: Reloads, clock: Clock, metrics: ApplianceMetrics | None = None) -> PipelineRecovery:
    recovery = PipelineRecovery(reloads, POLICY, clock=clock, metrics=metrics)
    recovery.step(BASE, [])
    return recovery


def test_a_dead_model_is_reloaded_at_once_and_frames_flow_again() -> None:
    clock, reloads, metrics = Clock(), Reloads(), ApplianceMetrics()
    recovery = _recovery(reloads, clock, metrics)
    assert recovery.drop_reason() is None
    recovery.step(BASE, [DEAD])
    assert reloads.calls == [("detect", ("detector",))]
    assert recovery.state is PipelineState.SERVING and recovery.drop_reason() is None
    assert recovery.status().reloads == 1 and recovery.status().failures == 1
    assert _value(metrics, "appliance_model_reloads_total", model="detector", result="ok") == 1
    assert _value(metrics, "appliance_model_failures_total", model="detector", reason="stub_died") == 1
    assert _value(metrics, "appliance_pipeline_state", state="serving") == 1


def test_failed_reloads_back_off_then_a_crash_loop_is_reported_and_retried_at_the_cap(
        caplog: pytest.LogCaptureFixture) -> None:
    clock, reloads, metrics = Clock(), Reloads(failures=100), ApplianceMetrics()
    recovery = _recovery(reloads, clock, metrics)
    caplog.set_level(logging.WARNING, "appliance.detector.serving.recovery")
    recovery.step(BASE, [DEAD])  # failure 1 (found dead), immediate reload fails: failure 2
    assert len(reloads.calls) == 1 and recovery.state is PipelineState.RECOVERING
    assert recovery.drop_reason() == "recovering"
    delays = [recovery.status().next_retry_s]
    for _ in range(4):
        clock.now += delays[-1] - 0.01
        recovery.step(BASE, [DEAD])  # not yet: no reload before the backoff has passed
        clock.now += 0.01
        recovery.step(BASE, [DEAD])
        delays.append(recovery.status().next_retry_s)
    assert delays == [1.0, 2.0, 4.0, 4.0, 4.0]  # doubling from initial_backoff_s, capped at max_backoff_s
    assert len(reloads.calls) == 5
    status = recovery.status()
    assert status.state is PipelineState.CRASH_LOOP and status.models == ("detector",)
    assert status.attempt == 5 and "reload failed" in status.reason
    assert "CRASH LOOP" in status.line() and "detector" in status.line()
    assert _value(metrics, "appliance_pipeline_state", state="crash_loop") == 1
    assert _value(metrics, "appliance_model_reloads_total", model="detector", result="failed") == 5
    crash = [r.getMessage() for r in caplog.records if "crash loop" in r.getMessage()]
    assert len(crash) == 1 and "retrying every 4 s" in crash[0]  # said once, not per retry
    assert any("attempt 3" in r.getMessage() and "next reload in 4.0 s" in r.getMessage() for r in caplog.records)

    reloads.failures = 0  # the cause went away: the next retry works
    clock.now += 4.0
    recovery.step(BASE, [DEAD])
    assert recovery.state is PipelineState.SERVING and recovery.drop_reason() is None
    # The failures stay counted: the model dying again soon is straight back in the crash loop.
    reloads.failures = 1
    clock.now += 1.0
    recovery.step(BASE, [DEAD])
    assert recovery.state is PipelineState.CRASH_LOOP


def test_failures_age_out_of_the_window() -> None:
    clock, reloads = Clock(), Reloads()
    recovery = _recovery(reloads, clock)
    for _ in range(6):  # dies and is reloaded fine, once every window: never a crash loop
        recovery.step(BASE, [DEAD])
        assert recovery.state is PipelineState.SERVING
        clock.now += POLICY.window_s + 1
    assert len(reloads.calls) == 6 and recovery.status().failures == 0


def test_a_failed_request_stops_frames_at_once_and_stale_ones_are_ignored() -> None:
    clock, reloads = Clock(), Reloads()
    recovery = _recovery(reloads, clock)
    recovery.note(BASE, DEAD, submitted=clock.now - 5)  # sent before this route served: says nothing
    assert recovery.drop_reason() is None
    recovery.note(BASE, DEAD, submitted=clock.now + 1)
    assert recovery.drop_reason() == "model_failed"
    clock.now += 2
    recovery.step(BASE, [])  # the probe saw nothing (a hung stub still counts as running): the note decides
    assert reloads.calls == [("detect", ("detector",))]
    # A request sent before that reload finished fails late: no new failure, no new reload.
    recovery.note(BASE, DEAD, submitted=clock.now - 0.5)
    recovery.step(BASE, [])
    assert len(reloads.calls) == 1 and recovery.drop_reason() is None


def test_recovery_follows_the_route_being_served() -> None:
    clock, reloads = Clock(), Reloads(failures=100)
    recovery = _recovery(reloads, clock)
    recovery.step(BASE, [DEAD])
    assert recovery.state is PipelineState.RECOVERING
    # An OTA switch routed version 2 meanwhile: its models are freshly loaded; the old route is not reloaded.
    recovery.step(V2, [])
    assert recovery.state is PipelineState.SERVING and recovery.status().route == "yolov3-tiny@2"
    reloads.failures = 0
    recovery.step(V2, [Fault("ota-2-detector", "stub_died", "0 of 1 stub process(es) running")])
    assert reloads.calls[-1] == ("ota-2-detect", ("ota-2-detector",))
    # A note about the old route's requests is not about what serves now.
    recovery.note(BASE, DEAD, submitted=clock.now + 1)
    recovery.step(V2, [])
    assert len(reloads.calls) == 2


def test_a_reload_abandoned_for_a_route_change_is_not_a_failure() -> None:
    clock = Clock()

    def reload(route: Route, models: Sequence[str]) -> None:
        raise RouteChanged("yolov3-tiny@2 is routed now")

    recovery = PipelineRecovery(reload, POLICY, clock=clock)
    recovery.step(BASE, [DEAD])
    assert recovery.status().failures == 1  # the death itself, not the abandoned reload


def test_the_ensemble_goes_last_in_route_order() -> None:
    clock, reloads = Clock(), Reloads()
    recovery = _recovery(reloads, clock)
    recovery.step(BASE, [Fault("detect", "not_ready", "x"), Fault("detector", "not_ready", "x"),
                         Fault("preprocess", "stub_died", "x")])
    assert reloads.calls == [("detect", ("preprocess", "detector", "detect"))]


def test_request_errors_that_mean_a_model_is_gone() -> None:
    stub = InternalError("in ensemble 'ota-2-detect', Stub process 'ota-2-detector_0_0' is not healthy.")
    assert fault_from_error(stub, V2) == Fault("ota-2-detector", "stub_died",
                                               "requests fail: Stub process 'ota-2-detector_0_0' is not healthy")
    assert fault_from_error(InternalError("Stub process 'preprocess_0_1' is not healthy."), BASE).model == "preprocess"
    assert fault_from_error(stub, BASE) is None  # not a model of this route
    gone = NotFoundError("Request for unknown model: 'detect' has no available versions")
    assert fault_from_error(gone, BASE) == Fault("detect", "not_ready", f"requests fail: {gone}")
    assert fault_from_error(InternalError("the model raised: bad frame"), BASE) is None
    assert fault_from_error(None, BASE) is None


def test_expected_stubs_counts_python_instances_only() -> None:
    assert expected_stubs({"backend": "python", "instance_group": [{"kind": "KIND_CPU", "count": 2, "gpus": []}]}) == 2
    assert expected_stubs({"backend": "python", "instance_group": [{"kind": "KIND_GPU", "count": 1,
                                                                    "gpus": [0, 1]}]}) == 2
    assert expected_stubs({"platform": "ensemble", "instance_group": []}) == 0
    assert expected_stubs({"platform": "tensorrt_plan", "backend": "tensorrt",
                           "instance_group": [{"kind": "KIND_GPU", "count": 1, "gpus": [0]}]}) == 0
