"""The tracker's settings (buffered IoU, ``lost_frames: 10``, line sides from the birth detection) checked on
frames they were not tuned on: the real detector (yolov3-tiny through ONNX Runtime and the plain pipeline) on
frames 150..449 of OpenCV's vtest.avi (held out: the settings were tuned on 0..149 in test_analytics_vtest.py),
through the analytics, against line crossings established by eye before the tracker was run on these frames.

The lines are those of test_analytics_vtest.py: "left" x=350 from y=200 to 420, "right" x=560 from y=220 to 420,
both drawn top (a) to bottom (b) with ``in_side: right``, so "in" is a walk from right to left.

Ground truth, established independently of the code: frames 150..449 written out as PNGs with both lines drawn
(ticks every 20 px), viewed every 5 frames as pairs (1.2-1.5x), then every 2 frames at 2.5-4x around each
crossing and each close call; the membership point is the bottom centre of the walker's feet. Positions below
are frame pixels (x, feet y).
Walkers: NAVY = man in a navy striped sweater and light jeans; HOOD = woman in a white hooded jacket; ASIAN =
man in a black leather jacket carrying white papers; BROWN = brown-haired man in a dark jacket and jeans; BALD =
bald man in a dark grey jacket and jeans; COAT = man in a long black coat; PAIR = man in a red/navy jacket and a
blonde woman walking together; RED = woman in a red jacket.
- 150..160: NAVY walks right to left from x~607, crosses "right" at ~155 (y~306): right in. HOOD, behind the
  group at the sign, walks left along the top of the path and crosses "left" at ~163 (y~240): left in.
- 165..190: NAVY goes on left and crosses "left" at ~184 (y~288): left in. ASIAN (x~450 at 150) walks right and
  crosses "right" at ~175 (y~300): right out. BROWN (x~403 at 150) walks right and crosses "right" at ~188
  (y~290): right out, then turns down towards the bottom right.
- 180..195, close call: BALD comes down from the top right walking left and passes x=560 at ~189 with his feet at
  y~209, 11 px above the top end of "right" (220): no crossing.
- 205..225: BALD crosses "left" at ~224 (y~238): left in. BROWN turns back and walks up-left, crossing "right"
  near its bottom end at ~224 (y~395, 25 px inside): right in.
- 230..300: COAT enters from the right and crosses "right" at ~250 (y~261): right in; ASIAN comes back from the
  right and crosses "right" at ~259 (y~336): right in. BROWN crosses "left" at ~260 (y~300): left in. COAT crosses
  "left" at ~283 (y~226, 26 px below its top end): left in. ASIAN crosses "left" at ~295 (y~297): left in.
- 300..345: the walkers on the left turn back right. BROWN crosses "left" at ~307 (y~222, 22 px below its top
  end): left out. BALD crosses "left" at ~326 (y~248): left out. ASIAN at ~339 (y~295) and COAT at ~343 (y~241)
  cross "left", two frames apart: left out, out. (BROWN wanders up-right to x~500, y~226 at 336 and comes back.)
- 345..385: BROWN crosses "left" right to left at ~368 (y~242): left in, and then stands at x~310 on his phone
  to the end. BALD crosses "right" at ~362 (y~282): right out. ASIAN crosses "right" at ~377 (y~357): right out.
  COAT walks up-right and crosses "right" at ~382 with his feet at y~226, 6 px below its top end (the closest
  call of the segment, checked every frame at 4x, 379..388): right out.
- 385..449, close call: COAT turns at the top (y~196 at 410) and comes back down-left, passing x=560 at ~421 with
  his feet at y~208, 12 px above the top end of "right": no crossing; he is at x~503 at 445, not at "left".
- Not crossing: PAIR walks down from the top right at x~610..690 (right of "right") and leaves by the right edge
  at ~350; RED enters from the right at ~430 and walks left, her feet at x~578 at 449, still right of "right".
Expected: left in 7 (163, 184, 224, 260, 283, 295, 368), out 4 (307, 326, 339, 343);
right in 4 (155, 224, 250, 259), out 5 (175, 188, 362, 377, 382).

Then the tracker, run once the truth above was committed: 18 of the 20 crossings, each at the right line, way
and frame (within MATCH_FRAMES), and no crossing nobody made. The two it misses are both COAT's, and both come
from the detector's boxes, read from the held-out detections (person, score >= 0.25):
- left out 343: COAT's box is below the threshold at 340 (0.16), jumps 316 -> 336 at 341, and goes weak again
  from 344 (x 361, 0.26; 0.13 and 0.19 at 345, 346) while he passes behind ASIAN's box; the track does not bridge
  the 17 px jump of a 13 px-wide box and is born again right of the line, where it does not count a crossing.
- right out 382: the box's bottom is at y 212..217 while he passes x=560 (383..384), above the line's top end
  (220); by eye his feet are at ~226, the closest call of the segment. The box ends ~10 px above his feet.
The settings were not changed for this segment: the test holds the tracker to the 18 and allows exactly these two
misses (a tracker that finds them too still passes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.analytics.config import AnalyticsConfig, LineConfig, TrackerConfig
from appliance.analytics.events import Analytics
from appliance.detections import Detections
from appliance.detector.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
FIRST_FRAME = 150   # the held-out detections start at this frame of vtest.avi

# (line, direction, frame) of every crossing seen by eye (the docstring says whose).
TRUTH = [("right", "in", 155), ("left", "in", 163), ("right", "out", 175), ("left", "in", 184),
         ("right", "out", 188), ("left", "in", 224), ("right", "in", 224), ("right", "in", 250),
         ("right", "in", 259), ("left", "in", 260), ("left", "in", 283), ("left", "in", 295),
         ("left", "out", 307), ("left", "out", 326), ("left", "out", 339), ("left", "out", 343),
         ("right", "out", 362), ("left", "in", 368), ("right", "out", 377), ("right", "out", 382)]
EXPECTED = {"left": {"in": 7, "out": 4}, "right": {"in": 4, "out": 5}}
MATCH_FRAMES = 5    # a tracker crossing within this many frames of a seen one, same line and way, is that one
# Crossings seen by eye that the detector's boxes do not carry (the docstring says why); measured, not tuned away.
DETECTOR_MISSES = {("left", "out", 343), ("right", "out", 382)}


def unmatched(seen: list[tuple[str, str, int]], got: list[tuple[str, str, int]]
              ) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]]]:
    """(crossings seen by eye the tracker missed, tracker crossings nobody made): each tracker crossing is paired
    with the nearest unpaired seen crossing of the same line and direction within MATCH_FRAMES."""
    missed, extra = list(seen), []
    for line, way, frame in got:
        near = [t for t in missed if t[0] == line and t[1] == way and abs(t[2] - frame) <= MATCH_FRAMES]
        if near:
            missed.remove(min(near, key=lambda t: abs(t[2] - frame)))
        else:
            extra.append((line, way, frame))
    return missed, extra


def test_the_truth_table_adds_up_to_the_expected_counts() -> None:
    counts = {line: {"in": 0, "out": 0} for line in EXPECTED}
    for line, way, _ in TRUTH:
        counts[line][way] += 1
    assert counts == EXPECTED


@pytest.mark.slow
def test_line_crossings_on_held_out_frames_match_the_crossings_seen_by_eye(
        vtest_heldout_detections: list[Detections]) -> None:
    classes = load_profile(REPO / "repository" / "profiles" / "yolov3-tiny.yaml").classes
    # The settings of test_analytics_vtest.py, unchanged: this segment checks them, it does not tune them.
    cfg = AnalyticsConfig(classes={"person": 0.25}, tracker=TrackerConfig(lost_frames=10), lines=[
        LineConfig(name="left", a=(350, 200), b=(350, 420), in_side="right"),
        LineConfig(name="right", a=(560, 220), b=(560, 420), in_side="right")])
    a = Analytics("vtest", cfg, classes, 768, 576)
    got: list[tuple[str, str, int]] = []
    for i, dets in enumerate(vtest_heldout_detections):
        frame = FIRST_FRAME + i
        _, events, _ = a.step(frame, frame / 10.0, dets)
        got += [(e.line, e.direction, frame) for e in events if e.event == "cross" and e.line and e.direction]
    missed, extra = unmatched(TRUTH, got)
    assert extra == [], f"crossings nobody made: {extra} (missed {missed})"
    assert set(missed) <= DETECTOR_MISSES, f"missed {missed}; only {sorted(DETECTOR_MISSES)} are explained"
    # The counters agree with the events: the seen counts less what was missed.
    expected = {line: dict(ways) for line, ways in EXPECTED.items()}
    for line, way, _ in missed:
        expected[line][way] -= 1
    assert a.counts.lines == expected
