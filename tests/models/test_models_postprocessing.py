"""Head decoding (both layouts), thresholds, allow-list and class-aware NMS, against straightforward references."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from appliance.detector.prepost.decode import HeadFormat, decode
from appliance.detector.prepost.errors import InputRejected
from appliance.detector.prepost.nms import nms

C = 4


def _rows_head(rng: np.random.Generator, n: int = 300) -> np.ndarray:
    """[n, 5+C] rows: cx, cy, w, h in a 320-pixel input, objectness, class probabilities."""
    xy = rng.uniform(20, 300, (n, 2))
    wh = rng.uniform(5, 80, (n, 2))
    return np.concatenate([xy, wh, rng.uniform(0, 1, (n, 1)), rng.uniform(0, 1, (n, C))], 1).astype(np.float32)


def _loop_decode(head: np.ndarray, thr: np.ndarray, allowed=None):
    """Row by row, the obvious way."""
    out = []
    for row in head:
        scores = row[5:] * row[4]
        if allowed is not None:
            scores = np.array([s if i in allowed else -1 for i, s in enumerate(scores)], dtype=np.float32)
        cid = int(np.argmax(scores))
        if scores[cid] > thr[cid]:
            cx, cy, w, h = row[:4]
            out.append(((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), float(scores[cid]), cid))
    return out


@pytest.mark.parametrize("allowed", [None, [1, 3]])
def test_rows_with_objectness_matches_a_row_loop(allowed) -> None:
    head = _rows_head(np.random.default_rng(2))
    thr = np.array([0.2, 0.5, 0.3, 0.9], dtype=np.float32)
    boxes, scores, ids = decode(head, HeadFormat("rows_with_objectness", C), thr,
                                None if allowed is None else np.array(allowed))
    expected = _loop_decode(head, thr, allowed)
    assert len(boxes) == len(expected) > 10
    for (box, score, cid), b, s, i in zip(expected, boxes, scores, ids):
        np.testing.assert_allclose(b, box, atol=1e-4)
        assert abs(s - score) < 1e-6 and i == cid
    if allowed is not None:
        assert set(ids.tolist()) <= set(allowed)


def test_channels_first_layout_is_the_same_detections_transposed() -> None:
    head = _rows_head(np.random.default_rng(3))
    v8 = np.concatenate([head[:, :4], head[:, 5:] * head[:, 4:5]], axis=1).T.copy()  # [4+C, N], no objectness
    thr = np.full(C, 0.25, dtype=np.float32)
    a = decode(head, HeadFormat("rows_with_objectness", C), thr)
    b = decode(v8[None], HeadFormat("channels_first", C), thr)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-6)


def test_xyxy_and_normalized_boxes() -> None:
    head = np.zeros((1, 5 + C), dtype=np.float32)
    head[0, :5] = [0.1, 0.2, 0.5, 0.6, 1.0]
    head[0, 5 + 2] = 0.9
    boxes, scores, ids = decode(head, HeadFormat("rows_with_objectness", C, "xyxy", "normalized", 320, 240),
                                np.full(C, 0.25, np.float32))
    np.testing.assert_allclose(boxes[0], [32, 48, 160, 144], atol=1e-4)
    assert ids.tolist() == [2] and scores[0] == pytest.approx(0.9)


@pytest.mark.parametrize("shape,fmt,words", [
    ((10, 84), HeadFormat("rows_with_objectness", 80), r"needs \[N, 85\], got \(10, 84\)"),
    ((85, 10), HeadFormat("channels_first", 80), r"needs \[84, N\], got \(85, 10\)"),
    ((2, 10, 85), HeadFormat("rows_with_objectness", 80), "must be 2-D"),
    ((10,), HeadFormat("rows_with_objectness", 80), "must be 2-D"),
])
def test_head_of_the_wrong_shape_is_rejected(shape, fmt, words) -> None:
    with pytest.raises(InputRejected, match=words) as info:
        decode(np.zeros(shape, np.float32), fmt, np.full(80, 0.25, np.float32))
    assert info.value.reason == "head_shape"


def test_nothing_above_threshold_gives_empty_typed_arrays() -> None:
    boxes, scores, ids = decode(np.zeros((50, 5 + C), np.float32), HeadFormat("rows_with_objectness", C),
                                np.full(C, 0.25, np.float32))
    assert boxes.shape == (0, 4) and boxes.dtype == np.float32
    assert scores.shape == (0,) and ids.dtype == np.int32
    assert nms(boxes, scores, ids, 0.45).shape == (0,)


@pytest.mark.parametrize("seed", range(5))
def test_class_aware_nms_matches_opencv(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    xy = rng.uniform(0, 600, (n, 2))
    wh = rng.uniform(10, 120, (n, 2))
    boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
    scores = rng.uniform(0.3, 1, n).astype(np.float32)
    ids = rng.integers(0, 3, n).astype(np.int32)
    keep = nms(boxes, scores, ids, 0.45)
    rects = [(float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])) for b in boxes]
    expected = cv2.dnn.NMSBoxesBatched(rects, scores.tolist(), ids.tolist(), 0.0, 0.45)
    assert sorted(keep.tolist()) == sorted(np.asarray(expected).reshape(-1).tolist())
    assert np.all(np.diff(scores[keep]) <= 0), "kept boxes are best first"


def test_nms_never_suppresses_across_classes_and_caps_the_count() -> None:
    boxes = np.array([[0, 0, 10, 10]] * 3 + [[100, 100, 110, 110]], dtype=np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.6], dtype=np.float32)
    ids = np.array([0, 1, 0, 0], dtype=np.int32)
    assert nms(boxes, scores, ids, 0.5).tolist() == [0, 1, 3]
    assert nms(boxes, scores, ids, 0.5, max_detections=2).tolist() == [0, 1]
