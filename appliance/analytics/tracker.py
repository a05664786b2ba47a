"""ByteTrack-class multi-object tracking for one camera: a stable ``track_id`` per object across frames.

``step`` takes ``frames``, how many of the camera's frames passed since the previous call, so frames the tracker
never saw (dropped during a model recovery, skipped under load) still move predictions and age lost tracks:
``lost_frames`` is a span of the camera's frames, not of processed ones. The stages, the buffered IoU and why the
state lives here and not in Triton: docs/analytics.md, "Tracker"."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from appliance.analytics.config import TrackerConfig
from appliance.analytics.kalman import KalmanBoxes, cxcywh_to_xyxy, xyxy_to_cxcywh
from appliance.detections import NO_TRACK


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[N, 4]`` x ``[M, 4]`` xyxy boxes -> ``[N, M]`` intersection over union."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = np.clip(rb - lt, 0.0, None)
    inter = wh[..., 0] * wh[..., 1]
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9)


def buffered(boxes: np.ndarray, scale: float) -> np.ndarray:
    """``[N, 4]`` xyxy boxes grown by ``scale`` of their width and height on every side (C-BIoU's buffer)."""
    if scale == 0:
        return boxes
    pad = np.stack([boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]], axis=1) * scale
    return np.concatenate([boxes[:, :2] - pad, boxes[:, 2:] + pad], axis=1)


def _match(iou: np.ndarray, rows: np.ndarray, cols: np.ndarray, least: float) -> tuple[np.ndarray, np.ndarray]:
    """Best one-to-one pairs of ``rows`` x ``cols`` of ``iou`` with IoU >= ``least`` (indices into iou)."""
    if len(rows) == 0 or len(cols) == 0:
        return rows[:0], cols[:0]
    sub = iou[np.ix_(rows, cols)]
    # Pairs below the threshold cost so much that the solver takes one only where nothing valid is left; such
    # pairs are dropped below, so among valid pairs it finds the most matches, then the highest total IoU.
    cost = np.where(sub >= least, 1.0 - sub, 1e6)
    r, c = linear_sum_assignment(cost)
    ok = sub[r, c] >= least
    return rows[r[ok]], cols[c[ok]]


@dataclass(frozen=True)
class TrackerStep:
    """One frame's result. Detections are the ones kept (confident, or low and matched to a confirmed track)."""

    det_index: np.ndarray   # [K] index of each kept detection in the frame's input
    track_ids: np.ndarray   # [K] int64 track id of each kept detection, NO_TRACK when not (yet) confirmed
    ids: np.ndarray         # [T] int64 every confirmed track after this frame (visible or lost)
    seen: np.ndarray        # [T] index into the input of the detection it matched this frame, -1 when lost
    boxes: np.ndarray       # [T, 4] float64 xyxy: the detection's box where seen, the prediction where lost
    class_ids: np.ndarray   # [T] int32
    scores: np.ndarray      # [T] float32 score of the last detection it matched
    removed_ids: np.ndarray  # [R] int64 confirmed tracks dropped this frame (lost for longer than lost_frames)
    first_boxes: np.ndarray  # [T, 4] float64 xyxy: the detection that started each track (its birth)


class ByteTracker:
    """All tracks of one camera. A plain object: nothing outside it holds its state."""

    def __init__(self, config: TrackerConfig) -> None:
        self.config = config
        self._kf = KalmanBoxes.empty()
        self._track_id: np.ndarray = np.zeros(0, dtype=np.int64)  # NO_TRACK while tentative
        self._class: np.ndarray = np.zeros(0, dtype=np.int32)
        self._score: np.ndarray = np.zeros(0, dtype=np.float32)
        self._hits: np.ndarray = np.zeros(0, dtype=np.int32)      # consecutive frames seen while tentative
        self._missed: np.ndarray = np.zeros(0, dtype=np.int32)    # frames since last seen
        self._first: np.ndarray = np.zeros((0, 4))                # xyxy of the detection that started the track
        self._next_id = 1

    @property
    def active(self) -> int:
        """Confirmed tracks now (visible or lost)."""
        return int(np.count_nonzero(self._track_id >= 0))

    def step(self, boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray,
             min_scores: np.ndarray, frames: int = 1) -> TrackerStep:
        """One frame: ``boxes`` [D, 4] xyxy, ``scores`` [D], ``class_ids`` [D], and ``min_scores`` [D] the
        confident threshold of each detection's class; ``frames`` the frames since the previous step (1 when
        none was missed)."""
        cfg = self.config
        # Beyond lost_frames + 1 frames every confirmed track unseen is gone anyway: no need to go further.
        frames = min(max(1, int(frames)), cfg.lost_frames + 2)
        self._kf.predict(frames)
        visible_last = self._missed == 0  # seen in the previous processed frame: the second stage's tracks
        self._missed = self._missed + (frames - 1)
        stale = (self._track_id >= 0) & (self._missed > cfg.lost_frames)
        stale_ids = self._track_id[stale]
        self._compact(~stale)
        visible_last = visible_last[~stale]
        considered = np.nonzero(scores >= cfg.low_score)[0]
        d_boxes = np.asarray(boxes, dtype=np.float64)[considered]
        d_scores = np.asarray(scores, dtype=np.float32)[considered]
        d_class = np.asarray(class_ids, dtype=np.int32)[considered]
        confident = d_scores >= min_scores[considered]

        n = len(self._kf)
        iou = iou_matrix(buffered(cxcywh_to_xyxy(self._kf.pos), cfg.buffer), buffered(d_boxes, cfg.buffer))
        if cfg.class_aware:
            iou[self._class[:, None] != d_class[None, :]] = 0.0

        confirmed = self._track_id >= 0
        high = np.nonzero(confident)[0]
        low = np.nonzero(~confident)[0]
        r1, c1 = _match(iou, np.nonzero(confirmed)[0], high, cfg.match_iou)
        free = np.ones(n, dtype=bool)
        free[r1] = False
        r2, c2 = _match(iou, np.nonzero(confirmed & free & visible_last)[0], low, cfg.low_match_iou)
        unused = np.ones(len(considered), dtype=bool)
        unused[c1] = False
        left = high[unused[high]]
        r3, c3 = _match(iou, np.nonzero(~confirmed)[0], left, cfg.birth_iou)

        rows = np.concatenate([r1, r2, r3])
        cols = np.concatenate([c1, c2, c3])
        matched_det: np.ndarray = np.full(n, -1, dtype=np.int64)
        matched_det[rows] = cols
        self._kf.update(rows, xyxy_to_cxcywh(d_boxes[cols]))
        self._score[rows] = d_scores[cols]
        if not cfg.class_aware:
            self._class[rows] = d_class[cols]
        seen = matched_det >= 0
        self._missed = np.where(seen, 0, self._missed + 1)
        self._hits = np.where(seen, self._hits + 1, 0)

        # Tentative tracks that missed die; those seen long enough are confirmed, in row (= birth) order.
        promote = ~confirmed & (self._hits >= cfg.birth_frames)
        count = int(np.count_nonzero(promote))
        self._track_id[promote] = np.arange(self._next_id, self._next_id + count)
        self._next_id += count
        expired = confirmed & (self._missed > cfg.lost_frames)
        removed_ids = np.concatenate([stale_ids, self._track_id[expired]])
        keep = (confirmed | seen) & ~expired

        unused[c3] = False
        born = left[unused[left]]
        self._compact(keep)
        matched_det = matched_det[keep]
        self._add(born, d_boxes, d_scores, d_class)
        matched_det = np.concatenate([matched_det, born])

        return self._result(matched_det, considered, confident, d_boxes, removed_ids)

    def _compact(self, keep: np.ndarray) -> None:
        if keep.all():
            return
        self._kf = self._kf.select(keep)
        self._track_id, self._class = self._track_id[keep], self._class[keep]
        self._score, self._hits, self._missed = self._score[keep], self._hits[keep], self._missed[keep]
        self._first = self._first[keep]

    def _add(self, born: np.ndarray, d_boxes: np.ndarray, d_scores: np.ndarray, d_class: np.ndarray) -> None:
        if len(born) == 0:
            return
        k = len(born)
        self._kf = self._kf.extend(KalmanBoxes.start(xyxy_to_cxcywh(d_boxes[born])))
        ids = np.full(k, NO_TRACK, dtype=np.int64)
        if self.config.birth_frames <= 1:  # no birth buffer: confirmed on sight
            ids = np.arange(self._next_id, self._next_id + k)
            self._next_id += k
        self._track_id = np.concatenate([self._track_id, ids])
        self._class = np.concatenate([self._class, d_class[born]])
        self._score = np.concatenate([self._score, d_scores[born]])
        self._hits = np.concatenate([self._hits, np.ones(k, dtype=np.int32)])
        self._missed = np.concatenate([self._missed, np.zeros(k, dtype=np.int32)])
        self._first = np.concatenate([self._first, d_boxes[born]])

    def _result(self, matched_det: np.ndarray, considered: np.ndarray, confident: np.ndarray,
                d_boxes: np.ndarray, removed_ids: np.ndarray) -> TrackerStep:
        det_track = np.full(len(considered), NO_TRACK, dtype=np.int64)
        has = matched_det >= 0
        det_track[matched_det[has]] = self._track_id[has]
        kept = confident | (det_track >= 0)  # low detections only where they continue a confirmed track
        rows = np.nonzero(self._track_id >= 0)[0]
        md = matched_det[rows]  # index into the considered detections, -1 where lost
        seen = md >= 0
        boxes = cxcywh_to_xyxy(self._kf.pos[rows])
        boxes[seen] = d_boxes[md[seen]]
        seen_input = np.full(len(rows), -1, dtype=np.int64)
        seen_input[seen] = considered[md[seen]]
        return TrackerStep(det_index=considered[kept], track_ids=det_track[kept], ids=self._track_id[rows],
                           seen=seen_input, boxes=boxes, class_ids=self._class[rows], scores=self._score[rows],
                           removed_ids=removed_ids, first_boxes=self._first[rows])
