"""Real RTSP clients for the restream's tests: ffprobe for what a stream is, ffmpeg for its decoded frames."""

from __future__ import annotations

import json
import subprocess

import numpy as np


def probe(url: str, seconds: float = 4.0, timeout: float = 60.0) -> tuple[dict, list[float]]:
    """(the video stream's ffprobe fields, its packets' timestamps over ``seconds``); raises with ffprobe's
    error text when it cannot read the stream (a refused login among them)."""
    result = subprocess.run(
        ["ffprobe", "-v", "error", "-rtsp_transport", "tcp", "-select_streams", "v:0", "-show_streams",
         "-show_entries", "packet=pts_time", "-read_intervals", f"%+{seconds}", "-of", "json", url],
        capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"ffprobe {url}: {result.stderr.strip()[-400:]}")
    data = json.loads(result.stdout)
    times = sorted(float(p["pts_time"]) for p in data.get("packets", []) if "pts_time" in p)
    return data["streams"][0], times


def rate(times: list[float]) -> float:
    """Frames per second from packet timestamps (a keyframe's parameter sets come as a packet of its own, with
    the frame's timestamp: counted once)."""
    frames = sorted(set(times))
    return (len(frames) - 1) / (frames[-1] - frames[0])


def start_grab(url: str, frames: int) -> subprocess.Popen[bytes]:
    """ffmpeg decoding ``frames`` frames of ``url`` to BGR on its stdout; read them with :func:`frames_of`."""
    return subprocess.Popen(["ffmpeg", "-v", "error", "-rtsp_transport", "tcp", "-i", url, "-frames:v", str(frames),
                             "-f", "rawvideo", "-pix_fmt", "bgr24", "-"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def frames_of(grab: subprocess.Popen[bytes], width: int, height: int, timeout: float = 60.0) -> np.ndarray:
    """[N, height, width, 3] of what :func:`start_grab` decoded; raises when ffmpeg failed."""
    out, err = grab.communicate(timeout=timeout)
    if grab.returncode != 0:
        raise RuntimeError(f"ffmpeg: {err.decode(errors='replace').strip()[-400:]}")
    return np.frombuffer(out, np.uint8).reshape(-1, height, width, 3)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)
