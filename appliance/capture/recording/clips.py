"""An event's clip: a view over a camera's kept segments, written out as one MP4 (index at the front) only when
someone asks for it (the page, ``appliance clips export``). Overlapping events share the segments; nothing is
stored twice.

A clip starts at the keyframe at or before its planned start (event time - pre_capture) and ends with the first
frame at or after its planned end (event time + post_capture).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from appliance.capture.recording.segments import Segment, list_segments, read_status
from appliance.errors import ApplianceError


class ClipError(ApplianceError):
    """The footage a clip needs is not there (never recorded, removed by retention, or not yet written)."""


@dataclass(frozen=True)
class ClipFile:
    path: Path
    start: float   # wall time of the clip's first frame (a keyframe at or before the planned start)
    end: float     # wall time just after its last frame
    frames: int


GAP_S = 1.0  # segments at most this far apart count as continuous (a new one opens at the next keyframe)


def covering(folder: Path, start: float, end: float) -> list[Segment]:
    """The segments ``[start, end]`` needs, in order; ClipError when footage is missing at either side or
    within. Segments a few frames apart (a new segment opens at the next keyframe) count as continuous, and a
    ``start`` or ``end`` between two of them takes the neighbour across that gap too."""
    kept = list_segments(folder)
    segments = [s for s in kept if s.end > start and s.start <= end]
    if segments:
        earlier = [s for s in kept if s.end <= start]
        if segments[0].start > start and earlier and segments[0].start - earlier[-1].end <= GAP_S:
            segments.insert(0, earlier[-1])
        later = [s for s in kept if s.start > end]
        if segments[-1].end < end and later and later[0].start - segments[-1].end <= GAP_S:
            segments.append(later[0])
    if not segments or segments[0].start > start:
        raise ClipError(f"no footage of {folder.name} from {start:.3f} (recording off, paused, or removed by "
                        "retention)")
    if segments[-1].end < end:
        raise ClipError(f"footage of {folder.name} up to {end:.3f} is not written yet (it ends at "
                        f"{segments[-1].end:.3f})")
    for before, after in zip(segments, segments[1:]):
        if after.start - before.end > GAP_S:
            raise ClipError(f"footage of {folder.name} has a gap from {before.end:.3f} to {after.start:.3f}")
    return segments


def clip_complete(folder: Path, end: float) -> bool:
    """Whether a closed segment reaches ``end`` (the recorder's status says): the clip can be written."""
    status = read_status(folder)
    return status is not None and status.last_end >= end


def _start_keyframe(segment: Segment, start: float) -> float:
    """The wall time of the last keyframe of ``segment`` at or before ``start`` (its first frame at the latest)."""
    import av

    best = segment.start
    with av.open(str(segment.path)) as container:
        stream = container.streams.video[0]
        tb = _time_base(stream)
        for packet in container.demux(stream):
            if packet.pts is None or not packet.is_keyframe:
                continue
            wall = segment.start + float(packet.pts * tb)
            if wall > start:
                break
            best = wall
    return best


def _time_base(stream: Any) -> Fraction:
    if stream.time_base is None:
        raise ClipError("a segment's stream has no time base: not a segment this recorder wrote")
    return Fraction(stream.time_base)


def write_clip(folder: Path, start: float, end: float, dest: Path) -> ClipFile:
    """Write the clip ``[start, end]`` of the camera whose segments are in ``folder`` to ``dest`` (MP4, moov
    first). Raises ClipError when the footage is not there."""
    segments = covering(folder, start, end)
    clip_start = _start_keyframe(segments[0], start)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".mp4", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        frames, clip_end = _remux(segments, clip_start, end, tmp)
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)
    return ClipFile(dest, clip_start, clip_end, frames)


def _remux(segments: list[Segment], clip_start: float, end: float, path: Path) -> tuple[int, float]:
    import av

    out = av.open(str(path), "w", format="mp4", options={"movflags": "+faststart"})
    ostream: Any = None
    out_tb: Fraction | None = None
    frames, clip_end, last_dts = 0, clip_start, None
    try:
        for segment in segments:
            with av.open(str(segment.path)) as container:
                stream = container.streams.video[0]
                tb = _time_base(stream)
                if ostream is None:
                    ostream, out_tb = out.add_stream_from_template(stream), tb
                assert out_tb is not None
                for packet in container.demux(stream):
                    if packet.pts is None or packet.dts is None:
                        continue
                    wall = segment.start + float(packet.pts * tb)
                    if wall < clip_start - 1e-4:
                        continue
                    if wall > end and clip_end >= end:
                        return frames, clip_end
                    shift = Fraction(segment.start - clip_start).limit_denominator(1_000_000)
                    dts = round((packet.dts * tb + shift) / out_tb)
                    if last_dts is not None and dts <= last_dts:
                        dts = last_dts + 1
                    packet.pts = max(dts, round((packet.pts * tb + shift) / out_tb))
                    packet.dts, last_dts = dts, dts
                    packet.time_base, packet.stream = out_tb, ostream
                    out.mux(packet)
                    frames += 1
                    clip_end = max(clip_end, wall + float((packet.duration or 0) * tb))
        return frames, clip_end
    finally:
        out.close()
