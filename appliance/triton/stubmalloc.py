"""glibc's malloc settings for the processes the embedded server starts: its Python-backend stubs.

A stub receives each input tensor as a new numpy array copied out of shared memory (pybind11 copies when it
makes an array without a base): about 1 MB for a 640x480 frame, every frame. glibc serves a block that large
by mmap, or from the top of its heap, which it gives back to the kernel on free; the next frame then faults
every page in again. That was half of a preprocess stub's CPU on a 2-core host (docs/benchmarks.md, "glibc's
malloc in the stubs"). Blocks under ``MMAP_THRESHOLD`` from a heap that keeps up to ``TRIM_THRESHOLD`` free
at its top are reused instead.

``GLIBC_TUNABLES`` is read when a process starts, so it is put in this process's environment before Triton
starts a stub; the stubs, and any process started after, inherit it. An operator's own ``GLIBC_TUNABLES``
(even empty) is left as it is. Other C libraries ignore the variable.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's own ceiling for its adaptive threshold; a 4K BGR frame is 24.9 MB
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what glibc's adaptive rule pairs with it
TUNABLES = f"glibc.malloc.mmap_threshold={MMAP_THRESHOLD}:glibc.malloc.trim_threshold={TRIM_THRESHOLD}"


def keep_frame_blocks(env: MutableMapping[str, str] = os.environ) -> bool:
    """Set ``GLIBC_TUNABLES`` for processes started from now on; False when the operator has set it."""
    if "GLIBC_TUNABLES" in env:
        return False
    env["GLIBC_TUNABLES"] = TUNABLES
    return True
