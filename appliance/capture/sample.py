"""The demo camera's footage: a short video made from Debian's darknet test images (apt package ``darknet``).

Each image is letterboxed into the frame and held for a couple of seconds with a slow zoom, so consecutive
frames differ the way a real camera's do (a still frame repeated would hide bugs that only show on motion,
and would let a codec encode everything but the first frame as "no change"). ``scripts/setup.sh`` builds it
into ``.models/sample/sample.mp4``; ``appliance run`` without ``--config`` builds it on first use.

    python -m appliance.capture.sample DEST     # build DEST unless it already holds a readable video
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from appliance.errors import ApplianceError

# A build temp file untouched this long belongs to a build that was killed.
STALE_BUILD_S = 3600.0

SAMPLE_IMAGES = ("dog", "eagle", "giraffe", "horses", "kite", "person")
DARKNET_IMAGES = Path("/usr/share/darknet/data")
ZOOM_END = 0.92  # the last frame of an image shows the centre 92 % of it: a slow push-in


class SampleVideoError(ApplianceError):
    """The sample video cannot be built (images missing or unreadable, no MP4 writer)."""


def _load_images(images_dir: Path) -> list[tuple[Path, np.ndarray]]:
    import cv2

    loaded = []
    for name in SAMPLE_IMAGES:
        path = images_dir / f"{name}.jpg"
        if not path.is_file():
            raise SampleVideoError(f"sample image {path} is missing: Debian's 'darknet' apt package provides "
                                   f"{DARKNET_IMAGES} (scripts/setup.sh installs it)")
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if image is None:
            raise SampleVideoError(f"sample image {path} is not a readable image; reinstall the 'darknet' apt package")
        loaded.append((path, image))
    return loaded


def _frames(image: np.ndarray, width: int, height: int, count: int) -> Iterator[np.ndarray]:
    """``count`` letterboxed frames of ``image`` (aspect kept, black bars, centred), zooming in slowly."""
    import cv2

    src_h, src_w = image.shape[:2]
    fit = min(width / src_w, height / src_h)
    box_w, box_h = max(1, round(src_w * fit)), max(1, round(src_h * fit))
    x0, y0 = (width - box_w) // 2, (height - box_h) // 2
    # One good (area-averaged) downscale to the most-zoomed size; the per-frame zoom is then a small,
    # near-1:1 affine step where bilinear interpolation is accurate.
    big_w, big_h = round(box_w / ZOOM_END), round(box_h / ZOOM_END)
    base = cv2.resize(image, (big_w, big_h), interpolation=cv2.INTER_AREA)
    for i in range(count):
        canvas = np.zeros((height, width, 3), np.uint8)
        zoom = 1.0 - (1.0 - ZOOM_END) * (i / (count - 1) if count > 1 else 0.0)  # visible fraction: 1 -> 0.92
        scale = box_w / (big_w * zoom)
        # Map base's centre onto the box's centre at this scale (the crop stays centred, aspect unchanged).
        tx, ty = box_w / 2 - scale * big_w / 2, box_h / 2 - scale * big_h / 2
        matrix = np.array([[scale, 0.0, tx], [0.0, scale, ty]])
        canvas[y0:y0 + box_h, x0:x0 + box_w] = cv2.warpAffine(
            base, matrix, (box_w, box_h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        yield canvas


def build_sample_video(dest: Path, images_dir: Path = DARKNET_IMAGES, *, width: int = 640, height: int = 480,
                       fps: int = 10, seconds_per_image: float = 2.0) -> Path:
    """Write the sample video to ``dest`` (MPEG-4 Part 2 in MP4) atomically; return ``dest``."""
    import cv2

    dest = Path(dest)
    images = _load_images(Path(images_dir))  # every image checked before anything is written
    per_image = max(1, round(seconds_per_image * fps))
    dest.parent.mkdir(parents=True, exist_ok=True)
    # A temporary file beside dest, renamed over it when complete: a reader (or a second builder racing
    # this one) sees either no file or a whole one. Its suffix stays .mp4 so FFmpeg picks the container.
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.stem}.", suffix=dest.suffix or ".mp4")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter.fourcc(*"mp4v"), fps, (width, height))
        if not writer.isOpened():
            raise SampleVideoError(f"OpenCV cannot open an mp4v video writer for {tmp} (no FFmpeg in this cv2 build, "
                                   f"or {dest.parent} is not writable)")
        try:
            for _path, image in images:
                for frame in _frames(image, width, height, per_image):
                    writer.write(frame)
        finally:
            writer.release()
        if tmp.stat().st_size == 0:
            raise SampleVideoError(f"OpenCV wrote an empty video to {tmp}")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())  # the data is on disk before the rename makes it visible
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; the service user must read an installed copy
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(dest.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # and the rename itself survives a power cut
    finally:
        os.close(dir_fd)
    return dest


def video_info(path: Path) -> tuple[int, float] | None:
    """(frames, fps) if ``path`` is a complete, decodable video, else None (missing, empty, truncated)."""
    import cv2

    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return None
    cap = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG)
    try:
        if not cap.isOpened():
            return None
        frames, fps = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)), float(cap.get(cv2.CAP_PROP_FPS))
        if frames <= 0 or not cap.read()[0]:
            return None
        # The last frame decodes too: a file cut short after its index fails here, not in the demo.
        cap.set(cv2.CAP_PROP_POS_FRAMES, frames - 1)
        if not cap.read()[0]:
            return None
        return frames, fps
    finally:
        cap.release()


def ensure_sample_video(dest: Path, images_dir: Path = DARKNET_IMAGES) -> Path:
    """``dest`` if it already holds a readable video, else build it there (safe against a concurrent builder)."""
    dest = Path(dest)
    if video_info(dest) is not None:
        return dest
    remove_stale_builds(dest)
    return build_sample_video(dest, images_dir)


def remove_stale_builds(dest: Path, older_than_s: float = STALE_BUILD_S) -> list[Path]:
    """Temp files of builds that were killed (SIGKILL, power cut) before their rename; a live build takes
    seconds, so only files untouched for ``older_than_s`` go."""
    removed: list[Path] = []
    if not dest.parent.is_dir():
        return removed
    cutoff = time.time() - older_than_s
    for tmp in dest.parent.glob(f".{dest.stem}.*{dest.suffix or '.mp4'}"):
        try:
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()
                removed.append(tmp)
        except FileNotFoundError:  # another process got there first
            pass
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m appliance.capture.sample", description=__doc__.split("\n")[0])
    parser.add_argument("dest", type=Path, help="where the video goes, e.g. .models/sample/sample.mp4")
    parser.add_argument("--images", type=Path, default=DARKNET_IMAGES, help="folder holding the darknet images")
    args = parser.parse_args(argv)
    try:
        path = ensure_sample_video(args.dest, args.images)
    except (SampleVideoError, OSError) as exc:
        print(f"sample video: {exc}", file=sys.stderr)
        return 1
    info = video_info(path)
    if info is None:
        print(f"sample video: {path} was written but cannot be read back", file=sys.stderr)
        return 1
    frames, fps = info
    print(f"{path}: {frames} frames at {fps:g} fps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
