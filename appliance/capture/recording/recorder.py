"""The segment recorder: a thread in the capture process that muxes the packets the source already demuxed
into short MP4 segments, without decoding or re-encoding them.

The source hands each packet over with :meth:`SegmentRecorder.offer`, which never blocks: when the queue is
full (a slow disk) packets are dropped up to the next keyframe and counted, so decoding for inference never
waits on recording. Any error of the recorder stops recording with a reason (status file, log) and never
reaches the camera; it tries again at a later keyframe.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

from appliance.capture.recordconfig import RecordConfig
from appliance.capture.recording.segments import (
    GB,
    KeptSegments,
    RecorderStatus,
    Segment,
    free_bytes,
    remove_partial,
    segment_name,
    write_status,
)

log = logging.getLogger(__name__)

QUEUE_PACKETS = 600  # ~20 s at 30 fps: a disk stall this long drops packets, never blocks decoding
RETRY_AFTER_ERROR_S = 30.0


@dataclass
class _Open:
    container: Any  # av.container.OutputContainer
    stream: Any     # its video stream
    template: Any   # the input stream it was made from
    part: Path
    last_src: int   # the source's dts of the last packet: one at or before it means the stream started over
    time_base: Fraction
    start: float    # wall time at timestamp 0
    end: float
    last_dts: int   # the last dts written


class SegmentRecorder:
    def __init__(self, folder: Path, config: RecordConfig, camera_id: str,
                 wall: Callable[[], float] = time.time) -> None:
        self.folder, self.config, self.camera_id = folder, config, camera_id
        self._wall = wall
        self._queue: queue.Queue[tuple[str, Any, float]] = queue.Queue()
        self._gap = False
        self.dropped = 0
        self._seg: _Open | None = None
        self._status: RecorderStatus | None = None
        self._kept: KeptSegments | None = None  # read when the thread starts
        self._retry_at = 0.0
        self._thread = threading.Thread(target=self._run, name=f"recorder-{camera_id}", daemon=True)

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        remove_partial(self.folder)
        self._kept = KeptSegments(self.folder)
        self._thread.start()

    # -- the source's side: never blocks -------------------------------------------------------------

    def offer(self, packet: Any, wall: float) -> None:
        """Keep ``packet`` (already decoded by the caller, which must not touch it again) demuxed at ``wall``."""
        if self._gap and not packet.is_keyframe:
            self.dropped += 1
            return
        if self._queue.qsize() >= QUEUE_PACKETS:
            self._gap = True
            self.dropped += 1
            return
        self._queue.put(("gap" if self._gap else "packet", packet, wall))
        self._gap = False

    def release(self, container: Any) -> None:
        """The source is done with ``container``: closed here once its packets are written."""
        self._queue.put(("release", container, 0.0))

    def fail(self, reason: str) -> None:
        """What feeds the recorder failed (an encoder): the open segment is closed and the status says why."""
        self._queue.put(("fail", reason, 0.0))

    def stop(self, timeout_s: float = 5.0) -> None:
        self._queue.put(("stop", None, 0.0))
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # -- the recorder thread -------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            kind, item, wall = self._queue.get()
            try:
                if kind == "stop":
                    self._close_segment()
                    return
                if kind == "fail":
                    self._close_segment()
                    self._set_status(False, item)
                    continue
                if kind == "release":
                    self._close_segment()
                    item.close()
                    continue
                if self._wall() >= self._retry_at:
                    self._write(item, wall, gap=kind == "gap")
            except Exception as exc:  # noqa: BLE001 - a failing recorder must never stop the camera
                self._retry_at = self._wall() + RETRY_AFTER_ERROR_S
                self._set_status(False, f"recorder error: {exc}; trying again in {RETRY_AFTER_ERROR_S:g}s")
                self._abandon_segment()

    def _set_status(self, recording: bool, reason: str) -> None:
        assert self._kept is not None
        old = self._status
        changed = old is None or (old.recording, old.reason) != (recording, reason)
        since = self._wall() if changed or old is None else old.since
        self._status = RecorderStatus(recording, reason, since, self._kept.last_end, self._kept.total)
        if changed and recording:
            log.info("camera %r: recording to %s", self.camera_id, self.folder)
        elif changed:
            log.warning("camera %r: not recording: %s", self.camera_id, reason)
        write_status(self.folder, self._status)

    def _write(self, packet: Any, wall: float, gap: bool) -> None:
        if packet.dts is None or packet.pts is None:  # a flush packet
            return
        seg = self._seg
        if seg is not None and (gap or packet.stream is not seg.template
                                or packet.dts <= seg.last_src):
            self._close_segment()  # a dropped stretch, a new connection or a file that started over
        elif seg is not None and packet.is_keyframe and wall - seg.start >= self.config.segment_s:
            self._close_segment()
        if self._seg is None:
            if not packet.is_keyframe or not self._space_ok():
                return
            self._seg = self._open_segment(packet, wall)
        seg = self._seg
        # Timestamps from the wall clock (the source's own, rebased, for a live camera; a file played slower or
        # faster than its rate is recorded as it was shown), keeping the source's reorder delay (B-frames).
        seg.last_src = packet.dts
        pts = round((wall - seg.start) / seg.time_base)
        dts = max(pts - (packet.pts - packet.dts), seg.last_dts + 1)
        pts = max(pts, dts)
        packet.pts, packet.dts = pts, dts
        seg.last_dts = dts
        seg.end = max(seg.end, seg.start + float((pts + (packet.duration or 0)) * seg.time_base))
        packet.stream = seg.stream
        seg.container.mux(packet)  # rescales the packet's timestamps to the stream's time base, in place

    def _space_ok(self) -> bool:
        free, floor = free_bytes(self.folder), self.config.min_free_gb * GB
        if free < floor:
            self._set_status(False, f"free space on {self.folder} is {free / GB:.2f} GB, below record.min_free_gb "
                             f"({self.config.min_free_gb:g} GB); recording paused, detections go on")
            return False
        return True

    def _open_segment(self, packet: Any, wall: float) -> _Open:
        import av

        time_base = packet.time_base
        start = wall - float(max(0, packet.pts - packet.dts) * time_base)  # its dts is 0
        part = self.folder / f".{round(start * 1000)}.part.mp4"
        container = av.open(str(part), "w", format="mp4")
        stream = container.add_stream_from_template(packet.stream)
        self._set_status(True, "")
        return _Open(container, stream, packet.stream, part, -1 << 62, time_base, start, start, -1)

    def _close_segment(self) -> None:
        seg, self._seg = self._seg, None
        if seg is None:
            return
        seg.container.close()
        path = self.folder / segment_name(seg.start, seg.end)
        seg.part.replace(path)
        assert self._kept is not None
        self._kept.add(Segment(path, round(seg.start * 1000) / 1000, round(seg.end * 1000) / 1000,
                               path.stat().st_size))
        self._kept.trim(self.config.retain)
        self._set_status(True, "")

    def _abandon_segment(self) -> None:
        seg, self._seg = self._seg, None
        if seg is None:
            return
        try:
            seg.container.close()
        except Exception:  # noqa: BLE001 - already failing; the part file goes either way
            pass
        seg.part.unlink(missing_ok=True)
