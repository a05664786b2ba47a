"""Scheduling rules, driven step by step: rate cap on the camera's clock, latest wins, in-flight bounds."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

import pytest
from support.wait import wait_until

from appliance.pipeline.scheduler import Scheduler


@dataclass(frozen=True)
class Meta:
    seq: int
    t_mono: float


class Lease:
    def __init__(self, meta: Meta, leases: list) -> None:
        self.meta, self.released = meta, False
        leases.append(self)

    def release(self) -> None:
        self.released = True


class Camera:
    """Frames captured at given times; acquire_latest follows the ring reader's contract."""

    def __init__(self) -> None:
        self.frames: list[Meta] = []
        self.leases: list[Lease] = []

    def capture(self, t: float) -> None:
        self.frames.append(Meta(len(self.frames) + 1, t))

    def acquire_latest(self, after_seq: int | None = None) -> Lease | None:
        newer = [f for f in self.frames if after_seq is None or f.seq > after_seq]
        return Lease(newer[-1], self.leases) if newer else None


def _scheduler(on_result=lambda *a: None, **kwargs):
    submitted: list[tuple[str, int, Future]] = []

    def submit(camera_id: str, lease: Lease) -> Future:
        future: Future = Future()
        submitted.append((camera_id, lease.meta.seq, future))
        return future

    return Scheduler(submit, on_result, **kwargs), submitted


def test_a_camera_paced_at_its_target_rate_is_never_held_back() -> None:
    scheduler, submitted = _scheduler(per_camera_inflight=4)
    camera = Camera()
    scheduler.add_camera("a", camera, target_fps=4)
    for i in range(6):
        # capture jitter of a few ms either side of the 250 ms period
        camera.capture(i * 0.25 + (0.004 if i % 2 else -0.004))
        assert scheduler.step() == 1, f"frame {i + 1} was held back"
        submitted[-1][2].set_result("done")
    assert [seq for _, seq, _ in submitted] == [1, 2, 3, 4, 5, 6]


def test_frames_faster_than_the_target_are_skipped_and_counted() -> None:
    scheduler, submitted = _scheduler(per_camera_inflight=4)
    camera = Camera()
    slot = scheduler.add_camera("a", camera, target_fps=2)
    for i in range(9):  # 6 fps offered, 2 wanted
        camera.capture(i / 6)
        scheduler.step()
    assert [seq for _, seq, _ in submitted] == [1, 4, 7]
    assert slot.skipped == 4  # 2, 3, 5, 6 never inferred (8 and 9 are not yet overtaken)
    assert all(lease.released for lease in camera.leases if lease.meta.seq not in (1, 4, 7))


def test_in_flight_bounds_and_latest_wins() -> None:
    scheduler, submitted = _scheduler(per_camera_inflight=1, max_inflight=1)
    a, b = Camera(), Camera()
    scheduler.add_camera("a", a, None)
    scheduler.add_camera("b", b, None)
    a.capture(0.0)
    b.capture(0.0)
    assert scheduler.step() == 1 and scheduler.step() == 0  # one request in flight, all cameras together
    for t in (0.1, 0.2, 0.3):
        a.capture(t)
        b.capture(t)
    submitted[0][2].set_result("done")
    assert scheduler.step() == 1  # fairness: the other camera goes next, with its newest frame
    assert [(cam, seq) for cam, seq, _ in submitted] == [("a", 1), ("b", 4)]
    submitted[1][2].set_result("done")
    assert scheduler.step() == 1 and submitted[2][:2] == ("a", 4)


def test_invalid_bounds_are_rejected() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        _scheduler(max_inflight=0)


def test_a_failing_reader_does_not_stop_the_loop_for_the_other_cameras() -> None:
    class Broken:
        def acquire_latest(self, after_seq=None):
            raise OSError("ring vanished")

    scheduler, submitted = _scheduler(per_camera_inflight=1)
    good = Camera()
    scheduler.add_camera("broken", Broken(), None)
    scheduler.add_camera("good", good, None)
    good.capture(0.0)
    scheduler.start()
    try:
        wait_until(lambda: submitted, 10, 0.01, "a frame submitted")
    finally:
        scheduler.stop(1)
    assert [(cam, seq) for cam, seq, _ in submitted] == [("good", 1)]
    assert scheduler.cameras()[0].errors >= 1


def test_a_closed_gate_drops_and_counts_frames_instead_of_queueing_them() -> None:
    gate: list[str | None] = ["recovering"]
    dropped: list[tuple[str, str]] = []
    scheduler, submitted = _scheduler(gate=lambda: gate[0], on_drop=lambda cam, why: dropped.append((cam, why)))
    camera = Camera()
    slot = scheduler.add_camera("a", camera, None)
    for t in (0.0, 0.1, 0.2):
        camera.capture(t)
        assert scheduler.step() == 0
    camera.capture(0.3)
    camera.capture(0.4)  # two frames between passes: the older one is skipped, the newer dropped
    assert scheduler.step() == 0
    assert submitted == [] and slot.dropped == 4 and slot.skipped == 1
    assert dropped == [("a", "recovering")] * 4
    assert all(lease.released for lease in camera.leases)
    gate[0] = None  # recovered: the next new frame goes, nothing dropped earlier is replayed
    assert scheduler.step() == 0
    camera.capture(0.5)
    assert scheduler.step() == 1 and [seq for _, seq, _ in submitted] == [6]


def test_results_are_handed_on_in_each_cameras_order_when_requests_finish_out_of_order() -> None:
    # Two detector instances can finish a camera's frame 2 before its frame 1; subscribers must still see seq rise.
    handed_on: list[tuple[str, int, object]] = []
    scheduler, submitted = _scheduler(lambda cam, meta, f: handed_on.append((cam, meta.seq, f.result())),
                                      per_camera_inflight=3)
    a, b = Camera(), Camera()
    slot_a = scheduler.add_camera("a", a, None)
    scheduler.add_camera("b", b, None)
    for t in (0.0, 0.1, 0.2):
        a.capture(t)
        b.capture(t)
        assert scheduler.step() == 2
    futures = {(cam, seq): f for cam, seq, f in submitted}
    futures["a", 3].set_result("a3")
    futures["a", 2].set_result("a2")
    futures["b", 1].set_result("b1")  # another camera's frames are not held up by camera a's
    # a2 and a3 wait for a1, but no longer hold in-flight places: camera a can feed a free detector instance
    assert handed_on == [("b", 1, "b1")] and slot_a.inflight == 1
    futures["a", 1].set_exception(RuntimeError("detector failed"))  # a failed frame also keeps its place
    futures["b", 2].set_result("b2")
    assert [(cam, seq) for cam, seq, _ in handed_on] == [("b", 1), ("a", 2), ("a", 3), ("b", 2)]
    assert slot_a.inflight == 0 and slot_a.errors == 1 and scheduler.inflight == 1


def test_stop_publishes_finished_results_stuck_behind_a_frame_that_never_finishes() -> None:
    handed_on: list[int] = []
    scheduler, submitted = _scheduler(lambda cam, meta, f: handed_on.append(meta.seq), per_camera_inflight=2)
    camera = Camera()
    scheduler.add_camera("a", camera, None)
    for t in (0.0, 0.1):
        camera.capture(t)
        assert scheduler.step() == 1
    submitted[1][2].set_result("done")  # frame 2 finished; frame 1 hangs
    assert handed_on == []
    assert scheduler.stop(drain_timeout_s=0.2) is False
    assert handed_on == [2]  # out of order rather than lost at shutdown


def test_a_removed_camera_gets_no_more_frames_and_its_frames_in_flight_finish_first() -> None:
    handed_on: list[tuple[str, int]] = []
    scheduler, submitted = _scheduler(lambda cam, meta, f: handed_on.append((cam, meta.seq)), per_camera_inflight=2)
    a, b = Camera(), Camera()
    scheduler.add_camera("a", a, None)
    scheduler.add_camera("b", b, None)
    a.capture(0.0)
    b.capture(0.0)
    assert scheduler.step() == 2
    assert scheduler.remove_camera("b", drain_timeout_s=0.1) is False  # b's frame 1 is still in flight
    futures = {(cam, seq): f for cam, seq, f in submitted}
    futures["b", 1].set_result("done")
    assert scheduler.remove_camera("b", drain_timeout_s=0.1) is True  # gone already: nothing to wait for
    assert handed_on == [("b", 1)]  # handed on, though its camera left
    a.capture(0.1)
    b.capture(0.1)
    assert scheduler.step() == 1 and submitted[-1][:2] == ("a", 2)
    assert [slot.camera_id for slot in scheduler.cameras()] == ["a"]
    scheduler.add_camera("c", Camera(), None)  # a camera added later joins the round
    assert [slot.camera_id for slot in scheduler.cameras()] == ["a", "c"]
