"""The tracker names the input rows it kept, and the analytics give each track id back to its own row: rows
with identical boxes are told apart by their index, never by their box."""

from __future__ import annotations

import numpy as np
from support.tracks import CLASSES, FPS, box_at, frame

from appliance.analytics.config import AnalyticsConfig, TrackerConfig
from appliance.analytics.events import Analytics
from appliance.analytics.tracker import ByteTracker
from appliance.detections import NO_TRACK

BOX = box_at(300)


def analytics(**overrides: object) -> Analytics:
    return Analytics("cam", AnalyticsConfig(**{"tracker": TrackerConfig(birth_frames=2), **overrides}), CLASSES,
                     640, 480)


def test_the_tracker_returns_the_rows_it_kept() -> None:
    tracker = ByteTracker(TrackerConfig(birth_frames=2))
    boxes = np.array([BOX, box_at(500), BOX], dtype=np.float32)
    scores = np.array([0.9, 0.05, 0.9], dtype=np.float32)  # row 1 is below low_score: not kept
    for _ in range(3):
        step = tracker.step(boxes, scores, np.zeros(3, dtype=np.int32), np.full(3, 0.25, dtype=np.float32))
    assert step.det_index.tolist() == [0, 2]
    assert sorted(step.track_ids.tolist()) == [1, 2]  # two identical boxes, two tracks


def test_two_identical_boxes_get_their_own_track_ids() -> None:
    a = analytics()
    for i in range(4):
        track_ids, _, _ = a.step(i, i / FPS, frame(BOX, BOX))
    assert sorted(track_ids.tolist()) == [1, 2]
    assert a.active_tracks == 2


def test_the_track_id_goes_to_the_kept_row_not_to_an_identical_dropped_one() -> None:
    # Row 0 is below low_score, row 1 the same box confidently: a join on the box would give row 0 the id.
    a = analytics()
    for i in range(3):
        track_ids, _, _ = a.step(i, i / FPS, frame(BOX, BOX, scores=[0.05, 0.9]))
    assert track_ids.tolist() == [NO_TRACK, 1]


def test_rows_of_classes_outside_the_allow_list_keep_their_place() -> None:
    a = analytics(classes={"car": 0.3})
    for i in range(3):
        track_ids, _, _ = a.step(i, i / FPS, frame(BOX, box_at(100), BOX, classes=[0, 2, 2]))
    assert track_ids.tolist() == [NO_TRACK, 1, 2]  # the person is not tracked; the two cars in birth order
