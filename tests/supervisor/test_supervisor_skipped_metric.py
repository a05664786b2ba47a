"""``appliance_frames_skipped_total{camera}``: frames a newer one replaced in the ring before inference took one
(latest wins), set from the scheduler's counts on every tick of the Appliance (``reporting.record_metrics``)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from appliance.health.metrics import ApplianceMetrics
from appliance.pipeline.scheduler import Scheduler
from appliance.supervisor import reporting


@dataclass(frozen=True)
class Meta:
    seq: int
    t_mono: float


class Lease:
    def __init__(self, meta: Meta) -> None:
        self.meta = meta

    def release(self) -> None:
        pass


class Camera:
    """The ring reader's contract: the newest frame after ``after_seq``."""

    def __init__(self) -> None:
        self.frames: list[Meta] = []

    def capture(self, n: int = 1) -> None:
        for _ in range(n):
            self.frames.append(Meta(len(self.frames) + 1, float(len(self.frames))))

    def acquire_latest(self, after_seq: int | None = None) -> Lease | None:
        newer = [f for f in self.frames if after_seq is None or f.seq > after_seq]
        return Lease(newer[-1]) if newer else None


def _skipped(metrics: ApplianceMetrics) -> dict[str, float]:
    return {s.labels["camera"]: s.value for family in text_string_to_metric_families(metrics.render().decode())
            for s in family.samples if s.name == "appliance_frames_skipped_total"}


def test_the_tick_exports_the_frames_the_scheduler_skipped() -> None:
    metrics = ApplianceMetrics()
    pending: list[Future[Any]] = []

    def submit(camera_id: str, lease: Any) -> Future[Any]:
        pending.append(Future())
        return pending[-1]

    scheduler = Scheduler(submit, lambda *a: None, per_camera_inflight=1)  # stepped here, never started

    def tick() -> None:  # the scheduler's part of Appliance.tick
        reporting.record_metrics(metrics, None, scheduler)

    c1, c2 = Camera(), Camera()
    scheduler.add_camera("c1", c1, None)
    scheduler.add_camera("c2", c2, None)
    c1.capture()
    scheduler.step()  # c1's frame 1 in flight; c2 has none yet
    tick()
    assert _skipped(metrics) == {"c1": 0, "c2": 0}  # exported from the first tick, before any frame is skipped

    c1.capture(4)  # frames 2..5 arrive while frame 1 is in flight: 2, 3 and 4 are replaced by 5
    pending[0].set_result(None)
    scheduler.step()
    tick()
    assert _skipped(metrics) == {"c1": 3, "c2": 0}

    c1.capture(3)  # 6, 7 replaced by 8: the counter grows by what is new, not by the running total again
    pending[1].set_result(None)
    scheduler.step()
    tick()
    tick()
    assert _skipped(metrics) == {"c1": 5, "c2": 0}
    assert [slot.skipped for slot in scheduler.cameras()] == [5, 0]
