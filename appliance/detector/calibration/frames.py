"""Real frames for INT8 calibration and for the detection gate, through the same preprocess as inference.

A frame set is named by the profile (``calibration.sources`` or ``gate.sources``: images, folders of images,
videos sampled evenly over a time window) plus, for calibration, the frames the device's own cameras kept in
``<state>/calibration/<model>/`` (:mod:`appliance.detector.calibration.device`). Relative paths resolve against the
models root, which for an OTA update is the staged bundle's folder, so a bundle's signed ``calibration/``
folder is read the same way. ``files_digest`` hashes the files and the selection; it is part of the engine
fingerprint, so new calibration frames mean a new engine.

Frames are never synthesized: a source that yields nothing is an error, and so is a set in which two frames
are identical after preprocessing (one tensor repeated says nothing about activation ranges).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from appliance import paths
from appliance.detector.buildprofile import EngineProfile, FrameSource
from appliance.detector.prepost.errors import InputRejected
from appliance.detector.prepost.pipeline import Preprocessor
from appliance.detector.profile import ModelProfile
from appliance.detector.profile import load_profile as load_model_profile
from appliance.durable import sha256_file
from appliance.errors import ApplianceError

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp"})
VIDEO_SUFFIXES = frozenset({".mp4", ".mkv", ".avi", ".mov"})


class CalibrationError(ApplianceError, ValueError):
    """Frames cannot be read (missing file, undecodable, empty set, a repeated frame); the message names them."""


@dataclass(frozen=True)
class Frame:
    """One real frame: where it came from (``file`` or ``file@frame``) and its BGR pixels."""

    name: str
    image: np.ndarray


@dataclass(frozen=True)
class FrameSet:
    """Preprocessed frames (tensors without the batch dim) of one set, and their source frames."""

    frames: list[Frame]
    tensors: list[np.ndarray]
    digest: str

    def batches(self, batch: int, count: int) -> list[np.ndarray]:
        """Up to ``count`` batches of ``batch`` distinct consecutive frames (no frame is used twice)."""
        usable = min(count, len(self.tensors) // batch)
        return [np.stack(self.tensors[i * batch:(i + 1) * batch]) for i in range(usable)]


def _resolve(path: str, models_root: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else models_root / p


def _source_files(source: FrameSource, models_root: Path) -> list[Path]:
    path = _resolve(source.path, models_root)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES | VIDEO_SUFFIXES)
        if not files:
            raise CalibrationError(f"{path}: no images or videos in this folder")
        return files
    if not path.is_file():
        raise CalibrationError(f"{path}: frame source not found")
    if path.suffix.lower() not in IMAGE_SUFFIXES | VIDEO_SUFFIXES:
        raise CalibrationError(f"{path}: not an image or video ({', '.join(sorted(IMAGE_SUFFIXES | VIDEO_SUFFIXES))})")
    return [path]


def device_frames_dir(state_dir: Path, model: str) -> Path:
    """Where the device's cameras keep calibration frames for ``model``."""
    return Path(state_dir) / "calibration" / model


def _sources(profile: EngineProfile, which: str, state_dir: Path | None) -> list[FrameSource]:
    if which == "gate":
        return list(profile.gate.sources)
    sources = list(profile.calibration.sources)
    if profile.calibration.device_frames and state_dir is not None:
        folder = device_frames_dir(state_dir, profile.model)
        if folder.is_dir() and any(p.suffix.lower() in IMAGE_SUFFIXES for p in folder.iterdir()):
            sources.append(FrameSource(path=str(folder.absolute())))
    return sources


def files_digest(profile: EngineProfile, which: str, models_root: Path, state_dir: Path | None = None) -> str:
    """SHA-256 over every file of the set (content, not path) and the selection settings: cheap enough for a
    cache-hit start (no decoding). ``which`` is 'calibration' or 'gate'."""
    entries = []
    for source in _sources(profile, which, state_dir):
        for path in _source_files(source, Path(models_root)):
            entries.append([sha256_file(path), source.frames, source.start_s, source.end_s])
    if not entries:
        raise CalibrationError(f"profile {which}.sources names no frames for {profile.model}")
    canonical = json.dumps(sorted(entries), separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _read_image(path: Path) -> np.ndarray:
    import cv2

    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise CalibrationError(f"{path}: not a decodable image")
    return image


def _read_video(path: Path, source: FrameSource) -> list[Frame]:
    """``source.frames`` frames spread evenly over [start_s, end_s) of the video."""
    import cv2

    cap = cv2.VideoCapture(str(path))
    try:
        if not cap.isOpened():
            raise CalibrationError(f"{path}: not a readable video")
        fps = cap.get(cv2.CAP_PROP_FPS) or 0.0
        total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        if fps <= 0 or total <= 0:
            raise CalibrationError(f"{path}: video reports no frame rate or frame count")
        first = int(source.start_s * fps)
        last = min(total, int(source.end_s * fps)) if source.end_s is not None else total
        if last <= first:
            raise CalibrationError(f"{path}: no frames between {source.start_s}s and {source.end_s}s")
        wanted = sorted({int(i) for i in np.linspace(first, last - 1, num=min(source.frames, last - first))})
        frames = []
        for index in wanted:
            cap.set(cv2.CAP_PROP_POS_FRAMES, index)
            ok, image = cap.read()
            if not ok or image is None:
                raise CalibrationError(f"{path}: frame {index} cannot be decoded")
            frames.append(Frame(f"{path.name}@{index}", image))
        return frames
    finally:
        cap.release()


def read_frames(profile: EngineProfile, which: str, models_root: Path, state_dir: Path | None = None) -> list[Frame]:
    """Every frame the set names, images whole and videos sampled; at most ``calibration.max_frames`` for
    calibration, taken evenly across the sources so no one source dominates."""
    frames: list[Frame] = []
    for source in _sources(profile, which, state_dir):
        for path in _source_files(source, Path(models_root)):
            if path.suffix.lower() in VIDEO_SUFFIXES:
                frames.extend(_read_video(path, source))
            else:
                frames.append(Frame(path.name, _read_image(path)))
    if not frames:
        raise CalibrationError(f"profile {which}.sources names no frames for {profile.model}")
    limit = profile.calibration.max_frames if which == "calibration" else len(frames)
    if len(frames) > limit:
        picks = np.linspace(0, len(frames) - 1, num=limit).round().astype(int)
        frames = [frames[i] for i in picks]
    return frames


def model_profile_for(profile: EngineProfile) -> ModelProfile:
    """The pre/post-processing profile the detector runs with: ``calibration.model_profile`` (relative to the
    engine profile's folder) or the shipped ``repository/profiles/<model>.yaml``."""
    name = profile.calibration.model_profile
    if name is None:
        path = paths.profiles_dir() / f"{profile.model}.yaml"
    else:
        path = Path(name)
        if not path.is_absolute() and profile.directory is not None:
            path = profile.directory / path
    try:
        return load_model_profile(path)
    except Exception as exc:  # load_profile raises its own ValueError subclasses and OSError
        raise CalibrationError(f"model profile {path}: {exc}") from exc


def frame_set(
    profile: EngineProfile,
    which: str,
    models_root: Path,
    model_profile: ModelProfile,
    state_dir: Path | None = None,
) -> FrameSet:
    """Read and preprocess a set exactly as inference does (letterbox, channel order, scale, layout)."""
    frames = read_frames(profile, which, models_root, state_dir)
    pre = Preprocessor(model_profile)
    tensors: list[np.ndarray] = []
    seen: dict[bytes, str] = {}
    for frame in frames:
        try:
            tensor, _ = pre.frame(frame.image, "BGR")
        except InputRejected as exc:
            raise CalibrationError(f"{which} frame {frame.name}: {exc}") from exc
        key = hashlib.sha256(tensor.tobytes()).digest()
        if key in seen:
            raise CalibrationError(f"{which} frames {seen[key]} and {frame.name} are identical after preprocessing")
        seen[key] = frame.name
        tensors.append(np.ascontiguousarray(tensor))
    digest = files_digest(profile, which, models_root, state_dir)
    return FrameSet(frames, tensors, digest)


def check_held_out(calibration: FrameSet, gate: FrameSet) -> None:
    """The gate's frames must not be calibration frames: a gate on the frames the ranges were fitted to would
    flatter the engine."""
    fitted = {hashlib.sha256(t.tobytes()).digest(): f.name for t, f in zip(calibration.tensors, calibration.frames)}
    shared = [f.name for t, f in zip(gate.tensors, gate.frames) if hashlib.sha256(t.tobytes()).digest() in fitted]
    if shared:
        raise CalibrationError(f"gate frames are also calibration frames: {', '.join(shared[:5])}; the gate needs "
                               "held-out frames")
