"""One frame's detections as columns, from the Triton result to the MQTT encoder (and a model's, unchecked).

Row ``k`` of every column is one object. Rows are selected as in supervision's ``Detections``: ``d[mask]``,
``d[indices]``, ``d[a:b]``, ``d[k]`` give a ``Detections`` of those rows. A reader that wants Python objects
iterates (``for row in d``) at the end of the path; everything before it works on the arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator, NamedTuple, Sequence, Union

import numpy as np

NO_TRACK = -1  # a row's track id when it has none (no analytics, or its track is not confirmed yet)

# A row selection: an int (one row), a slice, an int index array or a bool mask with one entry per row.
RowIndex = Union[int, slice, Sequence[int], np.ndarray]


class Detection(NamedTuple):
    """One row of :class:`Detections` as Python values; ``box`` is (x1, y1, x2, y2) in frame pixels."""

    class_id: int
    class_name: str
    score: float
    box: tuple[float, float, float, float]
    track_id: int | None


@dataclass(frozen=True)
class RawDetections:
    """One image's detections as a model answered them, neither converted nor checked: what the engine gate and
    the OTA golden check compare, where a bad model's NaN or inverted box must be compared, not refused. What
    the appliance carries on is :class:`Detections`."""

    boxes: np.ndarray      # [K, 4] xyxy frame pixels
    scores: np.ndarray     # [K]
    class_ids: np.ndarray  # [K]


@dataclass(frozen=True, eq=False)
class Detections:
    """A frame's detections. The columns are converted to these dtypes on construction (no copy when they
    already have them) and checked, so a bad value fails in the code that made it."""

    boxes: np.ndarray      # [K, 4] float32 xyxy, pixels of the frame
    scores: np.ndarray     # [K] float32 within [0, 1]
    class_ids: np.ndarray  # [K] int64 >= 0
    track_ids: np.ndarray  # [K] int64 >= 1, or NO_TRACK
    class_names: Sequence[str] = ()  # by class id; an id beyond them is named class_<id>

    def __post_init__(self) -> None:
        boxes = np.asarray(self.boxes, dtype=np.float32)
        if boxes.size == 0:
            boxes = boxes.reshape(0, 4)
        elif boxes.ndim != 2 or boxes.shape[1] != 4:
            raise ValueError(f"boxes must be [K, 4] (x1, y1, x2, y2), got shape {boxes.shape}")
        columns: dict[str, np.ndarray] = {"scores": np.asarray(self.scores, dtype=np.float32),
                                          "class_ids": np.asarray(self.class_ids, dtype=np.int64),
                                          "track_ids": np.asarray(self.track_ids, dtype=np.int64)}
        for name, column in columns.items():
            if column.shape != (len(boxes),):
                raise ValueError(f"{name} must be [K] with K = {len(boxes)} boxes, got shape {column.shape}")
        object.__setattr__(self, "boxes", boxes)
        for name, column in columns.items():
            object.__setattr__(self, name, column)
        self._check()

    def _check(self) -> None:
        boxes, scores, track_ids = self.boxes, self.scores, self.track_ids
        finite = np.isfinite(boxes).all(axis=1)
        checks = ((~finite, "box coordinate must be a finite number"),
                  (finite & ((boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1])),
                   "box must have x2 >= x1 and y2 >= y1"),
                  (~np.isfinite(scores), "score must be a finite number"),
                  ((scores < 0.0) | (scores > 1.0), "score must be within [0, 1]"),
                  (self.class_ids < 0, "class_id must be an int >= 0"),
                  ((track_ids < 1) & (track_ids != NO_TRACK), f"track_id must be >= 1 or NO_TRACK ({NO_TRACK})"))
        for bad, text in checks:
            if bad.any():
                row = int(np.argmax(bad))
                raise ValueError(f"{text}, got row {row}: class_id {int(self.class_ids[row])}, score "
                                 f"{float(scores[row])!r}, box {tuple(boxes[row].tolist())}, "
                                 f"track_id {int(track_ids[row])}")

    @classmethod
    def untracked(cls, boxes: Any, scores: Any, class_ids: Any, class_names: Sequence[str] = ()) -> Detections:
        """Every row without a track id."""
        return cls(boxes, scores, class_ids, np.full(len(np.asarray(class_ids)), NO_TRACK, dtype=np.int64),
                   class_names)

    @classmethod
    def empty(cls, class_names: Sequence[str] = ()) -> Detections:
        return cls.untracked(np.zeros((0, 4), dtype=np.float32), np.zeros(0, dtype=np.float32),
                             np.zeros(0, dtype=np.int64), class_names)

    def __len__(self) -> int:
        return len(self.boxes)

    def __getitem__(self, index: RowIndex) -> Detections:
        """The rows ``index`` selects, in its order, as a ``Detections`` (one row for an int); the names are
        kept. A bool mask must have one entry per row: another length raises IndexError."""
        if isinstance(index, (int, np.integer)):
            index = [int(index)]
        elif not isinstance(index, slice):
            index = np.asarray(index)
            if index.dtype == bool and index.shape != (len(self),):
                raise IndexError(f"a row mask needs one bool per row ({len(self)}), got shape {index.shape}")
            if index.ndim != 1:
                raise IndexError(f"rows are selected by a flat index array, got shape {index.shape}")
            if index.size == 0:
                index = index.astype(np.intp)
        return self._of_rows(self.boxes[index], self.scores[index], self.class_ids[index], self.track_ids[index])

    def _of_rows(self, boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray,
                 track_ids: np.ndarray) -> Detections:
        """Rows of this (checked) Detections: not converted or checked again."""
        rows = object.__new__(Detections)
        for name, value in (("boxes", boxes), ("scores", scores), ("class_ids", class_ids),
                            ("track_ids", track_ids), ("class_names", self.class_names)):
            object.__setattr__(rows, name, value)
        return rows

    def __iter__(self) -> Iterator[Detection]:
        """Each row as a :class:`Detection` of Python values, for a reader that goes through them one by one."""
        return iter([Detection(c, self.class_name(c), s, (b[0], b[1], b[2], b[3]), None if t == NO_TRACK else t)
                     for c, s, b, t in zip(self.class_ids.tolist(), self.scores.tolist(), self.boxes.tolist(),
                                            self.track_ids.tolist())])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Detections):
            return NotImplemented
        return (tuple(self.class_names) == tuple(other.class_names) and np.array_equal(self.boxes, other.boxes)
                and np.array_equal(self.scores, other.scores) and np.array_equal(self.class_ids, other.class_ids)
                and np.array_equal(self.track_ids, other.track_ids))

    __hash__ = None  # type: ignore[assignment]  # mutable arrays inside

    def with_track_ids(self, track_ids: np.ndarray) -> Detections:
        """The same rows with these track ids ([K], by row; NO_TRACK where none)."""
        return replace(self, track_ids=track_ids)

    def class_name(self, class_id: int) -> str:
        names = self.class_names
        return names[class_id] if 0 <= class_id < len(names) else f"class_{class_id}"
