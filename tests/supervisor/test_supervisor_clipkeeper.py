"""The clip keeper on its own: which events get a clip, the index entry, a clip whose footage never comes is
failed with a reason (and counted), and a clip planned before a restart is still checked after it."""

from __future__ import annotations

import json
from pathlib import Path

from support.wait import wait_until

from appliance.capture.recordconfig import RecordConfig
from appliance.mqtt.messages import ClipMessage
from appliance.pipeline.clipkeeper import ClipKeeper, find_entry

EVENT = "c1" * 16


class Metrics:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def record_clips(self, camera_id: str, **kw) -> None:
        self.calls.append({"camera": camera_id, **kw})


def test_a_clip_whose_footage_never_comes_fails_with_a_reason_and_survives_a_restart(tmp_path: Path) -> None:
    now = [1000.0]
    sent: list[ClipMessage] = []
    keeper = ClipKeeper(tmp_path, {"dock": RecordConfig(enabled=True, pre_capture_s=3, post_capture_s=4)},
                        sent.append, wall=lambda: now[0])
    try:
        assert keeper.plan(EVENT, "yard", 990.0) is None  # that camera does not record
        plan = keeper.plan(EVENT, "dock", 990.0)
        assert plan is not None and (plan.url, plan.start, plan.end) == (f"/events/{EVENT}.mp4", 987.0, 994.0)
        saved = json.loads((tmp_path / "clips" / "dock" / f"{EVENT}.json").read_text())
        assert saved["status"] == "pending" and saved["event_time"] == 990.0
    finally:
        keeper.stop()
    restarted = ClipKeeper(tmp_path, {"dock": RecordConfig(enabled=True)}, sent.append, wall=lambda: now[0])
    try:
        now[0] = 2000.0  # long past the end: no segment will ever reach it
        wait_until(lambda: sent, 10, message="the clip message")
        assert sent[0].status == "failed" and "no footage after" in sent[0].reason and sent[0].event_id == EVENT
        entry = find_entry(tmp_path, EVENT)
        assert entry is not None and entry.status == "failed"
        metrics = Metrics()
        restarted.report(metrics)
        assert metrics.calls == [{"camera": "dock", "kept_bytes": 0, "recording": False, "written": 0,
                                  "failed": {"missing": 1}}]
        assert restarted.clip_file(EVENT) is None
    finally:
        restarted.stop()


def test_a_reload_applies_which_cameras_record_and_their_seconds(tmp_path: Path) -> None:
    now = [1000.0]
    sent: list[ClipMessage] = []
    keeper = ClipKeeper(tmp_path, {}, sent.append, wall=lambda: now[0])  # nothing records at start
    try:
        assert keeper.plan("a" * 32, "yard", 990.0) is None
        keeper.apply({"yard": RecordConfig(enabled=True, pre_capture_s=2, post_capture_s=6)})  # starts recording
        first = keeper.plan("b" * 32, "yard", 990.0)
        assert first is not None and (first.start, first.end) == (988.0, 996.0)
        keeper.apply({"yard": RecordConfig(enabled=True, pre_capture_s=1, post_capture_s=3)})  # new seconds
        second = keeper.plan("c" * 32, "yard", 991.0)
        assert second is not None and (second.start, second.end) == (990.0, 994.0)
        keeper.apply({})  # stops recording: no new clips, the planned ones are still checked and reported
        assert keeper.plan("d" * 32, "yard", 992.0) is None
        now[0] = 2000.0
        wait_until(lambda: len(sent) == 2, 10, message="both planned clips' messages")
        assert sorted((m.event_id[0], m.status, m.start, m.end) for m in sent) == \
            [("b", "failed", 988.0, 996.0), ("c", "failed", 990.0, 994.0)]
        assert all("no footage after" in m.reason for m in sent)  # not an internal error of a camera gone
    finally:
        keeper.stop()
