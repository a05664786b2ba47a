"""Plane geometry for zones and lines, in frame pixels (x right, y down, as the picture is displayed).

Scalar functions: the config checks use them (a polygon is checked once), and the analytics ask them about the
one move of a track that may have crossed a line. Questions about every track at once are in zones.Layout.
"""

from __future__ import annotations

from collections.abc import Sequence

Point = tuple[float, float]


def cross(o: Point, a: Point, b: Point) -> float:
    """z of (a - o) x (b - o): > 0 when b lies on the right of o->a as the picture is displayed (y down)."""
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def _on_segment(p: Point, q: Point, r: Point) -> bool:
    """r, known to be collinear with p-q, lies within the segment's bounding box."""
    return min(p[0], q[0]) <= r[0] <= max(p[0], q[0]) and min(p[1], q[1]) <= r[1] <= max(p[1], q[1])


def segments_touch(p1: Point, p2: Point, q1: Point, q2: Point) -> bool:
    """The closed segments p1-p2 and q1-q2 share at least one point (crossing, touching or overlapping)."""
    d1, d2 = cross(q1, q2, p1), cross(q1, q2, p2)
    d3, d4 = cross(p1, p2, q1), cross(p1, p2, q2)
    if ((d1 > 0 > d2) or (d1 < 0 < d2)) and ((d3 > 0 > d4) or (d3 < 0 < d4)):
        return True
    return ((d1 == 0 and _on_segment(q1, q2, p1)) or (d2 == 0 and _on_segment(q1, q2, p2))
            or (d3 == 0 and _on_segment(p1, p2, q1)) or (d4 == 0 and _on_segment(p1, p2, q2)))


def overlapping_pairs(edges: Sequence[tuple[Point, Point]]) -> list[tuple[int, int]]:
    """The pairs (i < j) of edges whose closed bounding boxes overlap, in order: the only ones that can touch. A
    sweep along x finds them without comparing every pair (a zone's outline yields about n of them, not n²)."""
    lo = [(min(a[0], b[0]), min(a[1], b[1])) for a, b in edges]
    hi = [(max(a[0], b[0]), max(a[1], b[1])) for a, b in edges]
    pairs: list[tuple[int, int]] = []
    active: list[int] = []
    for k in sorted(range(len(edges)), key=lambda e: lo[e][0]):
        active = [a for a in active if hi[a][0] >= lo[k][0]]
        pairs.extend((min(a, k), max(a, k)) for a in active if lo[a][1] <= hi[k][1] and lo[k][1] <= hi[a][1])
        active.append(k)
    return sorted(pairs)


def polygon_problem(points: Sequence[Point]) -> str | None:
    """Why ``points`` (a closed ring, last joined to first) is not a simple polygon, or None when it is. (Points
    all on one line always fold back somewhere, so a polygon without area is caught as self-intersecting.)"""
    n = len(points)
    if n < 3:
        return f"a zone needs at least 3 points, got {n}"
    for i in range(n):
        if points[i] == points[(i + 1) % n]:
            return f"points {i} and {(i + 1) % n} are the same point"
    edges = [(points[i], points[(i + 1) % n]) for i in range(n)]
    for i, j in overlapping_pairs(edges):
        adjacent = j == i + 1 or (i == 0 and j == n - 1)
        a1, a2 = edges[i]
        b1, b2 = edges[j]
        if adjacent:
            # Neighbours share one vertex by construction; they intersect further only when they fold back
            # onto each other (collinear, pointing the opposite way).
            shared, other_a, other_b = (a2, a1, b2) if j == i + 1 else (a1, a2, b1)
            if (cross(shared, other_a, other_b) == 0
                    and (other_a[0] - shared[0]) * (other_b[0] - shared[0])
                    + (other_a[1] - shared[1]) * (other_b[1] - shared[1]) > 0):
                return f"edges {i} and {j} fold back onto each other (the polygon intersects itself)"
        elif segments_touch(a1, a2, b1, b2):
            return f"edges {i} and {j} cross or touch (the polygon intersects itself)"
    return None
