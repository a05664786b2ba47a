"""The response allocator: Triton writes every output into a numpy array that we allocate.

Ownership: ``buffers`` holds each array from Triton's alloc callback until its release callback (the response
is deleted); the array itself is owned by whoever holds it after that, normally an ``InferResult``, so an output
stays valid as long as the caller keeps it. The ctypes callback objects live as long as this allocator, whose
owner (the server's ``Runtime``) keeps it until Triton can no longer call it.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
from typing import TYPE_CHECKING

import numpy as np

from appliance.triton import _capi
from appliance.triton.errors import INTERNAL, check, take

if TYPE_CHECKING:
    from appliance.triton._capi import CApi
    from appliance.triton.counters import HandleCounters

log = logging.getLogger(__name__)


class ResponseAllocator:
    """A ``TRITONSERVER_ResponseAllocator`` handing out host memory; ``close()`` deletes it."""

    def __init__(self, api: CApi, counters: HandleCounters) -> None:
        self.api = api
        self.counters = counters
        self._ids = itertools.count(1)
        self.buffers: dict[int, np.ndarray] = {}  # buffer id -> array, while Triton writes or reads it
        self._alloc_cb = _capi.ALLOC_FN(self._alloc)
        self._release_cb = _capi.RELEASE_FN(self._release)
        handle = ctypes.c_void_p()
        check(api, api.TRITONSERVER_ResponseAllocatorNew(ctypes.byref(handle), self._alloc_cb, self._release_cb,
                                                         None))  # fmt: skip
        self.handle: int | None = handle.value

    # -- Triton threads ---------------------------------------------------------------------------------
    # Argument types are what ctypes passes for ALLOC_FN / RELEASE_FN: a c_void_p arrives as an int or None
    # (NULL), an out-parameter as a pointer (typeshed names its class ``ctypes._Pointer``).
    def _alloc(self, _allocator: int | None, _name: bytes | None, byte_size: int, _mtype: int, _mtid: int,
               _userp: int | None, buffer: ctypes._Pointer[ctypes.c_void_p],
               buffer_userp: ctypes._Pointer[ctypes.c_void_p], actual: ctypes._Pointer[ctypes.c_int],
               actual_id: ctypes._Pointer[ctypes.c_int64]) -> int | None:
        try:
            array = np.empty(byte_size, dtype=np.uint8)
            bid = next(self._ids)
            self.buffers[bid] = array
            self.counters.add("buffers_allocated")
            buffer[0] = array.ctypes.data
            buffer_userp[0] = bid
            actual[0] = _capi.MEMORY_CPU  # always host memory, whatever was asked for
            actual_id[0] = 0
            return None
        except BaseException as exc:  # noqa: BLE001 - must become a Triton error, not unwind into C
            return self.api.TRITONSERVER_ErrorNew(INTERNAL, f"output allocation failed: {exc!r}".encode())

    def _release(self, _allocator: int | None, _buffer: int | None, buffer_userp: int | None, _size: int,
                 _mtype: int, _mtid: int) -> None:
        # Triton is done with the buffer; the numpy array stays alive while a result still holds it.
        if self.buffers.pop(buffer_userp or 0, None) is not None:
            self.counters.add("buffers_released")
        return None

    # -- reading an output while its response is alive ---------------------------------------------------
    def output_bytes(self, buffer_id: int | None, base: int | None, size: int) -> np.ndarray:
        """The ``size`` bytes of an output as a uint8 array that owns its memory (outlives the response)."""
        owned = self.buffers.get(buffer_id or 0)
        if owned is not None and (size == 0 or owned.ctypes.data == base):
            return owned[:size]
        # Not from this allocator (should not happen on CPU): copy out before the response is deleted.
        return np.frombuffer(_capi.read_bytes(base, size), dtype=np.uint8)

    def callbacks(self) -> tuple[object, object]:
        """The ctypes callback objects Triton holds pointers to (``Runtime`` keeps them alive)."""
        return self._alloc_cb, self._release_cb

    def close(self) -> None:
        """Delete the Triton allocator; only once no server can call it any more (deleted or never started)."""
        handle, self.handle = self.handle, None
        if handle:
            err = self.api.TRITONSERVER_ResponseAllocatorDelete(handle)
            if err:
                log.error("deleting the response allocator failed: %s", take(self.api, err))
