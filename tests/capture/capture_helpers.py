"""Code the capture tests run in child processes (spawned, so it must live in an importable module)."""

from __future__ import annotations

import os
import signal
import struct
import time
import zlib

import numpy as np

from appliance.capture.layout import RingGeometry
from appliance.capture.ring import RingWriter
from appliance.capture.ringfile import create_ring

HEADER = struct.Struct("<QI")  # frame seq, crc32 of everything after the first row


def stamp(array: np.ndarray, seq: int) -> None:
    """Fill a frame with pseudo-random pixels and write seq + checksum into its first row."""
    body = array[1:]
    body[...] = np.random.default_rng(seq).integers(0, 256, body.shape, dtype=np.uint8)
    array[0, :, :] = 0
    array[0].reshape(-1)[: HEADER.size] = np.frombuffer(HEADER.pack(seq, zlib.crc32(body.tobytes())), np.uint8)


def verify(array: np.ndarray) -> int:
    """Return the seq stamped in the frame; raise AssertionError if the frame is torn."""
    seq, crc = HEADER.unpack(array[0].reshape(-1)[: HEADER.size].tobytes())
    actual = zlib.crc32(array[1:].tobytes())
    assert actual == crc, f"torn frame: seq {seq} checksum {actual:#x} != stamped {crc:#x}"
    return seq


def write_stamped_frames(path: str, count: int) -> None:
    """A fast writer: publish ``count`` stamped frames as quickly as possible, then release the writer role."""
    writer = RingWriter(path)
    written = 0
    while written < count:
        claim = writer.claim()
        if claim is None:
            time.sleep(0.001)
            continue
        stamp(claim.array, int(writer._header["latest_seq"]) + 1)
        writer.publish(claim, time.monotonic(), time.time())
        written += 1
    writer.close()


def die_while_writing(path: str) -> None:
    """Claim a slot, scribble half a frame into it, then get SIGKILLed: a writer crashing mid-frame."""
    writer = RingWriter(path)
    claim = writer.claim()
    claim.array[: claim.array.shape[0] // 2] = 255
    os.kill(os.getpid(), signal.SIGKILL)


def own_ring(path: str, width: int, height: int, slots: int, ready_file: str) -> None:
    """Create and own a ring, say so by creating ``ready_file``, then wait to be killed (a crashed supervisor)."""
    create_ring(path, RingGeometry(width, height, slots), "leftover")
    open(ready_file, "w").close()
    time.sleep(120)
