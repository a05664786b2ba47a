"""A reload's zones and lines for a running camera: the file's new ones, unless the operator's page applied a
layout for that camera, which keeps priority over the file as it does at start (Layouts.set_camera)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from appliance.analytics.overlay import write_overlay
from appliance.capture.config import CameraConfig
from appliance.pipeline.layouts import Layouts

CLASSES = ["person", "car"]


def _camera(line_y: int, min_score: float = 0.25) -> CameraConfig:
    analytics: dict[str, Any] = {"min_score": min_score,
                                 "lines": [{"name": "door", "a": [0, line_y], "b": [640, line_y], "in_side": "left"}]}
    return CameraConfig.model_validate({"id": "cam", "source": {"type": "file", "path": "/v.mp4"}, "width": 640,
                                        "height": 480, "analytics": analytics})


def test_the_files_new_lines_run_when_the_page_applied_none(tmp_path: Path) -> None:
    layouts = Layouts([_camera(100)], tmp_path, lambda: CLASSES)
    running = layouts.set_camera(_camera(300, min_score=0.6))
    assert running.analytics is not None and running.analytics.lines[0].a == (0, 300)
    assert running.analytics.min_score == 0.6
    assert layouts.current("cam") == running.analytics and layouts.source("cam") == "config"


def test_a_layout_applied_on_the_page_keeps_priority_over_the_files_new_lines(tmp_path: Path) -> None:
    page = _camera(200).analytics
    assert page is not None
    write_overlay(tmp_path, "cam", page, "operator", 1_700_000_000.0)
    layouts = Layouts([_camera(100)], tmp_path, lambda: CLASSES)
    running = layouts.set_camera(_camera(300, min_score=0.6))
    assert running.analytics is not None and running.analytics.lines[0].a == (0, 200)  # the page's line
    assert running.analytics.min_score == 0.6  # what the page does not edit comes from the new file
    assert "operator" in (layouts.source("cam") or "") and "operator" not in (layouts.anonymous_source("cam") or "")


def test_a_removed_camera_is_forgotten(tmp_path: Path) -> None:
    layouts = Layouts([_camera(100)], tmp_path, lambda: CLASSES)
    layouts.remove_camera("cam")
    assert layouts.source("cam") is None and layouts.anonymous_source("cam") is None
    assert layouts.current("cam") is None and layouts.yaml("cam") == ""
