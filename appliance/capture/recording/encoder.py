"""The frame encoder: records a raw camera (V4L2, CSI, a GStreamer raw pipeline, images) by encoding the
frames the capture already decoded into H.264, handed to the same segment recorder the compressed sources use
(so segments, clips, retention and the low-space pause are the same).

:meth:`FrameEncoder.offer` never blocks the capture loop: it copies the frame into a bounded queue and, when
the encoder thread cannot keep up, drops the frame and counts it. A keyframe is forced every
:data:`KEYFRAME_EVERY_S` of wall time, so a clip's pre-capture starts near the wanted time whatever the rate.
An encoder error stops recording with a reason (the recorder's status file, a log line) and is retried after
:data:`RETRY_AFTER_ERROR_S`; frames into the ring never wait for it.

Encoders (chosen by capture/h264encoders.py): PyAV's ``libx264``/``libopenh264`` in this thread, or a
GStreamer element (``nvv4l2h264enc`` on a Jetson) in a ``gst-launch-1.0`` child fed through a pipe.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable, Protocol

import numpy as np

from appliance.capture.h264encoders import H264Encoder
from appliance.capture.recording.h264stream import KEYFRAME_EVERY_S, TIME_BASE, stream_template
from appliance.capture.recording.recorder import RETRY_AFTER_ERROR_S, SegmentRecorder

log = logging.getLogger(__name__)

QUEUE_FRAMES = 30  # frames waiting for the encoder; beyond this they are dropped and counted


class _Backend(Protocol):
    def encode(self, frame: np.ndarray, wall: float, key: bool) -> list[tuple[Any, float]]: ...
    def close(self) -> None: ...


class AvH264:
    """PyAV (FFmpeg) software encoder: ``libx264`` (ultrafast, zerolatency) or ``libopenh264``."""

    def __init__(self, codec: str, width: int, height: int, pixel_format: str) -> None:
        import av

        cc: Any = av.CodecContext.create(codec, "w")  # a VideoCodecContext
        cc.width, cc.height, cc.pix_fmt = width, height, "yuv420p"
        cc.time_base = TIME_BASE
        cc.gop_size = 600  # keyframes are forced by wall time; this only bounds a stuck clock
        cc.max_b_frames = 0
        if codec == "libx264":
            cc.options = {"preset": "ultrafast", "tune": "zerolatency"}
        cc.open()
        self._cc, self._format = cc, f"{pixel_format}24"
        self._t0: float | None = None
        self._last = -1
        self._walls: dict[int, float] = {}
        self._tpl: tuple[Any, Any] | None = None

    def encode(self, frame: np.ndarray, wall: float, key: bool) -> list[tuple[Any, float]]:
        import av

        if self._t0 is None:
            self._t0 = wall
        pts = max(round((wall - self._t0) / TIME_BASE), self._last + 1)
        self._last = pts
        vf = av.VideoFrame.from_ndarray(frame, format=self._format).reformat(format="yuv420p")
        vf.pts, vf.time_base = pts, TIME_BASE
        if key:
            vf.pict_type = av.video.frame.PictureType.I
        self._walls[pts] = wall
        return [self._stamped(p) for p in self._cc.encode(vf)]

    def _stamped(self, packet: Any) -> tuple[Any, float]:
        if self._tpl is None:
            self._tpl = stream_template(bytes(packet))
        packet.stream = self._tpl[1]
        packet.time_base = TIME_BASE
        return packet, self._walls.pop(packet.pts, time.time())

    def close(self) -> None:
        if self._tpl is not None:
            self._tpl[0].close()


class FrameEncoder:
    """Encodes a raw camera's frames into ``recorder``; ``make_backend(width, height)`` builds the encoder."""

    def __init__(self, recorder: SegmentRecorder, make_backend: Callable[[int, int], _Backend], camera_id: str,
                 describe: str, wall: Callable[[], float] = time.time,
                 fallback: tuple[Callable[[int, int], _Backend], str] | None = None) -> None:
        """``fallback``: (backend, description) taken for good when the first one fails before its first packet
        (a hardware encoder that cannot run on this board)."""
        self.recorder, self._make, self.camera_id, self.describe = recorder, make_backend, camera_id, describe
        self._fallback = fallback
        self._wall = wall
        self._queue: queue.Queue[tuple[np.ndarray, float] | None] = queue.Queue()
        self.dropped = 0  # frames left out of the recording because the encoder was behind
        self.encoded = 0
        self._behind = False
        self._thread = threading.Thread(target=self._run, name=f"encoder-{camera_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def offer(self, frame: np.ndarray, wall: float) -> None:
        """Keep a copy of ``frame``, shown at ``wall``; never blocks (drops and counts when behind)."""
        if self._queue.qsize() >= QUEUE_FRAMES or not self._thread.is_alive():
            if not self._behind:
                log.warning("camera %r: the recording encoder (%s) is behind; frames are left out of the "
                            "recording (the detector still gets them)", self.camera_id, self.describe)
            self._behind = True
            self.dropped += 1
            return
        self._behind = False
        self._queue.put((frame.copy(), wall))

    def stop(self, timeout_s: float = 5.0) -> None:
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        backend: _Backend | None = None
        retry_at, last_key, packets = 0.0, float("-inf"), 0
        while (item := self._queue.get()) is not None:
            frame, wall = item
            if backend is None and self._wall() < retry_at:
                continue
            try:
                if backend is None:
                    backend, packets = self._make(frame.shape[1], frame.shape[0]), 0
                    log.info("camera %r: encoding for recording with %s", self.camera_id, self.describe)
                    last_key = float("-inf")
                key = wall - last_key >= KEYFRAME_EVERY_S
                last_key = wall if key else last_key
                for packet, shown in backend.encode(frame, wall, key):
                    self.recorder.offer(packet, shown)
                    packets += 1
                self.encoded += 1
            except Exception as exc:  # noqa: BLE001 - a failing encoder must never stop the camera
                _close_quietly(backend)
                backend = None
                if self._fallback is not None and packets == 0:
                    log.warning("camera %r: %s failed before its first packet (%s); encoding with %s instead",
                                self.camera_id, self.describe, exc, self._fallback[1])
                    (self._make, self.describe), self._fallback = self._fallback, None
                    continue
                retry_at = self._wall() + RETRY_AFTER_ERROR_S
                self.recorder.fail(f"encoder {self.describe} failed: {exc}; trying again in "
                                   f"{RETRY_AFTER_ERROR_S:g}s")
        _close_quietly(backend)


def _close_quietly(backend: _Backend | None) -> None:
    if backend is not None:
        try:
            backend.close()
        except Exception:  # noqa: BLE001 - closing a failed encoder
            pass


def make_frame_encoder(recorder: SegmentRecorder, choice: H264Encoder, pixel_format: str, fps: float | None,
                       camera_id: str) -> FrameEncoder:
    """The encoder thread for ``choice`` (not started); a GStreamer encoder falls back to the CPU's."""
    def on_cpu(codec: str) -> Callable[[int, int], _Backend]:
        return lambda w, h: AvH264(codec, w, h, pixel_format)

    if choice.kind == "gstreamer":
        from appliance.capture.h264encoders import cpu_encoder
        from appliance.capture.recording.gstencoder import GstH264

        rate, cpu = fps or 10.0, cpu_encoder().name
        return FrameEncoder(recorder, lambda w, h: GstH264(choice.name, w, h, pixel_format, rate), camera_id,
                            f"GStreamer {choice.name}", fallback=(on_cpu(cpu), f"PyAV {cpu}"))
    return FrameEncoder(recorder, on_cpu(choice.name), camera_id, f"PyAV {choice.name}")
