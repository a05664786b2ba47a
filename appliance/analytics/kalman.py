"""A constant-velocity Kalman filter on boxes, for every track of a camera at once.

The state is ByteTrack's (centre x, centre y, width, height and their velocities) with its noise model: standard
deviations proportional to the box's size (1/20 of it for position and measurement, 1/160 for velocity). With a
diagonal process and measurement noise and a diagonal start, the 8x8 covariance never couples two coordinates:
it stays four independent 2x2 blocks (position, velocity) per coordinate. So the filter keeps those blocks as
three ``[N, 4]`` arrays (``pp``, ``pv``, ``vv``) and every predict and update is a handful of element-wise numpy
operations over all tracks, exactly equal to the matrix form, without an 8x8 matrix or a loop over tracks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

POSITION_WEIGHT = 1.0 / 20
VELOCITY_WEIGHT = 1.0 / 160


def xyxy_to_cxcywh(boxes: np.ndarray) -> np.ndarray:
    out = np.empty((len(boxes), 4), dtype=np.float64)
    out[:, 0] = (boxes[:, 0] + boxes[:, 2]) * 0.5
    out[:, 1] = (boxes[:, 1] + boxes[:, 3]) * 0.5
    out[:, 2] = boxes[:, 2] - boxes[:, 0]
    out[:, 3] = boxes[:, 3] - boxes[:, 1]
    return out


def cxcywh_to_xyxy(state: np.ndarray) -> np.ndarray:
    w = np.maximum(state[:, 2], 1.0) * 0.5  # a prediction may shrink a box below nothing
    h = np.maximum(state[:, 3], 1.0) * 0.5
    return np.stack([state[:, 0] - w, state[:, 1] - h, state[:, 0] + w, state[:, 1] + h], axis=1)


def _scale(pos: np.ndarray) -> np.ndarray:
    """Per-coordinate size the noise is proportional to: the height for x, y and h, the width for w."""
    s = np.empty_like(pos)
    h = np.maximum(pos[:, 3], 1.0)
    s[:, 0] = h
    s[:, 1] = h
    s[:, 2] = np.maximum(pos[:, 2], 1.0)
    s[:, 3] = h
    return s


@dataclass
class KalmanBoxes:
    """Means and covariance blocks of N tracks; rows line up with the tracker's rows."""

    pos: np.ndarray  # [N, 4] cx, cy, w, h
    vel: np.ndarray  # [N, 4] their change per frame
    pp: np.ndarray   # [N, 4] variance of each position coordinate
    pv: np.ndarray   # [N, 4] covariance position-velocity
    vv: np.ndarray   # [N, 4] variance of each velocity

    @classmethod
    def empty(cls) -> "KalmanBoxes":
        z = np.zeros((0, 4))
        return cls(z, z.copy(), z.copy(), z.copy(), z.copy())

    @classmethod
    def start(cls, measured: np.ndarray) -> "KalmanBoxes":
        """New tracks at the measured ``[K, 4]`` cxcywh, not moving, uncertain about their speed."""
        s = _scale(measured)
        return cls(measured.copy(), np.zeros_like(measured), (2 * POSITION_WEIGHT * s) ** 2,
                   np.zeros_like(measured), (10 * VELOCITY_WEIGHT * s) ** 2)

    def __len__(self) -> int:
        return len(self.pos)

    def extend(self, other: "KalmanBoxes") -> "KalmanBoxes":
        return KalmanBoxes(*(np.concatenate([a, b]) for a, b in
                             ((self.pos, other.pos), (self.vel, other.vel), (self.pp, other.pp),
                              (self.pv, other.pv), (self.vv, other.vv))))

    def select(self, rows: np.ndarray) -> "KalmanBoxes":
        return KalmanBoxes(self.pos[rows], self.vel[rows], self.pp[rows], self.pv[rows], self.vv[rows])

    def predict(self, frames: int = 1) -> None:
        """``frames`` frames ahead, one at a time: x += v; P = F P F' + Q, block by block."""
        for _ in range(frames):
            s = _scale(self.pos)
            self.pos += self.vel
            self.pp += 2 * self.pv + self.vv + (POSITION_WEIGHT * s) ** 2
            self.pv += self.vv
            self.vv += (VELOCITY_WEIGHT * s) ** 2

    def update(self, rows: np.ndarray, measured: np.ndarray) -> None:
        """Correct ``rows`` with their measured ``[K, 4]`` cxcywh boxes."""
        if len(rows) == 0:
            return
        pos, pp, pv = self.pos[rows], self.pp[rows], self.pv[rows]
        r = (POSITION_WEIGHT * _scale(pos)) ** 2
        innovation_var = pp + r
        gain_p = pp / innovation_var
        gain_v = pv / innovation_var
        residual = measured - pos
        self.pos[rows] = pos + gain_p * residual
        self.vel[rows] += gain_v * residual
        self.vv[rows] -= gain_v * pv
        self.pp[rows] = (1 - gain_p) * pp
        self.pv[rows] = (1 - gain_p) * pv
