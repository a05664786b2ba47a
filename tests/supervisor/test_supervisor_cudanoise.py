"""Triton's no-CUDA messages (as its CPU build prints them here) are left out of what reaches the log, the rest
passes whole, and one INFO line says why, quoting the first."""

from __future__ import annotations

import logging
import os

import pytest
from support.wait import wait_until

from appliance.capture.stderrfilter import copy_filtered
from appliance.supervisor.cudanoise import CudaNoise

TRITON = [
    b'W1128 09:25:33.169498 31713 pinned_memory_manager.cc:273] "Unable to allocate pinned system memory, pinned '
    b'memory pool will not be available: CUDA driver version is insufficient for CUDA runtime version"\n',
    b'E1128 09:25:33.169625 31713 server.cc:241] "CudaDriverHelper has not been initialized."\n',
    b'I1128 09:25:33.2 31713 model_lifecycle.cc:839] "successfully loaded \'detect\'"\n',
    b'E1128 09:25:38.070424 31713 ensemble_scheduler.cc:1468] "unable to create stream for detect: CUDA driver '
    b'version is insufficient for CUDA runtime version"\n',
]


def test_no_cuda_lines_are_left_out_with_one_note(caplog: pytest.LogCaptureFixture) -> None:
    source_r, source_w = os.pipe()
    sink_r, sink_w = os.pipe()
    for line in TRITON:
        os.write(source_w, line)
    os.close(source_w)
    noise = CudaNoise()
    with caplog.at_level(logging.INFO, logger="appliance.supervisor.cudanoise"):
        copy_filtered(source_r, sink_w, noise)
        os.close(sink_w)
        with os.fdopen(sink_r, "rb") as sink:
            assert sink.read() == TRITON[2]
        wait_until(lambda: caplog.records, 5, message="the note")
    assert noise.dropped == 3
    (note,) = caplog.records
    assert note.levelno == logging.INFO and "runs on the CPU" in note.getMessage()
    assert "Unable to allocate pinned system memory" in note.getMessage()
    assert noise(note.getMessage() + "\n") is not None  # the note itself passes the filter
