"""WATCHDOG=1 only while the pipeline makes progress (``reporting.pipeline_progressing``, the verdict each tick of
the Appliance acts on): a pipeline held for model recovery has nothing in flight, but is not progressing, and must
stop feeding systemd's watchdog after ``watchdog_stall_s`` (fake clock)."""

from __future__ import annotations

from typing import Sequence

from appliance.appconfig.app import AppConfig
from appliance.backoff import RestartPolicy
from appliance.detector.serving.probe import Fault
from appliance.detector.serving.recovery import PipelineRecovery
from appliance.detector.serving.router import Route
from appliance.pipeline.scheduler import Scheduler
from appliance.supervisor import reporting

ROUTE = Route("detect", ("detector", "detect"), "yolov3-tiny", None, ())


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def _failing_reload(route: Route, models: Sequence[str]) -> None:
    raise RuntimeError("still broken")


def test_watchdog_is_fed_through_a_short_recovery_but_not_a_long_one() -> None:
    clock = Clock()
    config = AppConfig.model_validate({
        "device": {"id": "wd"}, "mqtt": {"host": "127.0.0.1"}, "pipeline": {"watchdog_stall_s": 20},
        "cameras": [{"id": "c1", "source": {"type": "images", "path": "/nonexistent"}, "width": 64, "height": 64,
                     "fps": 2}]})
    scheduler = Scheduler(lambda *a: None, lambda *a: None, clock=clock)  # never started: nothing in flight
    recovery = PipelineRecovery(_failing_reload, RestartPolicy(max_backoff_s=5, max_restarts=3), clock=clock)
    recovery.step(ROUTE, [])

    def progressing() -> bool:
        return reporting.pipeline_progressing(scheduler, recovery, clock(), config.pipeline.watchdog_stall_s)

    clock.now += 60  # no frame finished for a minute, but none was offered either: fed (capture handles cameras)
    assert progressing()
    recovery.step(ROUTE, [Fault("detector", "stub_died", "0 of 1 stub process(es) running")])
    clock.now += 19
    assert progressing()  # a reload that works within watchdog_stall_s never trips systemd
    clock.now += 1
    assert not progressing()  # held for recovery that long: systemd may restart the service
    scheduler.last_progress = clock.now  # frames finish again
    assert progressing()
