"""Zones and lines replaced while a camera runs (the operator's page): the tracker and its ids go on, a zone that
did not change keeps who is inside and its counts, a new line counts from the next frame. The walk: a
person-sized box at 10 px per frame, bottom centre x = 55 + 10 i; the expected frames follow from the geometry
(default hysteresis: 20 px past an edge or line for these 100 px boxes)."""

from __future__ import annotations

import itertools

from support.tracks import CLASSES, FPS, box_at, frame

from appliance.analytics.config import AnalyticsConfig, LineConfig, TrackerConfig, ZoneConfig
from appliance.analytics.events import Analytics
from appliance.events import Event

CELL = ZoneConfig(name="cell", points=[(200, 250), (400, 250), (400, 350), (200, 350)])
GATE = LineConfig(name="gate", a=(300, 200), b=(300, 400), in_side="right")  # a->b downwards: right is x < 300


def _config(**overrides: object) -> AnalyticsConfig:
    return AnalyticsConfig(**{"zones": [CELL], "tracker": TrackerConfig(birth_frames=3, lost_frames=5),
                              **overrides})


def _walk(a: Analytics, frames: range) -> list[Event]:
    events: list[Event] = []
    for i in frames:
        events += a.step(i, i / FPS, frame(box_at(55 + 10 * i)))[1]
    return events


def _analytics() -> Analytics:
    ids = (f"{i:032x}" for i in itertools.count())
    return Analytics("cam", _config(), CLASSES, 640, 480, new_id=lambda: next(ids))


def test_a_line_added_mid_walk_counts_and_the_unchanged_zone_keeps_its_state() -> None:
    a = _analytics()
    before = _walk(a, range(0, 21))  # inside the cell since frame 17 (x = 225, 20 px in)
    assert [(e.event, e.frame_seq) for e in before] == [("enter", 17)]
    a.replace_layout(_config(lines=[GATE]), 640, 480)
    after = _walk(a, range(21, 45))
    # x = 305 at frame 25 is past the line, 20 px past (x >= 320) at frame 27; out of the cell at 37 (x = 425).
    assert [(e.event, e.frame_seq, e.line or e.zone, e.direction) for e in after] == [
        ("cross", 27, "gate", "out"), ("exit", 37, "cell", None)]
    assert {e.track_id for e in before + after} == {1}   # the same track all along
    assert [e.seq for e in before + after] == [1, 2, 3]  # the numbering goes on
    assert a.counts.as_dict() == {"zones": {"cell": {"current": 0, "entered": 1, "exited": 1}},
                                  "lines": {"gate": {"in": 0, "out": 1}}}


def test_a_moved_zone_starts_empty_and_one_removed_is_gone() -> None:
    a = _analytics()
    _walk(a, range(0, 21))
    moved = ZoneConfig(name="cell", points=[(200, 250), (420, 250), (420, 350), (200, 350)])
    a.replace_layout(_config(zones=[moved]), 640, 480)
    assert a.counts.zones == {"cell": {"current": 0, "entered": 0, "exited": 0}}
    # The track stands inside the moved zone: it enters at once (20 px past the edge already).
    assert [(e.event, e.frame_seq, e.track_id) for e in _walk(a, range(21, 23))] == [("enter", 21, 1)]
    a.replace_layout(_config(zones=[]), 640, 480)
    assert a.counts.as_dict() == {"zones": {}, "lines": {}} and _walk(a, range(23, 45)) == []


def test_a_class_filter_applied_mid_walk_drops_the_class_from_the_tracker() -> None:
    a = _analytics()
    _walk(a, range(0, 10))
    assert a.step(10, 1.0, frame(box_at(155)))[0].tolist() == [1]  # the person is track 1
    a.replace_layout(_config(classes={"car": 0.3}), 640, 480)
    assert a.step(11, 1.1, frame(box_at(165)))[0].tolist() == [-1]  # no longer counted: no track id
    a.replace_layout(_config(classes={"person": 0.3}), 640, 480)
    track_ids = [a.step(i, i / FPS, frame(box_at(55 + 10 * i)))[0].tolist() for i in range(12, 16)]
    assert track_ids == [[1]] * 4  # counted again, and lost for less than lost_frames (5): the same track
