"""The detection gate: a reduced-precision engine against the fp32 reference, compared as detections.

Both run on the same held-out frames through the inference pre/post (letterbox, decode, NMS:
appliance.detector.prepost). A reference detection is found when the candidate has one of the same class with
IoU >= ``gate.iou`` (greedy, best reference score first, each candidate used once). Recall is the share of the
reference's detections found, precision the share of the candidate's that match one, and the score difference
is the mean |score| gap over matches. Raw tensors on random inputs say little about what a subscriber gets;
this says it directly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Mapping

import numpy as np

from appliance.detections import RawDetections
from appliance.detector.buildprofile import GateProfile
from appliance.detector.calibration.frames import FrameSet
from appliance.detector.prepost.letterbox import plan
from appliance.detector.prepost.pipeline import Postprocessor, Preprocessor
from appliance.detector.profile import ModelProfile
from appliance.detector.repository.wrap import FRAME_INPUT

RunFn = Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]


@dataclass
class GateReport:
    """What the gate measured; ``passed`` only when every floor holds and the reference detected something."""

    frames: int
    reference_detections: int
    candidate_detections: int
    matched: int
    recall: float
    precision: float
    mean_score_diff: float
    min_recall: float
    min_precision: float
    max_score_diff: float
    passed: bool

    def summary(self) -> str:
        verdict = "passed" if self.passed else "REFUSED"
        return (f"detection gate {verdict}: recall {self.recall:.3f} (floor {self.min_recall:g}), precision "
                f"{self.precision:.3f} (floor {self.min_precision:g}), mean score diff {self.mean_score_diff:.3f} "
                f"(max {self.max_score_diff:g}) over {self.reference_detections} reference detections on "
                f"{self.frames} held-out frames")

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "summary": self.summary()}


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of xyxy boxes [A,4] x [B,4]."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)), dtype=np.float64)
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def match(ref: RawDetections, cand: RawDetections, iou: float) -> list[tuple[int, int]]:
    """Greedy one-to-one matches (reference index, candidate index): same class, IoU >= ``iou``."""
    ious = iou_matrix(ref.boxes.astype(np.float64), cand.boxes.astype(np.float64))
    used: set[int] = set()
    pairs = []
    for r in np.argsort(-ref.scores, kind="stable"):
        best, best_iou = -1, iou
        for c in range(len(cand.scores)):
            if c in used or cand.class_ids[c] != ref.class_ids[r]:
                continue
            if ious[r, c] >= best_iou:
                best, best_iou = c, ious[r, c]
        if best >= 0:
            used.add(best)
            pairs.append((int(r), best))
    return pairs


def detections_per_frame(run: RunFn, frames: FrameSet, model_profile: ModelProfile, input_name: str,
                         output_name: str, in_graph: bool = False) -> list[RawDetections]:
    """Run an engine frame by frame and post-process each output as the appliance does. ``in_graph``: the engine
    takes the letterboxed uint8 frame and answers final boxes (appliance.detector.repository.wrap), as the stages
    feed it."""
    post = Postprocessor(model_profile)
    pre = Preprocessor(model_profile)
    spec = model_profile.input
    out = []
    for frame, tensor in zip(frames.frames, frames.tensors):
        h, w = frame.image.shape[:2]
        lb = plan(w, h, spec.width, spec.height, spec.resize)
        if in_graph:
            canvas, lb = pre.canvas(frame.image, "BGR")
            y = run({FRAME_INPUT: canvas[None]})
            out.append(post.final(y["BOXES"], y["SCORES"], y["CLASSES"], y["COUNT"], lb))
            continue
        raw = np.asarray(run({input_name: tensor[None]})[output_name])[0]
        out.append(post(raw, lb))
    return out


def evaluate(reference: list[RawDetections], candidate: list[RawDetections], gate: GateProfile) -> GateReport:
    """The gate's numbers over all frames (pooled, so a frame with many objects weighs more)."""
    n_ref = sum(len(d.scores) for d in reference)
    n_cand = sum(len(d.scores) for d in candidate)
    matched, diffs = 0, []
    for ref, cand in zip(reference, candidate):
        for r, c in match(ref, cand, gate.iou):
            matched += 1
            diffs.append(abs(float(ref.scores[r]) - float(cand.scores[c])))
    recall = matched / n_ref if n_ref else 0.0
    precision = matched / n_cand if n_cand else (1.0 if n_ref == 0 else 0.0)
    score_diff = float(np.mean(diffs)) if diffs else 0.0
    passed = (n_ref > 0 and recall >= gate.min_recall and precision >= gate.min_precision
              and score_diff <= gate.max_score_diff)
    return GateReport(len(reference), n_ref, n_cand, matched, round(recall, 4), round(precision, 4),
                      round(score_diff, 4), gate.min_recall, gate.min_precision, gate.max_score_diff, passed)


def run_gate(candidate: RunFn, reference: RunFn, frames: FrameSet, model_profile: ModelProfile,
             gate: GateProfile, input_name: str, output_name: str, candidate_in_graph: bool = False) -> GateReport:
    """Both engines on the held-out frames, compared as detections (``input_name``/``output_name``: the
    reference's; a ``candidate_in_graph`` engine gets the uint8 frame and answers final boxes)."""
    ref = detections_per_frame(reference, frames, model_profile, input_name, output_name)
    cand = detections_per_frame(candidate, frames, model_profile, input_name, output_name, candidate_in_graph)
    return evaluate(ref, cand, gate)
