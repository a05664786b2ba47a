"""The real detector (yolov3-tiny through ONNX Runtime and the plain pipeline) on frames 0..149 of OpenCV's
vtest.avi, through the analytics, against line-crossing counts established by eye.

Ground truth, established independently of the code: frames 0..149 were written out every 5 frames (and every
4 around each crossing) as PNGs with each line drawn, and each walker's feet were followed across the line.
Both lines are vertical, drawn from top (a) to bottom (b); looking from a towards b on the picture your right
hand is the left half, so ``in_side: right`` makes "in" a walk from right to left.
- line "left", x=350 from y=200 to 420: the man in the dark jacket walks left->right at ~frame 13; the man in
  the black coat walks right->left out of the group by the pole at ~63 and back left->right at ~98.
  Expected: in (right->left) 1, out (left->right) 2.
- line "right", x=560 from y=220 to 420: the long-haired woman in the black coat right->left at ~10; the man in
  the navy/red jacket right->left at ~45 and the blonde woman beside him at ~52; the man in the black coat
  left->right at ~123; the woman in the white hood right->left at ~137. (The pair walks back up past the line's
  top end at ~115 with their feet at y~200, above y=220: no crossing; the bald man walks up 20 px right of the
  line, closest at ~88, and does not cross.)
Re-checked by a second look (every 4 frames, 3x zoom at 110..120 and 56..66): the same counts; the walker out of
the group and back is a man in a black coat, not the woman who came in from the right at ~10.
  Expected: in 4, out 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.analytics.config import AnalyticsConfig, LineConfig, TrackerConfig
from appliance.analytics.events import Analytics
from appliance.detections import Detections
from appliance.detector.profile import load_profile

REPO = Path(__file__).resolve().parents[2]



EXPECTED = {"left": {"in": 1, "out": 2}, "right": {"in": 4, "out": 1}}


@pytest.mark.slow
def test_line_crossings_match_the_counts_seen_by_eye(vtest_detections: list[Detections]) -> None:
    classes = load_profile(REPO / "repository" / "profiles" / "yolov3-tiny.yaml").classes
    # lost_frames=10: ByteTrack's 30-frame buffer is 1 s at 30 fps; it scales it by fps/30, and vtest runs at 10.
    cfg = AnalyticsConfig(classes={"person": 0.25}, tracker=TrackerConfig(lost_frames=10), lines=[
        LineConfig(name="left", a=(350, 200), b=(350, 420), in_side="right"),
        LineConfig(name="right", a=(560, 220), b=(560, 420), in_side="right")])
    a = Analytics("vtest", cfg, classes, 768, 576)
    for i, dets in enumerate(vtest_detections):
        a.step(i, i / 10.0, dets)
    assert a.counts.lines == EXPECTED
