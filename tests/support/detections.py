"""A frame's :class:`~appliance.detections.Detections` written as rows, for tests that think in objects."""

from __future__ import annotations

from collections.abc import Sequence

from appliance.detections import Detections

Row = tuple[int, str, float, Sequence[float]]  # class_id, class_name, score, (x1, y1, x2, y2)


def rows(*detections: Row) -> Detections:
    """Untracked Detections of these rows; the class names lookup is made from the rows' names (an id no row
    names is ``class_<id>``)."""
    names = {class_id: name for class_id, name, _, _ in detections}
    class_names = [names.get(i, f"class_{i}") for i in range(max(names, default=-1) + 1)]
    return Detections.untracked([d[3] for d in detections], [d[2] for d in detections],
                                [d[0] for d in detections], class_names)
