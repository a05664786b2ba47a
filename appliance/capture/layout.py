"""Byte layout of a camera ring file: one header page, then ``slots`` page-aligned frame slots.

All counters are naturally aligned 8-byte words written by the single writer, so a reader in another process sees
each one whole. The layout and the lock bytes: docs/capture.md, "Ring file and sizing"."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

MAGIC = b"APPCAPR1"
VERSION = 1
PAGE = 4096
OWNER_LOCK = 0
WRITER_LOCK = 1
SLOT_LOCK_BASE = 64

PIXEL_FORMATS = {"bgr": 0, "rgb": 1}
PIXEL_FORMAT_NAMES = {v: k for k, v in PIXEL_FORMATS.items()}


class CaptureState(enum.IntEnum):
    """Per-camera state, written by the capture process into the ring header."""

    IDLE = 0  # ring exists, no writer has run yet
    CONNECTING = 1  # opening the source
    STREAMING = 2  # frames are arriving
    STALLED = 3  # no frame for stall_timeout_s; the source is being torn down
    BACKOFF = 4  # waiting before the next connect attempt
    FAILED = 5  # configuration error (wrong size/format): the writer exited and will not fix itself
    STOPPED = 6  # the writer exited cleanly
    WAITING = 7  # the source is not there (no device node, no file yet); retried with backoff until it appears


RING_HEADER = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("slot_count", "<u4"),
        ("width", "<u4"),
        ("height", "<u4"),
        ("channels", "<u4"),
        ("pixel_format", "<u4"),
        ("slot_stride", "<u8"),
        ("header_bytes", "<u8"),
        ("camera_id", "S64"),
        ("owner_pid", "<i8"),
        ("writer_pid", "<i8"),
        ("generation", "<u8"),  # writer starts on this ring
        ("latest_seq", "<u8"),  # 0 = no frame yet
        ("latest_slot", "<i8"),  # -1 = no frame yet
        ("state", "<u8"),
        ("state_since_mono", "<f8"),
        ("frames", "<u8"),
        ("drops", "<u8"),  # frames that no reader ever leased (overwritten, or no free slot)
        ("ring_full", "<u8"),  # frames dropped because every other slot was leased
        ("decode_errors", "<u8"),
        ("reconnects", "<u8"),
        ("stalls", "<u8"),
        ("fps", "<f8"),
        ("last_frame_mono", "<f8"),
        ("last_frame_utc", "<f8"),
        ("last_error", "S512"),
    ],
    align=True,
)

SLOT_META = np.dtype(
    [
        ("lock_seq", "<u8"),  # seqlock word: odd while the writer fills the slot (or if it died doing so)
        ("seq", "<u8"),  # frame sequence number, 0 = empty
        ("t_mono", "<f8"),  # time.monotonic() at capture (CLOCK_MONOTONIC, comparable across processes)
        ("t_utc", "<f8"),  # time.time() at capture
        ("width", "<u4"),
        ("height", "<u4"),
        ("pixel_format", "<u4"),
        ("consumed", "<u4"),  # set by a reader that leased this frame; the writer counts a drop otherwise
    ],
    align=True,
)


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


@dataclass(frozen=True)
class RingGeometry:
    """Everything that fixes the size of a ring file."""

    width: int
    height: int
    slots: int
    pixel_format: str = "bgr"
    channels: int = 3

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0 or self.channels <= 0:
            raise ValueError(f"ring frame size must be positive, got {self.width}x{self.height}x{self.channels}")
        if self.slots < 3:
            raise ValueError(f"a ring needs at least 3 slots (latest + one being written + one leased), "
                             f"got {self.slots}")
        if self.pixel_format not in PIXEL_FORMATS:
            raise ValueError(f"pixel_format must be one of {sorted(PIXEL_FORMATS)}, got {self.pixel_format!r}")

    @property
    def frame_bytes(self) -> int:
        return self.width * self.height * self.channels

    @property
    def slot_stride(self) -> int:
        return _round_up(self.frame_bytes, PAGE)

    @property
    def header_bytes(self) -> int:
        return _round_up(RING_HEADER.itemsize + SLOT_META.itemsize * self.slots, PAGE)

    @property
    def total_bytes(self) -> int:
        return self.header_bytes + self.slots * self.slot_stride

    def describe(self) -> str:
        return f"{self.slots} slots x {self.width}x{self.height}x{self.channels} = {self.total_bytes / 2**20:.1f} MiB"
