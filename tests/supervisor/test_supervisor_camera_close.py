"""Closing a camera at stop while Triton still holds one of its frames (a request the drain gave up on, on a server
that could not finish stopping): the ring stays mapped and the operator reads why; the stop goes on. Before, the
RingError ended `appliance run` with a traceback and exit 1 (seen in the arm64 check, where a request takes ~20 s)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from appliance.capture.errors import RingError
from appliance.capture.layout import RingGeometry
from appliance.capture.ring import RingReader, RingWriter
from appliance.capture.ringfile import create_ring, ring_path
from appliance.supervisor.cameras import SupervisedCamera


class _Capture:
    """The capture side, already stopped: only its close() is called."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_lease_still_held_at_close_is_logged_and_the_stop_goes_on(shm_root: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    path = ring_path(shm_root, "cam0")
    owner = create_ring(path, RingGeometry(width=64, height=48, slots=4), "cam0")
    writer, reader = RingWriter(path), RingReader(path)
    claim = writer.claim()
    assert claim is not None
    claim.array[...] = 7
    writer.publish(claim, time.monotonic(), time.time())
    lease = reader.acquire_latest()
    assert lease is not None and int(lease.array[0, 0, 0]) == 7
    capture = _Capture()
    camera = SupervisedCamera("cam0", capture, reader)  # type: ignore[arg-type]  # only close() is used
    with caplog.at_level(logging.WARNING, logger="appliance.supervisor.cameras"):
        camera.close()
    assert capture.closed, "the capture's ring is still closed"
    assert "camera cam0: reader of" in caplog.text and "still holds 1 lease(s)" in caplog.text
    assert int(lease.array[0, 0, 0]) == 7, "the leased frame stays readable (mapped) after the close"
    lease.release()
    reader.close()  # with no lease left, the close unmaps
    writer.close()
    owner.close()


def test_a_camera_without_held_frames_closes_its_reader(shm_root: Path) -> None:
    path = ring_path(shm_root, "cam1")
    owner = create_ring(path, RingGeometry(width=64, height=48, slots=4), "cam1")
    reader = RingReader(path)
    capture = _Capture()
    SupervisedCamera("cam1", capture, reader).close()  # type: ignore[arg-type]
    assert capture.closed
    with pytest.raises(RingError):
        reader.acquire_latest()  # unmapped
    owner.close()
