"""Hysteresis of lines and zones on synthetic tracks: someone lingering on a line or a zone's edge, their box
jittering 4-6 px across it for 7-13 frames, counts nothing; a real walk across still counts once, each way.
Boxes are 40 x 100 px (the default margin, 0.2 of the height, is 20 px) and move 10 px a frame when walking."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from support.tracks import CLASSES, FPS, box_at, frame

from appliance.analytics.config import AnalyticsConfig, HysteresisConfig, LineConfig, TrackerConfig, ZoneConfig
from appliance.analytics.events import Analytics
from appliance.events import Event

NO_HYSTERESIS = HysteresisConfig(margin=0, frames=1)   # every move across counts at once
DOOR = {"name": "door", "a": (300, 0), "b": (300, 480), "in_side": "left"}   # left of a->b (down) is x > 300
CELL = {"name": "cell", "points": [(300, 100), (600, 100), (600, 400), (300, 400)]}   # left edge at x=300


def analytics(scale: float = 1.0, **sections: object) -> Analytics:
    ids = (f"{i:032x}" for i in itertools.count())
    config = AnalyticsConfig(tracker=TrackerConfig(birth_frames=2, lost_frames=5), **sections)
    return Analytics("cam", config, CLASSES, int(640 * scale), int(480 * scale), new_id=lambda: next(ids))


def run(a: Analytics, xs: list[float], scale: float = 1.0) -> list[Event]:
    """One walker whose box's bottom centre is at (x, 300) in each frame, in a frame ``scale`` times 640x480."""
    events: list[Event] = []
    for i, x in enumerate(xs):
        box = [v * scale for v in box_at(x, 300)]
        events += a.step(i, i / FPS, frame(box))[1]
    return events


def lingering(step: int, frames: int) -> list[float]:
    """Walks up to 3 px short of x=300, steps ``step`` px across and jitters there (+-1 px, never back across)
    for ``frames`` frames, steps back and walks away the way it came."""
    approach = [200.0 + 10 * i for i in range(10)] + [297.0]
    across = 297.0 + step
    linger = [across + (0.0, 1.0, -1.0)[i % 3] for i in range(frames)]
    return approach + linger + [297.0] + [297.0 - 10 * i for i in range(1, 10)]


def walk(start: float, stop: float, speed: float = 10.0) -> list[float]:
    n = int(abs(stop - start) / speed) + 1
    return [start + speed * i * (1 if stop > start else -1) for i in range(n)]


def crossings(events: list[Event]) -> list[tuple[str | None, int]]:
    return [(e.direction, e.frame_seq) for e in events if e.event == "cross"]


def zone_events(events: list[Event]) -> list[tuple[str, int]]:
    return [(e.event, e.frame_seq) for e in events if e.zone == "cell"]


@pytest.mark.parametrize("step, frames", [(4, 7), (5, 10), (6, 13), (4, 13), (6, 7)])
def test_lingering_on_a_line_counts_no_crossing(step: int, frames: int) -> None:
    xs = lingering(step, frames)
    a = analytics(lines=[LineConfig(**DOOR)])
    assert crossings(run(a, xs)) == []
    assert a.counts.lines["door"] == {"in": 0, "out": 0}
    # The same track without hysteresis: out across the line and back in, the two counts hysteresis removes.
    b = analytics(lines=[LineConfig(**DOOR, hysteresis=NO_HYSTERESIS)])
    assert [d for d, _ in crossings(run(b, xs))] == ["in", "out"]


def flickering(frames: int, seed: int) -> list[float]:
    """Walks up to the line and stands on it for ``frames`` frames, its anchor jumping 4-6 px from one side to
    the other every 1 to 3 frames (a box that jitters on someone standing still), then walks back."""
    rng = np.random.default_rng(seed)
    xs, side = [200.0 + 10 * i for i in range(10)], -1
    while len(xs) < 10 + frames:
        jump = rng.uniform(4, 6)
        xs += [300.0 + side * jump / 2] * int(rng.integers(1, 4))
        side = -side
    return xs[:10 + frames] + [297.0 - 10 * i for i in range(10)]


@pytest.mark.parametrize("frames, seed", [(7, 0), (10, 1), (13, 2), (13, 3)])
def test_flickering_across_a_line_and_a_zone_edge_counts_nothing(frames: int, seed: int) -> None:
    xs = flickering(frames, seed)
    a = analytics(lines=[LineConfig(**DOOR)], zones=[ZoneConfig(**CELL)])
    assert run(a, xs) == []
    b = analytics(lines=[LineConfig(**DOOR, hysteresis=NO_HYSTERESIS)],
                  zones=[ZoneConfig(**CELL, hysteresis=NO_HYSTERESIS)])
    plain = run(b, xs)
    assert len(crossings(plain)) >= 2 and len(zone_events(plain)) >= 2   # what hysteresis takes away


def test_a_walk_across_a_line_counts_once_each_way() -> None:
    # Rightwards: x=300 is passed between frames 10 (x=300 on it) and 11; 20 px past (x=320) at frame 12.
    a = analytics(lines=[LineConfig(**DOOR)])
    assert crossings(run(a, walk(200, 500))) == [("in", 12)]
    # Leftwards: x=290 at frame 21, 280 (20 px past) at frame 22.
    b = analytics(lines=[LineConfig(**DOOR)])
    assert crossings(run(b, walk(500, 100))) == [("out", 22)]
    assert b.counts.lines["door"] == {"in": 0, "out": 1}


def test_a_walk_that_wavers_before_crossing_counts_once() -> None:
    # Lingers across the line 7 frames, steps back, then walks on across it for good: one crossing, when it is
    # 20 px past (x=320): frames 0..10 approach, 11..17 linger, 18 back at 297, then 307, 317, 327 at 21.
    xs = lingering(5, 7)[:19] + [297.0 + 10 * i for i in range(1, 10)]
    a = analytics(lines=[LineConfig(**DOOR)])
    assert crossings(run(a, xs)) == [("in", 21)]


def test_stopping_just_past_a_line_counts_after_the_frames() -> None:
    # Walks to x=305 (5 px past, inside the 20 px margin) at frame 11 and stands there: the 15th frame seen on
    # the new side (default frames: 15) is frame 25. With frames: 4 it is frame 14.
    xs = walk(195, 305) + [305.0] * 30
    for frames, expected in ((15, 25), (4, 14)):
        a = analytics(lines=[LineConfig(**DOOR, hysteresis=HysteresisConfig(frames=frames))])
        assert crossings(run(a, xs)) == [("in", expected)], frames


def test_the_margin_scales_with_the_box_so_any_resolution_counts_alike() -> None:
    # The same scene in a 3x larger frame: boxes, steps and jitter 3x larger, so is the margin; same events.
    for xs in (lingering(5, 10), walk(200, 500), walk(500, 100)):
        small = run(analytics(lines=[LineConfig(**DOOR)], zones=[ZoneConfig(**CELL)]), xs)
        big_door = {**DOOR, "a": (900, 0), "b": (900, 1440)}
        big_cell = {**CELL, "points": [(3 * x, 3 * y) for x, y in CELL["points"]]}
        big = run(analytics(3.0, lines=[LineConfig(**big_door)], zones=[ZoneConfig(**big_cell)]), xs, scale=3.0)
        assert ([(e.event, e.direction, e.frame_seq) for e in big]
                == [(e.event, e.direction, e.frame_seq) for e in small])


@pytest.mark.parametrize("step, frames", [(4, 7), (5, 10), (6, 13)])
def test_lingering_on_a_zone_edge_enters_and_exits_nothing(step: int, frames: int) -> None:
    xs = lingering(step, frames)
    a = analytics(zones=[ZoneConfig(**CELL)])
    assert zone_events(run(a, xs)) == []
    assert a.counts.zones["cell"] == {"current": 0, "entered": 0, "exited": 0}
    b = analytics(zones=[ZoneConfig(**CELL, hysteresis=NO_HYSTERESIS)])
    assert [t for t, _ in zone_events(run(b, xs))] == ["enter", "exit"]


def test_lingering_just_inside_a_zone_edge_does_not_exit() -> None:
    # Walks deep into the zone, comes back to 3 px inside its left edge and jitters 4-6 px out and back in for
    # 7-13 frames: it entered once and never left.
    xs = walk(200, 400) + walk(390, 310) + [303.0] + [297.0 + (0.0, 1.0, -1.0)[i % 3] for i in range(10)] + [303.0]
    a = analytics(zones=[ZoneConfig(**CELL)])
    assert [t for t, _ in zone_events(run(a, xs))] == ["enter"]
    assert a.counts.zones["cell"] == {"current": 1, "entered": 1, "exited": 0}


def test_a_walk_through_a_zone_enters_and_exits_once() -> None:
    # In from the left: x=310 at frame 11, 20 px inside (x=320) at 12. Out of the right edge (600): x=620 at 42.
    a = analytics(zones=[ZoneConfig(**CELL)])
    assert zone_events(run(a, walk(200, 640))) == [("enter", 12), ("exit", 42)]
    # And back, right to left: x=580 (20 px inside) at frame 6, x=280 (20 px outside) at frame 36.
    b = analytics(zones=[ZoneConfig(**CELL)])
    assert zone_events(run(b, walk(640, 200))) == [("enter", 6), ("exit", 36)]


def test_standing_just_inside_a_zone_enters_after_the_frames() -> None:
    # At x=305 (5 px inside) from frame 11: the 15th frame seen inside is frame 25; the margin never is met.
    a = analytics(zones=[ZoneConfig(**CELL)])
    assert zone_events(run(a, walk(195, 305) + [305.0] * 30)) == [("enter", 25)]


def test_no_hysteresis_counts_the_first_frame_across() -> None:
    # margin 0, frames 1: a crossing at the first frame past the line (x=305 at frame 11), an enter likewise.
    a = analytics(lines=[LineConfig(**DOOR, hysteresis=NO_HYSTERESIS)],
                  zones=[ZoneConfig(**CELL, hysteresis=NO_HYSTERESIS)])
    assert [(e.event, e.frame_seq) for e in run(a, walk(195, 400))] == [("enter", 11), ("cross", 11)]


def test_hysteresis_keys_have_bounds() -> None:
    from pydantic import ValidationError
    for bad in ({"margin": -0.1}, {"frames": 0}, {"margin": 6}, {"frame": 3}):
        with pytest.raises(ValidationError):
            LineConfig(**DOOR, hysteresis=bad)
        with pytest.raises(ValidationError):
            ZoneConfig(**CELL, hysteresis=bad)


def run_with_gaps(a: Analytics, xs: list[float | None]) -> tuple[list[Event], set[int]]:
    """Like run, but None is a frame where the walker is not detected (occluded); also the track ids seen."""
    events: list[Event] = []
    ids: set[int] = set()
    for i, x in enumerate(xs):
        track_ids, evs, _ = a.step(i, i / FPS, frame(box_at(x, 300)) if x is not None else frame())
        ids |= {int(t) for t in track_ids if t >= 0}
        events += evs
    return events, ids


def test_frames_a_track_is_lost_in_count_while_it_stays_across() -> None:
    # 5 px past the door from frame 11 and standing, not detected at 17..21 (5 frames, kept: lost_frames 5),
    # seen again at 305: across since frame 11, so the 15th frame is 25 as if it had been seen all along.
    stays: list[float | None] = [*walk(195, 305), *[305.0] * 5, *[None] * 5, *[305.0] * 15]
    events, ids = run_with_gaps(analytics(lines=[LineConfig(**DOOR)]), stays)
    assert ids == {1} and crossings(events) == [("in", 25)]
    # Seen back on its own side (2 px) after a 3-frame occlusion: the move across is forgotten, and stays so.
    back: list[float | None] = [*walk(195, 305), *[305.0] * 5, *[None] * 3, *[298.0] * 15]
    events, ids = run_with_gaps(analytics(lines=[LineConfig(**DOOR)]), back)
    assert ids == {1} and crossings(events) == []


def test_a_track_removed_before_its_enter_settled_never_entered() -> None:
    # 5 px into the zone from frame 11, then gone for good: removed at 19 (missed > 5) without enter or exit.
    a = analytics(zones=[ZoneConfig(**CELL)])
    gone: list[float | None] = [*walk(195, 305), 305.0, *[None] * 10]
    assert zone_events(run_with_gaps(a, gone)[0]) == []
    assert a.counts.zones["cell"] == {"current": 0, "entered": 0, "exited": 0} and a.active_tracks == 0
