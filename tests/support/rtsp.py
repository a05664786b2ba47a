"""A small H.264 MP4 for the camera tests, written by ffmpeg; appliance.harness.rtsp.RtspServer serves it as an
RTSP camera:

    video = make_test_video(tmp_path / "cam.mp4")
    with RtspServer(video) as server:          # rtsp://127.0.0.1:<port>/cam
        ...
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def make_test_video(
    path: Path, *, width: int = 320, height: int = 240, fps: int = 15, seconds: float = 4.0, pattern: str = "testsrc"
) -> Path:
    """Write an H.264 MP4 (keyframe every second, so a reconnecting client resumes quickly)."""
    subprocess.run(
        [
            "ffmpeg", "-nostdin", "-loglevel", "error", "-y",
            "-f", "lavfi", "-i", f"{pattern}=size={width}x{height}:rate={fps}",
            "-t", str(seconds), "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
            "-g", str(fps), "-movflags", "+faststart", str(path),
        ],
        check=True,
        timeout=120,
    )  # fmt: skip
    return path
