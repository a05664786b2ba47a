"""The page's layout file: validated as check-config validates the config file, kept durably in the state
directory, read back on start, and its YAML fits the config file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from appliance.analytics.config import AnalyticsConfig
from appliance.analytics.overlay import OverlayError, layout_yaml, overlaid, read_overlay, with_layout, write_overlay

BASE = AnalyticsConfig(classes={"person": 0.3}, lines=[{"name": "walkway", "a": [560, 220], "b": [560, 420],
                                                         "in_side": "right"}])
CLASSES = ["person", "car"]
BOWTIE = {"name": "bow", "points": [[100, 100], [250, 250], [250, 100], [100, 250]]}


def _edit(zones: list, lines: list) -> tuple[AnalyticsConfig | None, list[tuple[tuple, str]]]:
    config, problems = with_layout(BASE, zones, lines, 768, 576, CLASSES, "hall")
    return config, [(p.path, p.message) for p in problems]


def test_a_self_intersecting_zone_is_refused_at_its_points() -> None:
    config, problems = _edit([BOWTIE], [])
    assert config is None
    assert [path for path, _ in problems] == [("zones", 0, "points")]
    assert "intersect" in problems[0][1]


def test_points_outside_the_frame_and_a_name_used_twice_are_refused_where_they_are() -> None:
    outside = {"name": "far", "a": [10, 10], "b": [10, 900], "in_side": "left"}
    assert [path for path, _ in _edit([], [outside])[1]] == [("lines", 0, "b")]
    twice = {"name": "walkway", "points": [[0, 0], [10, 0], [10, 10]]}
    config, problems = _edit([twice], BASE.model_dump(mode="json")["lines"])
    assert config is None and problems[0][0] == ("lines", 0, "name") and "used twice" in problems[0][1]


def test_a_layout_is_kept_read_back_and_replaces_only_zones_and_lines(tmp_path: Path) -> None:
    config, problems = _edit([{"name": "front", "units": "normalized", "points": [[0, .5], [1, .5], [1, 1]]}], [])
    assert problems == [] and config is not None
    write_overlay(tmp_path, "hall", config, "olga", 1_700_000_000.0)
    overlay = read_overlay(tmp_path, "hall")
    assert overlay is not None and overlay.edited_by == "olga" and "2023-11-14T22:13:20Z" in overlay.describe()
    again = overlaid(BASE, overlay, 768, 576)
    assert [z.name for z in again.zones] == ["front"] and again.lines == [] and again.classes == {"person": 0.3}
    assert read_overlay(tmp_path, "other") is None


def test_a_broken_or_unfitting_layout_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "layouts").mkdir()
    (tmp_path / "layouts" / "hall.json").write_text("{not json")
    with pytest.raises(OverlayError, match="hall.json"):
        read_overlay(tmp_path, "hall")
    (tmp_path / "layouts" / "hall.json").write_text(json.dumps(
        {"zones": [BOWTIE], "lines": [], "edited_by": "olga", "edited_at": 0}))
    overlay = read_overlay(tmp_path, "hall")
    assert overlay is not None
    with pytest.raises(OverlayError, match="does not fit"):
        overlaid(BASE, overlay, 768, 576)


def test_copy_yaml_is_the_config_files_zones_and_lines() -> None:
    config, _ = _edit([{"name": "front", "points": [[0, 300], [768, 300], [768, 576]], "dwell_s": 20}],
                      BASE.model_dump(mode="json")["lines"])
    assert config is not None
    doc = yaml.safe_load(layout_yaml(config))
    assert AnalyticsConfig(**doc).zones == config.zones and AnalyticsConfig(**doc).lines == config.lines


def test_the_class_filter_is_checked_kept_and_restored(tmp_path: Path) -> None:
    config, problems = with_layout(BASE, [], [], 768, 576, CLASSES, "hall", {"dog": 0.5})
    assert config is None and [(p.path, "unknown class 'dog'" in p.message) for p in problems] == [
        (("classes", "dog"), True)]
    config, problems = with_layout(BASE, [], [], 768, 576, CLASSES, "hall", {"car": 0.4})
    assert problems == [] and config is not None and config.classes == {"car": 0.4}
    write_overlay(tmp_path, "hall", config, "olga", 0.0)
    overlay = read_overlay(tmp_path, "hall")
    assert overlay is not None and overlaid(BASE, overlay, 768, 576).classes == {"car": 0.4}
    assert with_layout(BASE, [], [], 768, 576, CLASSES)[0].classes == {"person": 0.3}  # type: ignore[union-attr]
