"""Native code's output on file descriptor 2, filtered line by line: camera passwords out of a capture process's.

FFmpeg and OpenCV (and any other library a source loads) write to file descriptor 2 directly, past Python's
logging; a camera URL with its password can be in those lines (``OPENCV_VIDEOIO_DEBUG=1`` prints every URL it
opens). :class:`StderrFilter` puts a pipe on descriptor 2 and copies each line to the real stderr (the journal
under systemd) through a transform that may rewrite or drop it; :class:`StderrRedactor` redacts credentials
(:func:`appliance.config.redact.redact_credentials`).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
from collections.abc import Callable

from appliance.config.redact import redact_credentials

LineFilter = Callable[[str], "str | None"]  # a line in; the line to write, or None to drop it


class StderrFilter:
    """Passes every line written to descriptor 2 of this process from now on through ``transform``; ``close()``
    before exiting."""

    def __init__(self, transform: LineFilter) -> None:
        read_fd, write_fd = os.pipe()
        self._real = os.dup(2)
        sys.stderr.flush()
        os.dup2(write_fd, 2)  # inheritable, like any stderr: child processes write through the filter too
        os.close(write_fd)
        # A crash's traceback must not depend on the copier thread, which a native crash stops with the rest.
        self._real_file = os.fdopen(self._real, "w", closefd=False)
        if faulthandler.is_enabled():
            faulthandler.enable(self._real_file)
        self._thread = threading.Thread(target=copy_filtered, args=(read_fd, self._real, transform),
                                        name="stderr-filter", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 1.0) -> None:
        """Put the real stderr back and let the copier finish the lines already written (up to ``timeout_s``)."""
        sys.stderr.flush()
        os.dup2(self._real, 2)  # the pipe loses its writer (unless a child still holds it), so the copier ends
        if faulthandler.is_enabled():
            faulthandler.enable(sys.stderr)
        self._thread.join(timeout_s)


class StderrRedactor(StderrFilter):
    """Redacts every line written to descriptor 2 of this process from now on; ``close()`` before exiting."""

    def __init__(self) -> None:
        super().__init__(redact_credentials)


def copy_redacted(read_fd: int, sink_fd: int) -> None:
    """:func:`copy_filtered` with credentials redacted."""
    copy_filtered(read_fd, sink_fd, redact_credentials)


def copy_filtered(read_fd: int, sink_fd: int, transform: LineFilter) -> None:
    """Copy lines from ``read_fd`` to ``sink_fd`` through ``transform``, until the pipe's writers are gone.

    It never logs (its log lines would come back through the pipe) and keeps reading when the sink fails, so a
    writer never blocks on a full pipe."""
    sink_ok = True
    with os.fdopen(read_fd, "rb") as source:
        for line in source:
            if not sink_ok:
                continue
            kept = transform(line.decode("utf-8", "replace"))
            if kept is None:
                continue
            data = kept.encode("utf-8")
            try:
                while data:
                    data = data[os.write(sink_fd, data):]
            except OSError:
                sink_ok = False
