"""Hysteresis on real frames: the real detector (yolov3-tiny through ONNX Runtime and the plain pipeline) on the
held-out frames 150..449 of OpenCV's vtest.avi, with a line and a zone edge drawn where someone lingers.

BROWN (test_analytics_heldout.py names the walkers) walks in from the left at frames 393..404 and then stands on
his phone: from 405 to 443 his box's bottom centre stays between x 303 and 310 (y 260..266), and from 444 it
drifts right, to x 316 at 447 and 320 at 449. A line at x=307 (from y=245 to 290) and a zone whose left edge is
x=307 sit in the middle of that jitter. Measured with these detections: without hysteresis his track crosses the
line 11 times and enters and exits the zone 11 times between 405 and 433; with the defaults it counts once, when
his anchor has moved 0.2 of his box's height (~8 px) right of x=307, at 447. The walkers who pass through the
line's span earlier still count, each within a few frames of where they count without hysteresis.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.analytics.config import AnalyticsConfig, HysteresisConfig, LineConfig, TrackerConfig, ZoneConfig
from appliance.analytics.events import Analytics
from appliance.detections import Detections
from appliance.detector.profile import load_profile
from appliance.events import Event

REPO = Path(__file__).resolve().parents[2]
FIRST_FRAME = 150      # the held-out detections start at this frame of vtest.avi
LINGER_FROM = 400      # BROWN's lingering starts at 405; nobody else is near the line or the zone's edge after 400
NO_HYSTERESIS = HysteresisConfig(margin=0, frames=1)


def events_of(detections: list[Detections], hysteresis: HysteresisConfig) -> list[Event]:
    classes = load_profile(REPO / "repository" / "profiles" / "yolov3-tiny.yaml").classes
    # The settings of test_analytics_heldout.py; the line and the zone are drawn on BROWN's standing place.
    cfg = AnalyticsConfig(classes={"person": 0.25}, tracker=TrackerConfig(lost_frames=10),
                          lines=[LineConfig(name="phone", a=(307, 245), b=(307, 290), in_side="right",
                                            hysteresis=hysteresis)],
                          zones=[ZoneConfig(name="bench", points=[(307, 245), (420, 245), (420, 290), (307, 290)],
                                            hysteresis=hysteresis)])
    a = Analytics("vtest", cfg, classes, 768, 576)
    events: list[Event] = []
    for i, dets in enumerate(detections):
        frame = FIRST_FRAME + i
        events += a.step(frame, frame / 10.0, dets)[1]
    # Whatever was counted, the counters agree with the events.
    assert a.counts.lines["phone"]["in"] + a.counts.lines["phone"]["out"] == sum(e.event == "cross" for e in events)
    zone = a.counts.zones["bench"]
    assert zone["current"] == zone["entered"] - zone["exited"]
    return events


@pytest.mark.slow
def test_a_walker_lingering_on_a_line_and_a_zone_edge_counts_once(
        vtest_heldout_detections: list[Detections]) -> None:
    plain = events_of(vtest_heldout_detections, NO_HYSTERESIS)
    held = events_of(vtest_heldout_detections, HysteresisConfig())

    def lingering(events: list[Event], kinds: set[str]) -> list[tuple[str | None, int]]:
        return [(e.direction or e.event, e.frame_seq) for e in events
                if e.event in kinds and e.frame_seq >= LINGER_FROM]

    # The data does exercise it: without hysteresis the standing man flickers across both.
    assert len(lingering(plain, {"cross"})) == 11
    assert len(lingering(plain, {"enter", "exit"})) == 11
    # With it: one crossing left to right ("out": in_side right of a->b down is the left half), one enter.
    assert lingering(held, {"cross"}) == [("out", 447)]
    assert lingering(held, {"enter", "exit"}) == [("enter", 447)]
    # The walkers who cross the line earlier count the same, a few frames later at most.
    before = [(e.track_id, e.direction, e.frame_seq) for e in plain if e.event == "cross" and e.frame_seq < LINGER_FROM]
    after = [(e.track_id, e.direction, e.frame_seq) for e in held if e.event == "cross" and e.frame_seq < LINGER_FROM]
    assert sorted(t[:2] for t in after) == sorted(t[:2] for t in before) and len(before) == 6
    late = {t[:2]: t[2] for t in after}
    assert all(0 <= late[t[:2]] - t[2] <= 6 for t in before), (before, after)
