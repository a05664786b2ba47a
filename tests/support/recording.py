"""A recording camera's capture process run for a while, with the frames its ring had (the ground truth of when
each was shown)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import cv2
import numpy as np

from appliance.capture import CaptureProcess
from appliance.capture.config import CameraConfig
from support.shm import private_shm_dir


def ring_frames_while_recording(camera: CameraConfig, folder: Path, seconds: float) -> list[tuple[float, np.ndarray]]:
    """The camera's capture process, recording into ``folder``, for ``seconds`` of ring frames: [(t_utc, frame)]."""
    frames: list[tuple[float, np.ndarray]] = []
    shm = private_shm_dir()
    with CaptureProcess(camera, shm_root=next(shm), record_dir=folder) as proc:
        proc.start()
        with proc.reader() as reader:
            seq, until = 0, time.monotonic() + seconds
            while time.monotonic() < until:
                lease = reader.acquire_latest(after_seq=seq)
                if lease is None:
                    time.sleep(0.005)
                    continue
                with lease:
                    seq = lease.meta.seq
                    frames.append((lease.meta.t_utc, np.array(lease.array)))
        proc.stop()
    next(shm, None)  # removes the directory, failing on a leaked ring
    return frames


def decoded_frames(path: Path) -> list[np.ndarray]:
    """Every frame of a clip, as BGR arrays."""
    import av

    with av.open(str(path)) as container:
        return [f.to_ndarray(format="bgr24") for f in container.decode(container.streams.video[0])]


def ffprobe_keyframes(path: Path) -> dict:
    """ffprobe's start time and duration of a clip, and each frame's key_frame flag (an independent reader)."""
    out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=start_time,duration:frame=key_frame",
                          "-of", "json", str(path)], capture_output=True, text=True, check=True, timeout=60).stdout
    return json.loads(out)


def when_shown(frames: list[tuple[float, np.ndarray]], image: np.ndarray) -> tuple[float, float]:
    """(t_utc, PSNR) of the ring frame that ``image`` is: the camera's own ground truth of when it was shown."""
    return max(((t, cv2.PSNR(image, ref)) for t, ref in frames), key=lambda tp: tp[1])
