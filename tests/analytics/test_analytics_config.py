"""Every bad zone, line or class in a camera's analytics section gets its own error: the model's cross-field
checks (raised, with the key they are about, so check-config prints FILE:LINE) and check_analytics (frame size and
the model's class names)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from appliance.analytics.check import check_analytics
from appliance.analytics.config import MAX_POINTS, AnalyticsConfig, LineConfig, ZoneConfig
from appliance.analytics.geometry import overlapping_pairs, segments_touch
from appliance.config.validate import load_config
from appliance.config.yamlsource import ConfigError

SQUARE = [(10, 10), (100, 10), (100, 100), (10, 100)]
CLASSES = ["person", "bicycle", "car"]


def _error(model: type, **data: object) -> str:
    with pytest.raises(ValidationError) as err:
        model.model_validate(data)
    return str(err.value)


def test_a_good_section_passes_every_check() -> None:
    cfg = AnalyticsConfig(classes={"person": 0.4}, zones=[ZoneConfig(name="cell", points=SQUARE, dwell_s=20)],
                          lines=[LineConfig(name="door", units="normalized", a=(0, 0.5), b=(1, 0.5), in_side="right")])
    assert check_analytics(640, 480, cfg, CLASSES, camera="cam") == []


@pytest.mark.parametrize("points", [[], [(0, 0)], [(0, 0), (10, 10)]])
def test_a_zone_needs_three_points(points: list) -> None:
    assert "at least 3 points" in _error(ZoneConfig, name="z", points=points)


@pytest.mark.parametrize("points, reason", [
    ([(0, 0), (10, 10), (10, 0), (0, 10)], "intersects itself"),          # a bow tie
    ([(0, 0), (10, 0), (10, 10), (5, -5), (0, 10)], "intersects itself"),  # an edge cutting back across another
    ([(0, 0), (10, 0), (5, 0)], "fold back"),                            # three points on one line: no area
    ([(0, 0), (10, 0), (10, 0), (0, 10)], "same point"),                 # a repeated corner
    ([(0, 0), (10, 0), (10, 10), (10, 5)], "fold back"),                 # a spike back along the previous edge
])
def test_a_zone_must_be_a_simple_polygon(points: list, reason: str) -> None:
    assert reason in _error(ZoneConfig, name="z", points=points)


def test_normalized_coordinates_stay_within_0_and_1() -> None:
    assert "within 0..1" in _error(ZoneConfig, name="z", units="normalized", points=[(0, 0), (1.2, 0), (1, 1)])
    assert "within 0..1" in _error(LineConfig, name="l", units="normalized", a=(0, 0), b=(1, 1.5), in_side="left")


def test_pixel_coordinates_are_not_negative() -> None:
    assert "must not be negative" in _error(ZoneConfig, name="z", points=[(-1, 0), (10, 0), (10, 10)])
    assert "must not be negative" in _error(LineConfig, name="l", a=(0, -3), b=(10, 10), in_side="left")


def test_a_line_needs_two_different_points_and_a_side() -> None:
    assert "two different points" in _error(LineConfig, name="l", a=(5, 5), b=(5, 5), in_side="left")
    assert "in_side" in _error(LineConfig, name="l", a=(0, 0), b=(5, 5))
    assert "in_side" in _error(LineConfig, name="l", a=(0, 0), b=(5, 5), in_side="up")


@pytest.mark.parametrize("data", [
    {"zones": [{"name": "a", "points": SQUARE}, {"name": "a", "points": SQUARE}]},
    {"zones": [{"name": "a", "points": SQUARE}], "lines": [{"name": "a", "a": (0, 0), "b": (1, 1), "in_side": "left"}]},
    {"lines": [{"name": "l", "a": (0, 0), "b": (1, 1), "in_side": "left"}] * 2},
])
def test_names_are_unique_across_zones_and_lines(data: dict) -> None:
    assert "used twice" in _error(AnalyticsConfig, **data)


def test_scores_and_keys_are_checked() -> None:
    assert "within 0..1" in _error(AnalyticsConfig, classes={"person": 1.5})
    assert "Extra inputs" in _error(AnalyticsConfig, zone=[])            # a typo of `zones`
    assert "anchor" in _error(AnalyticsConfig, anchor="feet")


def test_check_analytics_names_camera_item_and_reason() -> None:
    cfg = AnalyticsConfig(classes={"person": 0.4, "forklift": 0.5},
                          zones=[ZoneConfig(name="cell", points=[(10, 10), (700, 10), (100, 100)])],
                          lines=[LineConfig(name="door", a=(0, 0), b=(10, 500), in_side="left")])
    problems = check_analytics(640, 480, cfg, CLASSES, camera="dock")
    assert [(p.camera, p.name, p.path) for p in problems] == [
        ("dock", "forklift", ("classes", "forklift")),
        ("dock", "cell", ("zones", 0, "points", 1)),
        ("dock", "door", ("lines", 0, "b")),
    ]
    assert "unknown class 'forklift'" in problems[0].reason
    assert "outside the 640x480 frame" in problems[1].reason and "outside" in problems[2].reason
    assert str(problems[1]).startswith("camera 'dock': 'cell':")


def test_normalized_items_are_never_outside_the_frame() -> None:
    cfg = AnalyticsConfig(zones=[ZoneConfig(name="all", units="normalized", points=[(0, 0), (1, 0), (1, 1), (0, 1)])])
    assert check_analytics(16, 16, cfg, CLASSES) == []


def test_a_cross_field_error_points_at_its_line_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "analytics.yaml"
    path.write_text("min_score: 0.3\n"
                    "zones:\n"
                    "  - name: cell\n"
                    "    points: [[0, 0], [10, 10], [10, 0], [0, 10]]\n"
                    "lines:\n"
                    "  - name: cell\n"
                    "    a: [0, 0]\n"
                    "    b: [5, 5]\n"
                    "    in_side: left\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, AnalyticsConfig)
    lines = {issue.line: issue.message for issue in err.value.issues}
    assert "intersects itself" in lines[4], lines
    assert len(err.value.issues) == 1  # the duplicate name is found once the zone itself is valid


def test_the_sweep_finds_every_pair_of_edges_that_touch() -> None:
    """The self-intersection check compares only edges whose bounding boxes overlap; on random small polygons
    (many touching, collinear and crossing edges) every pair that touches, by brute force, is among them."""
    rng = random.Random(7)
    for _ in range(3000):
        n = rng.randint(3, 9)
        points = [(float(rng.randint(0, 6)), float(rng.randint(0, 6))) for _ in range(n)]
        edges = [(points[i], points[(i + 1) % n]) for i in range(n)]
        touching = {(i, j) for i in range(n) for j in range(i + 1, n) if segments_touch(*edges[i], *edges[j])}
        assert touching <= set(overlapping_pairs(edges)), points


def test_a_zone_with_more_than_the_allowed_points_is_refused_before_any_geometry() -> None:
    with pytest.raises(ValidationError, match=f"at most {MAX_POINTS} items"):
        ZoneConfig(name="z", points=[(i, i * i % 7) for i in range(100_000)])
    with pytest.raises(ValidationError, match="valid number"):
        LineConfig(name="l", a=("10", 300), b=(10, 400), in_side="left")  # type: ignore[arg-type]
