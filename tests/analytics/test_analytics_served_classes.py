"""Analytics names and filters classes by the served model's names, from the frame they change (an OTA switch to
a model with its own class names): a filter entry the model lacks is inactive, never an error."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from appliance.analytics.config import AnalyticsConfig
from appliance.analytics.events import Analytics
from appliance.detections import NO_TRACK, Detections

COCO = ("person", "bicycle", "car")
OWN = ("worker", "bike", "vehicle")
ZONE = {"name": "yard", "units": "normalized", "points": [[0, 0], [1, 0], [1, 1], [0, 1]],
        "hysteresis": {"margin": 0, "frames": 1}}


def _frame(class_id: int) -> Detections:
    return Detections.untracked(np.array([[100, 100, 200, 300]], np.float32), np.array([0.9], np.float32),
                                np.array([class_id]))


def test_a_filter_on_the_new_names_runs_from_the_switch(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="appliance.analytics.events"):
        analytics = Analytics("dock", AnalyticsConfig(classes={"worker": 0.3}, zones=[ZONE]), COCO, 640, 480)
    assert "worker" in caplog.text and "inactive" in caplog.text  # a warning, not an error
    for seq in range(1, 6):  # the base model: worker is none of its classes, nothing is tracked
        track_ids, events, _ = analytics.step(seq, seq * 0.5, _frame(0))
        assert events == [] and (track_ids == NO_TRACK).all()
    analytics.use_classes(OWN)
    found = []
    for seq in range(6, 12):
        found += analytics.step(seq, seq * 0.5, _frame(0))[1]
    assert [(e.event, e.class_name, e.zone) for e in found] == [("enter", "worker", "yard")]
    analytics.use_classes(())  # detections without names change nothing
    assert analytics.class_names == list(OWN)
