"""Detections: a frame's detections as columns; converted and checked on construction, rows selected and read back."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from appliance.detections import NO_TRACK, Detection, Detections

NAMES = ("person", "bicycle", "car")


def two() -> Detections:
    return Detections(np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.float32), np.array([0.5, 0.25], dtype=np.float32),
                      np.array([2, 0], dtype=np.int32), np.array([NO_TRACK, 4]), NAMES)


def test_columns_get_their_dtypes_without_a_copy_when_they_have_them() -> None:
    boxes = np.zeros((2, 4), dtype=np.float32)
    scores = np.zeros(2, dtype=np.float32)
    d = Detections(boxes, scores, np.array([1, 2], dtype=np.int32), [NO_TRACK, 3])
    assert d.boxes is boxes and d.scores is scores
    assert (d.boxes.dtype, d.scores.dtype, d.class_ids.dtype, d.track_ids.dtype) == (
        np.float32, np.float32, np.int64, np.int64)
    assert len(d) == 2


def test_empty_and_untracked() -> None:
    empty = Detections.empty(NAMES)
    assert len(empty) == 0 and empty.boxes.shape == (0, 4) and list(empty) == []
    assert Detections.untracked([], [], [], NAMES) == empty
    untracked = Detections.untracked([[0, 0, 1, 1], [1, 1, 2, 2]], [0.5, 0.5], [0, 1])
    assert untracked.track_ids.tolist() == [NO_TRACK, NO_TRACK]


def test_rows_are_python_values_with_names_looked_up_and_no_track_as_none() -> None:
    d = two()
    assert list(d) == [Detection(2, "car", 0.5, (1.0, 2.0, 3.0, 4.0), None),
                        Detection(0, "person", 0.25, (5.0, 6.0, 7.0, 8.0), 4)]
    row = list(d)[0]
    assert all(type(v) is float for v in row.box) and type(row.class_id) is int and type(row.score) is float


def test_an_id_beyond_the_class_names_is_class_id() -> None:
    d = Detections.untracked([[0, 0, 1, 1]], [0.5], [7], NAMES)
    assert list(d)[0].class_name == "class_7" and d.class_name(1) == "bicycle"
    assert list(Detections.untracked([[0, 0, 1, 1]], [0.5], [0]))[0].class_name == "class_0"


def test_with_track_ids_keeps_every_other_column() -> None:
    d = two()
    tracked = d.with_track_ids(np.array([9, NO_TRACK]))
    assert tracked.track_ids.tolist() == [9, NO_TRACK] and d.track_ids.tolist() == [NO_TRACK, 4]
    assert tracked.boxes is d.boxes and tracked.class_ids is d.class_ids and tracked.class_names is d.class_names
    with pytest.raises(ValueError, match="track_ids must be \\[K\\] with K = 2"):
        d.with_track_ids(np.array([1]))


def test_equality_compares_the_columns() -> None:
    assert two() == two()
    assert two() != two().with_track_ids(np.array([1, 4]))
    assert two() != Detections(two().boxes, two().scores, two().class_ids, two().track_ids, ("other",))
    with pytest.raises(TypeError):
        hash(two())


@pytest.mark.parametrize("args, fragment", [
    ((-1, "x", 0.5, (0, 0, 1, 1)), "class_id must be an int >= 0"),
    ((1, "x", 1.5, (0, 0, 1, 1)), "score must be within [0, 1]"),
    ((1, "x", math.nan, (0, 0, 1, 1)), "score must be a finite number"),
    ((1, "x", 0.5, (0, 0, 1)), "boxes must be [K, 4] (x1, y1, x2, y2)"),
    ((1, "x", 0.5, (5, 0, 1, 1)), "x2 >= x1"),
    ((1, "x", 0.5, (0, 0, 1, math.inf)), "box coordinate must be a finite number"),
])
def test_bad_detection_fails_at_construction(args: tuple, fragment: str) -> None:
    class_id, _, score, box = args
    with pytest.raises(ValueError) as info:
        Detections.untracked([box], [score], [class_id])
    assert fragment in str(info.value)


def test_the_error_names_the_row() -> None:
    with pytest.raises(ValueError, match="score must be within \\[0, 1\\], got row 1: class_id 0, score 2.0"):
        Detections.untracked([[0, 0, 1, 1], [0, 0, 1, 1]], [0.5, 2.0], [1, 0])


@pytest.mark.parametrize("track_id", [0, -2])
def test_a_track_id_is_at_least_1_or_no_track(track_id: int) -> None:
    with pytest.raises(ValueError, match="track_id must be >= 1 or NO_TRACK"):
        Detections([[0, 0, 1, 1]], [0.5], [0], [track_id])


def test_columns_must_agree_on_the_count() -> None:
    with pytest.raises(ValueError, match="scores must be \\[K\\] with K = 2 boxes, got shape \\(1,\\)"):
        Detections.untracked([[0, 0, 1, 1], [0, 0, 1, 1]], [0.5], [0, 0])
    with pytest.raises(ValueError, match="class_ids must be \\[K\\]"):
        Detections([[0, 0, 1, 1]], [0.5], [[0]], [NO_TRACK])


def four() -> Detections:
    return Detections([[0, 0, 1, 1], [10, 10, 12, 14], [20, 0, 25, 5], [30, 30, 40, 40]], [0.9, 0.8, 0.7, 0.6],
                      [0, 1, 2, 1], [5, NO_TRACK, 7, 8], NAMES)


def columns(d: Detections) -> tuple[list, list, list, list]:
    return d.boxes.tolist(), d.scores.tolist(), d.class_ids.tolist(), d.track_ids.tolist()


# Row k of four(), written out: what each selection must give back.
ROW = [([0.0, 0.0, 1.0, 1.0], np.float32(0.9).item(), 0, 5), ([10.0, 10.0, 12.0, 14.0], np.float32(0.8).item(), 1, -1),
       ([20.0, 0.0, 25.0, 5.0], np.float32(0.7).item(), 2, 7), ([30.0, 30.0, 40.0, 40.0], np.float32(0.6).item(), 1, 8)]


def expected(*rows: int) -> tuple[list, list, list, list]:
    return ([ROW[r][0] for r in rows], [ROW[r][1] for r in rows], [ROW[r][2] for r in rows],
            [ROW[r][3] for r in rows])


@pytest.mark.parametrize("index, rows", [
    (np.array([True, False, True, False]), (0, 2)),
    ([False, True, False, True], (1, 3)),
    (np.array([3, 0, 3]), (3, 0, 3)),
    ([2, -4], (2, 0)),
    (slice(1, 3), (1, 2)),
    (slice(None, None, -2), (3, 1)),
    (2, (2,)),
    (-1, (3,)),
    (np.int64(1), (1,)),
])
def test_selection_gives_the_rows_in_the_order_asked(index: Any, rows: tuple[int, ...]) -> None:
    picked = four()[index]
    assert isinstance(picked, Detections) and len(picked) == len(rows)
    assert columns(picked) == expected(*rows)
    assert picked.class_names == NAMES
    assert (picked.boxes.dtype, picked.scores.dtype, picked.class_ids.dtype, picked.track_ids.dtype) == (
        np.float32, np.float32, np.int64, np.int64)
    assert picked == Detections(*(np.asarray(c) for c in expected(*rows)), NAMES)


@pytest.mark.parametrize("index", [np.zeros(4, dtype=bool), [], np.array([], dtype=np.int64), slice(4, 9)])
def test_a_selection_of_no_rows_is_empty(index: Any) -> None:
    picked = four()[index]
    assert len(picked) == 0 and picked.boxes.shape == (0, 4) and list(picked) == []
    assert picked == Detections.empty(NAMES)
    assert len(Detections.empty()[np.zeros(0, dtype=bool)]) == 0


@pytest.mark.parametrize("mask", [np.array([True, False, True]), [True] * 5, np.ones((4, 1), dtype=bool)])
def test_a_mask_of_the_wrong_length_is_refused(mask: Any) -> None:
    with pytest.raises(IndexError, match="a row mask needs one bool per row \\(4\\), got shape"):
        four()[mask]


def test_a_row_beyond_the_end_or_a_nested_index_is_refused() -> None:
    with pytest.raises(IndexError):
        four()[4]
    with pytest.raises(IndexError, match="flat index array"):
        four()[np.array([[0, 1]])]


def test_iteration_and_selection_agree() -> None:
    d = four()
    assert [row.track_id for row in d] == [5, None, 7, 8]
    assert list(d[d.scores >= np.float32(0.75)]) == list(d)[:2]
