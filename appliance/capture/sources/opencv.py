"""Sources decoded by OpenCV: V4L2/USB cameras, RTSP/HTTP streams (FFmpeg backend) and video files."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np

from appliance.capture.sources.base import (
    DecodeError,
    EndOfStream,
    FrameShape,
    FrameSource,
    SourceAbsent,
    SourceConfigError,
    SourceError,
    fit_frame,
)
from appliance.config.redact import redact_credentials

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; the Jetson runs Python 3.10

log = logging.getLogger(__name__)


def decoder_params(decode_threads: int) -> list[int]:
    """OpenCV's open parameters for FFmpeg's decoder thread count; none for 0, which leaves OpenCV's default of
    one per core (each of FFmpeg's frame threads holds a frame back)."""
    return [cv2.CAP_PROP_N_THREADS, decode_threads] if decode_threads > 0 else []


class _OpenCvSource(FrameSource):
    def __init__(self, width: int, height: int, pixel_format: str, resize: bool) -> None:
        super().__init__(width, height, pixel_format, resize)
        self._cap: cv2.VideoCapture | None = None

    def _opened(self) -> cv2.VideoCapture:
        if self._cap is None:
            raise RuntimeError(f"{self.describe()} was read before open() or after close()")
        return self._cap

    def _read(self, out: np.ndarray) -> bool:
        """One read straight into the ring slot when the size matches (no extra copy); False on failure."""
        ok, frame = self._opened().read(out)
        if not ok or frame is None:
            return False
        if frame is not out and not (frame.shape == out.shape and np.shares_memory(frame, out)):
            fit_frame(frame, out, "bgr", self.resize, self.describe())
        if self.pixel_format == "rgb":
            cv2.cvtColor(out, cv2.COLOR_BGR2RGB, dst=out)
        return True

    def native_size(self) -> tuple[int, int] | None:
        cap = self._opened()
        width, height = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        return (width, height) if width > 0 and height > 0 else None

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None


class RtspCapture(_OpenCvSource):
    """An RTSP/HTTP stream through FFmpeg, with open and read timeouts so a dead server cannot hang us."""

    def __init__(self, url: str, transport: str, open_timeout_s: float, read_timeout_s: float,
                 decode_threads: int = 1, **kw: Unpack[FrameShape]) -> None:
        super().__init__(**kw)
        self.url, self.transport, self.decode_threads = url, transport, decode_threads
        self.open_timeout_s, self.read_timeout_s = open_timeout_s, read_timeout_s

    def describe(self) -> str:
        return f"stream {redact_credentials(self.url)}"

    def open(self) -> None:
        # One camera per process, so this process-wide FFmpeg option is ours alone.
        if self.url.lower().startswith("rtsp"):
            os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = f"rtsp_transport;{self.transport}"
        params = [
            cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, int(self.open_timeout_s * 1000),
            cv2.CAP_PROP_READ_TIMEOUT_MSEC, int(self.read_timeout_s * 1000),
            *decoder_params(self.decode_threads),
        ]  # fmt: skip
        cap = cv2.VideoCapture(self.url, cv2.CAP_FFMPEG, params)
        if not cap.isOpened():
            cap.release()
            raise SourceError(f"could not open {self.describe()} over {self.transport}: unreachable, refused or not "
                              "a video stream")
        self._cap = cap

    def read_into(self, out: np.ndarray) -> None:
        if not self._read(out):
            raise EndOfStream(f"{self.describe()} ended or sent nothing for {self.read_timeout_s:g}s")


class FileCapture(_OpenCvSource):
    """A video file; loops by seeking back to the start. A read that fails before the declared frame count
    is a decode error (truncated or corrupt file)."""

    paced = True

    def __init__(self, path: Path, loop: bool, realtime: bool, decode_threads: int = 1,
                 **kw: Unpack[FrameShape]) -> None:
        super().__init__(**kw)
        self.path, self.loop, self.decode_threads = Path(path), loop, decode_threads
        self.paced = realtime
        self._declared = 0
        self._pos = 0
        self._fps: float | None = None
        self._cut_short = False

    def describe(self) -> str:
        return f"file {self.path}"

    @property
    def native_fps(self) -> float | None:
        return self._fps

    def open(self) -> None:
        if not self.path.is_file():
            raise SourceAbsent(f"{self.describe()} does not exist or is not a file")
        cap = cv2.VideoCapture(str(self.path), cv2.CAP_FFMPEG, decoder_params(self.decode_threads))
        if not cap.isOpened():
            cap.release()
            raise SourceError(f"could not open {self.describe()}: corrupt, truncated before its index, or not a video")
        self._cap = cap
        self._declared = max(0, int(cap.get(cv2.CAP_PROP_FRAME_COUNT)))
        fps = cap.get(cv2.CAP_PROP_FPS)
        self._fps = fps if 0 < fps < 1000 else None
        self._pos = 0

    def _rewind(self) -> None:
        if self._pos == 0:
            raise SourceError(f"{self.describe()} yielded no frames: corrupt or not a video")
        if not self.loop:
            raise EndOfStream(f"{self.describe()} ended after {self._pos} frames (loop: false)")
        self._opened().set(cv2.CAP_PROP_POS_FRAMES, 0)
        self._pos = 0

    def read_into(self, out: np.ndarray) -> None:
        if self._cut_short:
            self._cut_short = False
            self._rewind()
        if self._read(out):
            self._pos += 1
            return
        if self._declared and self._pos and self._pos < self._declared - 1:
            self._cut_short = True
            raise DecodeError(f"{self.describe()}: read failed at frame {self._pos} of {self._declared}: truncated "
                              "or corrupt")
        self._rewind()
        if not self._read(out):
            raise SourceError(f"{self.describe()}: no frame after seeking back to the start")
        self._pos += 1


class V4l2Capture(_OpenCvSource):
    """A V4L2 device. The driver may silently pick another mode than asked: the mode is verified after
    setting, and a mismatch is a config error naming what the camera offered instead."""

    def __init__(self, device: str, fourcc: str | None, fps: float | None, **kw: Unpack[FrameShape]) -> None:
        super().__init__(**kw)
        self.device, self.fourcc, self.fps = device, fourcc, fps

    def describe(self) -> str:
        return f"V4L2 device {self.device}"

    def open(self) -> None:
        if not os.path.exists(self.device):
            raise SourceAbsent(f"{self.describe()} does not exist (unplugged, or another /dev/video number?)")
        cap = cv2.VideoCapture(self.device, cv2.CAP_V4L2)
        if not cap.isOpened():
            cap.release()
            raise SourceError(f"could not open {self.describe()}: busy, no permission (video group?) or not a "
                              "capture device")
        if self.fourcc:
            cap.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter.fourcc(*self.fourcc))
        if self.width and self.height:  # 0x0: take the mode the driver negotiates (a size probe)
            cap.set(cv2.CAP_PROP_FRAME_WIDTH, self.width)
            cap.set(cv2.CAP_PROP_FRAME_HEIGHT, self.height)
        if self.fps:
            cap.set(cv2.CAP_PROP_FPS, self.fps)
        got_w, got_h = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        code = int(cap.get(cv2.CAP_PROP_FOURCC))
        got_fourcc = "".join(chr((code >> 8 * i) & 0xFF) for i in range(4))
        problems = []
        if (got_w, got_h) != (self.width, self.height) and not self.resize:
            problems.append(f"{self.width}x{self.height} (it chose {got_w}x{got_h})")
        if self.fourcc and got_fourcc != self.fourcc:
            problems.append(f"format {self.fourcc} (it chose {got_fourcc!r})")
        if problems:
            cap.release()
            raise SourceConfigError(
                f"{self.describe()} does not support {' and '.join(problems)}; "
                f"list its modes with `v4l2-ctl -d {self.device} --list-formats-ext`"
            )
        self._cap = cap

    def read_into(self, out: np.ndarray) -> None:
        if not self._read(out):
            raise SourceError(f"{self.describe()} stopped delivering frames (unplugged or reset?)")

