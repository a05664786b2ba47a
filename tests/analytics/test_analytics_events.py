"""Zones, lines and tracks on synthetic but physically plausible motion: a person-sized box walking at a steady
10 px per frame at 10 fps. The expected frames follow from the geometry by hand (written next to each), with the
default hysteresis: an enter, exit or cross counts once the anchor is 0.2 x the box's height (20 px for these
100 px boxes) past the edge or line."""

from __future__ import annotations

import itertools

import pytest
from support.tracks import CLASSES, FPS, box_at, frame

from appliance.analytics.config import AnalyticsConfig, LineConfig, TrackerConfig, ZoneConfig
from appliance.analytics.events import Analytics
from appliance.detections import NO_TRACK, Detections
from appliance.events import Event


def analytics(**overrides: object) -> Analytics:
    config = {"zones": [ZoneConfig(name="cell", points=[(200, 250), (400, 250), (400, 350), (200, 350)], dwell_s=1.45)],
              "tracker": TrackerConfig(birth_frames=3, lost_frames=5)}
    config.update(overrides)
    ids = (f"{i:032x}" for i in itertools.count())
    return Analytics("cam", AnalyticsConfig(**config), CLASSES, 640, 480, new_id=lambda: next(ids))


def run(a: Analytics, frames: list[Detections]) -> list[Event]:
    events: list[Event] = []
    for i, dets in enumerate(frames):
        events += a.step(i, i / FPS, dets)[1]
    return events


def test_enter_dwell_exit_of_a_walk_through_a_zone() -> None:
    # Bottom centre at x = 55 + 10 i: inside the zone (200..400) from frame 15 (x=205) to 34 (x=395), 20 px
    # inside from frame 17 (x=225), 20 px outside from frame 37 (x=425).
    a = analytics()
    frames = [frame(box_at(55 + 10 * i)) for i in range(45)]
    events = run(a, frames)
    # Enter at frame 17 (t=1.7); dwell when t - 1.7 >= 1.45, first at frame 32; exit at frame 37.
    assert [(e.event, e.frame_seq, e.zone) for e in events] == [("enter", 17, "cell"), ("dwell", 32, "cell"),
                                                               ("exit", 37, "cell")]
    assert [e.seq for e in events] == [1, 2, 3]
    assert [e.event_id for e in events] == ["0" * 32, "0" * 31 + "1", "0" * 31 + "2"]
    assert {e.track_id for e in events} == {1} and {e.class_name for e in events} == {"person"}
    assert [e.capture_time for e in events] == [1.7, 3.2, 3.7]
    assert events[1].dwell_s == pytest.approx(1.5)
    for e in events:  # the box that decided it is the detection of the triggering frame
        assert e.box == tuple(float(v) for v in frames[e.frame_seq].boxes[0])
    assert a.counts.zones["cell"] == {"current": 0, "entered": 1, "exited": 1}


def test_occupancy_counts_while_inside() -> None:
    a = analytics()
    changed = [a.step(i, i / FPS, frame(box_at(55 + 10 * i)))[2] for i in range(20)]
    assert a.counts.zones["cell"] == {"current": 1, "entered": 1, "exited": 0}
    assert changed.index(True) == 17 and changed.count(True) == 1


def test_a_short_occlusion_keeps_the_track_and_its_zone() -> None:
    # Missing for 3 frames (< lost_frames=5) inside the zone, then seen again further on.
    a = analytics()
    frames = [frame(box_at(55 + 10 * i)) if not 20 <= i < 23 else frame() for i in range(30)]
    ids = []
    for i, dets in enumerate(frames):
        track_ids, events, _ = a.step(i, i / FPS, dets)
        ids += [int(t) for t in track_ids]
        assert all(e.event == "enter" for e in events)
    assert set(ids[2:]) == {1}
    assert a.counts.zones["cell"]["entered"] == 1


def test_a_track_lost_inside_exits_when_it_is_dropped() -> None:
    # Last seen at frame 19 (x=245, inside); missed from frame 20, dropped once missed > 5: frame 25.
    a = analytics()
    events = run(a, [frame(box_at(55 + 10 * i)) if i < 20 else frame() for i in range(30)])
    assert [(e.event, e.frame_seq, e.track_lost, e.box) for e in events][1:] == [("exit", 25, True, None)]
    assert events[1].class_name == "person" and events[1].score > 0.5
    assert a.counts.zones["cell"]["current"] == 0 and a.active_tracks == 0


def test_line_direction_follows_in_side() -> None:
    # a->b points down the picture; its right hand is the left half (x < 300).
    line = {"name": "door", "a": (300, 0), "b": (300, 480)}
    for in_side, rightwards, leftwards in (("right", "out", "in"), ("left", "in", "out")):
        a = analytics(zones=[], lines=[LineConfig(**line, in_side=in_side)])
        events = run(a, [frame(box_at(55 + 10 * i)) for i in range(40)])   # x=305 at 25, 20 px past at 27
        assert [(e.event, e.direction, e.frame_seq) for e in events] == [("cross", rightwards, 27)]
        b = analytics(zones=[], lines=[LineConfig(**line, in_side=in_side)])
        events = run(b, [frame(box_at(555 - 10 * i)) for i in range(40)])  # x=295 at 26, 20 px past at 28
        assert [(e.event, e.direction, e.frame_seq) for e in events] == [("cross", leftwards, 28)]
        assert b.counts.lines["door"] == {"in": int(leftwards == "in"), "out": int(leftwards == "out")}


def test_passing_beyond_the_end_of_a_line_is_no_crossing() -> None:
    a = analytics(zones=[], lines=[LineConfig(name="short", a=(300, 0), b=(300, 200), in_side="left")])
    assert run(a, [frame(box_at(55 + 10 * i)) for i in range(40)]) == []  # feet at y=300, below the end


def test_two_walkers_passing_each_other_keep_their_ids() -> None:
    a = analytics(zones=[])
    right_mover, left_mover = set(), set()
    for i in range(40):  # they overlap around frame 20 (x=300), 10 px apart vertically
        track_ids, _, _ = a.step(i, i / FPS, frame(box_at(100 + 10 * i, 300), box_at(500 - 10 * i, 310)))
        if i >= 2:
            right_mover.add(int(track_ids[0]))
            left_mover.add(int(track_ids[1]))
    assert right_mover == {1} and left_mover == {2}


def test_class_allow_list_and_minimum_scores() -> None:
    a = analytics(classes={"person": 0.6, "car": 0.3})
    for i in range(10):
        track_ids, _, _ = a.step(i, i / FPS, frame(box_at(100), box_at(300), box_at(500), scores=[0.5, 0.9, 0.4],
                                                   classes=[0, 1, 2]))
    # person below its 0.6 starts no track and is not reported; bicycle is not allowed; car at 0.4 >= 0.3 is.
    assert track_ids.tolist() == [NO_TRACK, NO_TRACK, 1]


def test_low_score_detections_keep_a_track_alive_but_start_none() -> None:
    a = analytics(zones=[], tracker=TrackerConfig(birth_frames=3, lost_frames=0))
    ids = []
    for i in range(20):  # confident for 5 frames, then a partly occluded 0.3 (>= low_score 0.1, < min_score 0.25)
        score = 0.9 if i < 5 else 0.2
        track_ids, _, _ = a.step(i, i / FPS, frame(box_at(100 + 5 * i), scores=[score]))
        ids += track_ids.tolist()
    assert ids[2:] == [1] * 18   # lost_frames=0: only the second stage can have kept it
    b = analytics(zones=[])
    for i in range(5):
        track_ids, _, _ = b.step(i, i / FPS, frame(box_at(100 + 5 * i), scores=[0.2]))
        assert track_ids.tolist() == [NO_TRACK]


def test_a_narrow_fast_walker_keeps_one_track() -> None:
    # yolov3-tiny's boxes on vtest's walkers: 12 px wide, 45 tall, moving 8 px a frame at 10 fps. Plain IoU of
    # two such boxes 8 px apart is 4/20 = 0.2, below birth_iou 0.3, so no track would ever be born; grown by the
    # 0.3 buffer on each side (19.2 px) they overlap 11.2/27.2 = 0.41.
    for buffer, expected in ((0.3, {1}), (0.0, set())):
        a = analytics(zones=[], tracker=TrackerConfig(buffer=buffer))
        ids = set()
        for i in range(20):
            track_ids, _, _ = a.step(i, i / FPS, frame(box_at(100 + 8 * i, 300, w=12, h=45)))
            ids |= {int(t) for t in track_ids if t >= 0}
        assert ids == expected, buffer


def test_a_line_crossed_during_the_birth_buffer_counts_once_confirmed() -> None:
    # First seen at x=295 (frame 0, left of the door at 300), confirmed at frame 2 (birth_frames=3) at x=315,
    # 20 px past the door at frame 3 (x=325).
    a = analytics(zones=[], lines=[LineConfig(name="door", a=(300, 0), b=(300, 480), in_side="left")])
    events = run(a, [frame(box_at(295 + 10 * i)) for i in range(6)])
    assert [(e.event, e.direction, e.frame_seq, e.track_id) for e in events] == [("cross", "in", 3, 1)]


def test_frames_missing_from_the_sequence_move_the_prediction_on() -> None:
    # Seen at frames 0..9 (x = 55 + 10 i), then frames 10..14 never reach the analytics (a recovery dropped
    # them), then seen at 15 where it really is: x=205. Predicted one frame on from 145 it would be at ~155,
    # 50 px off a 40 px box: buffered IoU (64 px wide boxes) 14/114 = 0.12 < match_iou 0.2, so without the gap
    # it would be a new track. Predicted six frames on (missed 5, not > lost_frames 5) it is the same track.
    a = analytics(zones=[])
    seqs = [*range(10), *range(15, 20)]
    ids = [a.step(s, s / FPS, frame(box_at(55 + 10 * s)))[0].tolist() for s in seqs]
    assert ids[2:] == [[1]] * (len(seqs) - 2)


def test_a_gap_in_the_sequence_longer_than_lost_frames_removes_the_track() -> None:
    # Inside the zone (x=205..245 at frames 15..19, entered at 17), then 20 frames never reach the analytics (>
    # lost_frames 5). Someone else stands at frame 40 right where the old track's one-frame prediction (x~255)
    # would be: the old track is gone before matching (exit with track_lost at frame 40), the newcomer gets a
    # new id and enters as soon as it is confirmed (50 px inside).
    a = analytics()
    events = run(a, [frame(box_at(55 + 10 * i)) for i in range(20)])
    assert [(e.event, e.frame_seq) for e in events] == [("enter", 17)]
    ids, later = [], []
    for s in range(40, 45):
        track_ids, evs, _ = a.step(s, s / FPS, frame(box_at(255)))
        ids += track_ids.tolist()
        later += evs
    assert [(e.event, e.frame_seq, e.track_id, e.track_lost) for e in later][:2] == [("exit", 40, 1, True),
                                                                                   ("enter", 42, 2, False)]
    assert ids == [-1, -1, 2, 2, 2]  # tentative for birth_frames=3 frames, then the next id: never 1
