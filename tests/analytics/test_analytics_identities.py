"""Identity switches of the tracker on vtest.avi frames 40..90, against identities annotated by hand.

Ground truth, established by looking at frames (written out with a 20 px grid, frames 40, 50, ..., 90 and, for
the walker who passes behind a standing man, 54, 57, 60 and 63 at 3x zoom), independent of the code: the
torso centre of six people at those key frames, linearly interpolated between them. In this segment the pair
(A, B) walks side by side across the right part of the scene and up towards the group, the bald man (C) comes
in from the right edge at ~48 and walks up behind them, and the man in the black coat (D) leaves the group by
the pole, passes behind the standing man in the brown jacket (E) at ~54..58 (hidden for a few frames) and walks
off to the left, then turns back at ~80. E and the man by the sign (F) stand still.

The score is MOT's identity switch count (IDSW, Bernardin and Stiefelhagen, "CLEAR MOT", 2008): each frame
every annotated person is paired one-to-one with the confirmed tracks' boxes that cover their torso centre
(within SLACK_PX of the box), nearest box centre first (Hungarian); a person paired
with a different track id than the last time they were paired is one switch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment

from appliance.analytics.config import AnalyticsConfig, TrackerConfig
from appliance.analytics.events import Analytics
from appliance.detections import Detections
from appliance.detector.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
FIRST, LAST = 40, 90
SLACK_PX = 8.0   # how far outside a box an annotated point may lie and still be covered (reading precision)

# person -> {frame: (x, y) torso centre in frame pixels}, read off the grid.
KEYFRAMES: dict[str, dict[int, tuple[float, float]]] = {
    "A red jacket": {40: (587, 272), 50: (524, 254), 60: (485, 232), 70: (460, 217), 80: (460, 205), 90: (475, 190)},
    "B blonde": {40: (617, 266), 50: (567, 251), 60: (517, 232), 70: (492, 217), 80: (487, 205), 90: (503, 190)},
    "C bald": {50: (689, 294), 60: (632, 267), 70: (604, 240), 80: (584, 220), 90: (584, 205)},
    "D black coat": {40: (449, 229), 50: (446, 207), 54: (415, 200), 57: (397, 197), 60: (374, 205), 63: (357, 207),
                     70: (307, 200), 80: (272, 205), 90: (305, 215)},
    "E brown jacket": {40: (387, 216), 50: (386, 207), 54: (385, 213), 60: (387, 217), 70: (388, 212), 80: (384, 210),
                       90: (391, 210)},
    "F by the sign": {40: (409, 222), 50: (421, 213), 54: (418, 210), 60: (410, 220), 70: (419, 215), 80: (419, 215),
                      90: (419, 220)},
}
# Measured with this scorer: 14 for this tracker, 30 for the tracker before C-BIoU buffers, ByteTrack's 2-frame birth
# and a 1 s lost buffer (commit 577e521). Most are real (D loses his id behind E; A and B's ids flicker where the
# detector merges them into one box, 40..45); some are the scorer pairing a person with a neighbour's box in a
# frame where their own detection is missing. A regression bound, not a target: it must only go down.
MAX_SWITCHES = 14


def annotated(frame: int) -> tuple[list[str], np.ndarray]:
    """The people annotated at ``frame`` and their torso centres, interpolated between key frames."""
    names, points = [], []
    for name, keys in KEYFRAMES.items():
        frames = sorted(keys)
        if frames[0] <= frame <= frames[-1]:
            names.append(name)
            points.append([np.interp(frame, frames, [keys[f][axis] for f in frames]) for axis in (0, 1)])
    return names, np.asarray(points, dtype=np.float64).reshape(-1, 2)


def identity_switches(tracks_per_frame: dict[int, tuple[np.ndarray, np.ndarray]]) -> dict[str, list[int]]:
    """Per person, the track ids they were paired with in order, one entry per change (so switches = len - 1)."""
    history: dict[str, list[int]] = {name: [] for name in KEYFRAMES}
    for frame in range(FIRST, LAST + 1):
        names, people = annotated(frame)
        boxes, ids = tracks_per_frame[frame]
        if len(boxes) == 0:
            continue
        centres = (boxes[:, :2] + boxes[:, 2:]) / 2
        dist = np.linalg.norm(people[:, None, :] - centres[None, :, :], axis=2)
        covered = ((people[:, None, :] >= boxes[None, :, :2] - SLACK_PX)
                   & (people[:, None, :] <= boxes[None, :, 2:] + SLACK_PX)).all(axis=2)
        rows, cols = linear_sum_assignment(np.where(covered, dist, 1e6))
        for r, c in zip(rows, cols):
            if covered[r, c] and (not history[names[r]] or history[names[r]][-1] != ids[c]):
                history[names[r]].append(int(ids[c]))
    return history


def test_identity_switches_on_a_hand_annotated_segment(vtest_detections: list[Detections]) -> None:
    classes = load_profile(REPO / "repository" / "profiles" / "yolov3-tiny.yaml").classes
    cfg = AnalyticsConfig(classes={"person": 0.25}, tracker=TrackerConfig(lost_frames=10))  # 1 s at 10 fps
    analytics = Analytics("vtest", cfg, classes, 768, 576)
    tracked: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for i, dets in enumerate(vtest_detections[:LAST + 1]):
        track_ids, _, _ = analytics.step(i, i / 10.0, dets)
        confirmed = track_ids >= 0
        tracked[i] = (dets.boxes[confirmed].astype(np.float64), track_ids[confirmed])
    history = identity_switches(tracked)
    assert all(history.values()), f"someone was never paired with a track: {history}"
    switches = sum(len(ids) - 1 for ids in history.values())
    assert switches <= MAX_SWITCHES, history
