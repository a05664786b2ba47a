"""Triton's CUDA messages on a host without a usable CUDA driver (a CPU host: CI, a developer's machine), left
out of the log: Triton's GPU build prints them at every start and model load (``CudaDriverHelper has not been
initialized``, ``unable to create stream for detect: CUDA driver version is insufficient ...``), though the
detector runs on the CPU there. The first one is replaced by one INFO line that says so."""

from __future__ import annotations

import logging
import re
import threading

log = logging.getLogger(__name__)

# Only a host without a usable CUDA driver prints these; the INFO line names the first one, so a GPU host whose
# driver broke still says why.
NO_CUDA = re.compile(r"CUDA driver version is insufficient|CudaDriverHelper has not been initialized|"
                     r"no CUDA-capable device is detected|CUDA driver is a stub library")
NOTE = "Triton's CUDA messages are left out of this log"


class CudaNoise:
    """A line filter (appliance.capture.stderrfilter.StderrFilter) that drops Triton's no-CUDA messages."""

    def __init__(self) -> None:
        self.dropped = 0

    def __call__(self, line: str) -> str | None:
        if NO_CUDA.search(line) is None or NOTE in line:  # the note quotes the first: it comes back through here
            return line
        self.dropped += 1
        if self.dropped == 1:  # logged from another thread: the filter's own thread must not write into its pipe
            threading.Thread(target=log.info, name="cuda-note", daemon=True, args=(
                "Triton: no usable CUDA driver on this host, so the detector runs on the CPU; %s (the first: %s)",
                NOTE, line.strip()[:200])).start()
        return None
