"""Inference requests: zero-copy inputs, allocator-backed outputs, futures.

Memory ownership
----------------
* **Inputs** are read by Triton straight from the caller's memory (no copy): a C-contiguous numpy array, or
  an ``InputBuffer`` over any buffer (e.g. a memoryview into ``multiprocessing.shared_memory``). The request
  keeps a reference to every input object until Triton's request-release callback; only then is
  ``on_inputs_released`` called (exactly once, on every path, including errors and server stop). The caller
  must not modify or free the memory before that. BYTES inputs are serialized into a buffer we own (a copy).
* **Outputs** are written by Triton through our response allocator into numpy arrays that *we* allocate;
  the Triton response is deleted before the future completes, so the arrays in ``InferResult.outputs`` own
  their memory outright and stay valid as long as the caller holds them. BYTES outputs are ``bytes`` objects.

Threads
-------
Triton calls the completion and release callbacks on its own threads; future done-callbacks and
``on_inputs_released`` run there too, so keep them short and never block on another inference in them.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import heapq
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from appliance.triton import _capi, dtypes
from appliance.triton.errors import (
    INTERNAL,
    InferTimeoutError,
    InternalError,
    InvalidArgumentError,
    TritonError,
    UnavailableError,
    check,
    from_borrowed,
    take,
)

if TYPE_CHECKING:
    from appliance.triton._capi import CApi

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InputBuffer:
    """A raw input: ``data`` is any object exporting the buffer protocol; it is not copied.

    For BYTES, ``data`` must already hold the serialized tensor (4-byte little-endian length + bytes each).
    """

    data: Any
    dtype: Any  # a numpy dtype or a Triton name such as "UINT8"
    shape: Sequence[int]


InputValue = Union[np.ndarray, InputBuffer]


@dataclass
class InferResult:
    """A finished inference: ``outputs`` maps output names to numpy arrays that own their memory."""

    model_name: str
    model_version: int
    request_id: str
    outputs: dict[str, np.ndarray] = field(default_factory=dict)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.outputs[name]


class InferFuture(concurrent.futures.Future):
    """A pending inference; ``cancel()`` also cancels the request inside Triton (best effort).

    Await it with ``asyncio.wrap_future(fut)``. Its done-callbacks run on a Triton thread.
    """

    def __init__(self, request_id: str = "") -> None:
        super().__init__()
        self.request_id = request_id
        self._pending: _Pending | None = None

    def cancel(self) -> bool:
        if self.done():
            return False
        pending = self._pending
        if pending is not None:
            pending.cancel_in_triton()
        return super().cancel()


def _resolve(future: concurrent.futures.Future, result: Any = None, error: BaseException | None = None) -> None:
    """Complete a future unless it already is (cancelled or timed out): completion races are expected."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


@dataclass
class _Input:
    name: bytes
    dtype: int
    shape: tuple[int, ...]
    address: int
    nbytes: int
    keepalive: object  # holds the caller's memory (or our serialized copy) until the request is released


def prepare_input(name: str, value: InputValue) -> _Input:
    """Validate one input and describe its memory without copying (BYTES arrays excepted)."""
    if isinstance(value, InputBuffer):
        code = dtypes.triton_dtype(value.dtype)
        shape = tuple(int(d) for d in value.shape)
        if any(d < 0 for d in shape):
            raise InvalidArgumentError(f"input {name!r}: shape {shape} has a negative dimension")
        try:
            view = memoryview(value.data)
        except TypeError as exc:
            raise InvalidArgumentError(f"input {name!r}: {type(value.data).__name__} is not a buffer") from exc
        if not view.c_contiguous:
            raise InvalidArgumentError(f"input {name!r}: the buffer must be C-contiguous")
        raw = np.frombuffer(view.cast("B") if view.format != "B" or view.ndim != 1 else view, dtype=np.uint8)
        if code != dtypes.BYTES:
            expected = int(np.prod(shape, dtype=np.int64)) * dtypes.numpy_dtype(code).itemsize
            if raw.nbytes != expected:
                raise InvalidArgumentError(
                    f"input {name!r}: buffer holds {raw.nbytes} bytes but {dtypes.NAMES[code]}{list(shape)} "
                    f"needs {expected}"
                )
        return _Input(name.encode(), code, shape, raw.ctypes.data, raw.nbytes, raw)
    if not isinstance(value, np.ndarray):
        raise InvalidArgumentError(
            f"input {name!r}: expected a numpy array or InputBuffer, got {type(value).__name__}"
        )
    code = dtypes.triton_dtype(value.dtype)
    if code == dtypes.BYTES:
        buf = dtypes.serialize_bytes(value)
        return _Input(name.encode(), code, value.shape, buf.ctypes.data, buf.nbytes, buf)
    if not value.flags.c_contiguous:
        raise InvalidArgumentError(
            f"input {name!r}: the array must be C-contiguous (use np.ascontiguousarray, which copies)"
        )
    return _Input(name.encode(), code, value.shape, value.ctypes.data, value.nbytes, value)


class _Counters:
    """Create/delete tallies that the leak tests compare (each handle deleted exactly once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values = dict.fromkeys(
            ("requests_created", "requests_deleted", "responses_received", "responses_deleted",
             "buffers_allocated", "buffers_released", "inputs_released"), 0,
        )  # fmt: skip

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.values[key] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.values)


counters = _Counters()


class _Pending:
    """One request between submission and the later of (final response, request release)."""

    def __init__(
        self, runtime: _Runtime, owner: object, model: str, request_id: str, future: InferFuture,
        inputs: list[_Input], on_released: Callable[[], None] | None,
    ) -> None:  # fmt: skip
        self.runtime = runtime
        self.owner = owner  # the Server that submitted it (fail_all on stop)
        self.model = model
        self.request_id = request_id
        self.future = future
        self.inputs: list[_Input] | None = inputs
        self.on_released = on_released
        self.request: int | None = None
        self.id = 0
        self.lock = threading.Lock()
        self.responded = False
        self.released = False
        self.cancelling = False
        self.delete_deferred = False
        self.result: InferResult | None = None
        self.error: TritonError | None = None

    # -- release of the request and the caller's inputs --------------------------------------------
    def release_inputs(self) -> None:
        """Drop our references to the caller's memory and notify the caller, exactly once."""
        with self.lock:
            if self.inputs is None:
                return
            self.inputs = None
            callback, self.on_released = self.on_released, None
        counters.add("inputs_released")
        if callback is not None:
            try:
                callback()
            except Exception:  # a caller bug must not break Triton's thread
                log.exception("on_inputs_released callback for %s failed", self.model)

    def delete_request(self) -> None:
        req, self.request = self.request, None
        if req:
            err = self.runtime.api.TRITONSERVER_InferenceRequestDelete(req)
            counters.add("requests_deleted")
            if err:
                log.error("deleting a request failed: %s", take(self.runtime.api, err))

    def on_request_released(self) -> None:
        with self.lock:
            self.released = True
            if self.cancelling:  # cancel_in_triton is using the pointer; it deletes when done
                self.delete_deferred = True
            else:
                self.delete_request()
        self.release_inputs()
        self.runtime.maybe_forget(self)

    def cancel_in_triton(self) -> None:
        with self.lock:
            if self.released or self.request is None or self.cancelling:
                return
            self.cancelling = True
            req = self.request
        err = self.runtime.api.TRITONSERVER_InferenceRequestCancel(req)
        if err:
            log.debug("cancel of %s: %s", self.request_id or self.model, take(self.runtime.api, err))
        with self.lock:
            self.cancelling = False
            if self.delete_deferred:
                self.delete_request()

    def expire(self, timeout_s: float) -> None:
        if self.future.done():
            return
        self.cancel_in_triton()
        _resolve(
            self.future,
            error=InferTimeoutError(f"request {self.request_id!r} to model {self.model!r} exceeded {timeout_s} s"),
        )


class _Runtime:
    """Process-wide callback objects and the response allocator for one loaded library.

    The ctypes callback objects live as long as this object, which lives as long as the process: Triton
    may call them until the last server is deleted.
    """

    def __init__(self, api: CApi) -> None:
        self.api = api
        self._ids = itertools.count(1)
        self.pending: dict[int, _Pending] = {}
        self.buffers: dict[int, np.ndarray] = {}
        self.lock = threading.Lock()
        self._alloc_cb = _capi.ALLOC_FN(self._alloc)
        self._release_cb = _capi.RELEASE_FN(self._release_buffer)
        self.request_release_cb = _capi.REQUEST_RELEASE_FN(self._request_released)
        self.response_cb = _capi.RESPONSE_COMPLETE_FN(self._response_complete)
        allocator = ctypes.c_void_p()
        check(api, api.TRITONSERVER_ResponseAllocatorNew(ctypes.byref(allocator), self._alloc_cb,
                                                         self._release_cb, None))  # fmt: skip
        self.allocator = allocator.value

    # -- allocator (Triton threads) -------------------------------------------------------------------
    def _alloc(self, _allocator, _name, byte_size, _mtype, _mtid, _userp, buffer, buffer_userp, actual, actual_id):  # noqa: ANN001
        try:
            array = np.empty(byte_size, dtype=np.uint8)
            bid = next(self._ids)
            self.buffers[bid] = array
            counters.add("buffers_allocated")
            buffer[0] = array.ctypes.data
            buffer_userp[0] = bid
            actual[0] = _capi.MEMORY_CPU  # always host memory, whatever was asked for
            actual_id[0] = 0
            return None
        except BaseException as exc:  # noqa: BLE001 - must become a Triton error, not unwind into C
            return self.api.TRITONSERVER_ErrorNew(INTERNAL, f"output allocation failed: {exc!r}".encode())

    def _release_buffer(self, _allocator, _buffer, buffer_userp, _size, _mtype, _mtid):  # noqa: ANN001
        # Triton is done with the buffer; the numpy array stays alive while a result still holds it.
        if self.buffers.pop(buffer_userp or 0, None) is not None:
            counters.add("buffers_released")
        return None

    # -- request/response callbacks (Triton threads) --------------------------------------------------
    def _request_released(self, request, flags, userp):  # noqa: ANN001
        try:
            if flags & _capi.REQUEST_RELEASE_ALL:
                pending = self.pending.get(userp or 0)
                if pending is not None:
                    pending.on_request_released()
                elif request:  # already given up on (server stop timed out): still delete it once
                    err = self.api.TRITONSERVER_InferenceRequestDelete(request)
                    counters.add("requests_deleted")
                    if err:
                        log.error("deleting a request failed: %s", take(self.api, err))
        except BaseException:  # noqa: BLE001
            log.exception("request release callback failed")

    def _response_complete(self, response, flags, userp):  # noqa: ANN001
        try:
            pending = self.pending.get(userp or 0)
            if response:
                counters.add("responses_received")
                try:
                    if pending is not None and pending.result is None and pending.error is None:
                        self._read_response(pending, response)
                finally:
                    err = self.api.TRITONSERVER_InferenceResponseDelete(response)
                    counters.add("responses_deleted")
                    if err:
                        log.error("deleting a response failed: %s", take(self.api, err))
            if pending is not None and flags & _capi.RESPONSE_COMPLETE_FINAL:
                if pending.error is not None:
                    _resolve(pending.future, error=pending.error)
                elif pending.result is not None:
                    _resolve(pending.future, pending.result)
                else:
                    _resolve(pending.future, error=InternalError(f"model {pending.model!r} sent no response"))
                with pending.lock:  # only now: maybe_forget clears the result
                    pending.responded = True
                self.maybe_forget(pending)
        except BaseException:  # noqa: BLE001
            log.exception("response callback failed")

    def _read_response(self, pending: _Pending, response: int) -> None:
        api = self.api
        err = api.TRITONSERVER_InferenceResponseError(response)
        if err:
            pending.error = from_borrowed(api, err)  # owned by the response
            return
        try:
            name, version = ctypes.c_char_p(), ctypes.c_int64()
            check(api, api.TRITONSERVER_InferenceResponseModel(response, ctypes.byref(name), ctypes.byref(version)))
            result = InferResult(name.value.decode() if name.value else pending.model, version.value,
                                 pending.request_id)  # fmt: skip
            count = ctypes.c_uint32()
            check(api, api.TRITONSERVER_InferenceResponseOutputCount(response, ctypes.byref(count)))
            for i in range(count.value):
                oname, odtype = ctypes.c_char_p(), ctypes.c_int()
                shape_p, ndim = ctypes.POINTER(ctypes.c_int64)(), ctypes.c_uint64()
                base, size = ctypes.c_void_p(), ctypes.c_size_t()
                mtype, mtid, buserp = ctypes.c_int(), ctypes.c_int64(), ctypes.c_void_p()
                check(api, api.TRITONSERVER_InferenceResponseOutput(
                    response, i, ctypes.byref(oname), ctypes.byref(odtype), ctypes.byref(shape_p),
                    ctypes.byref(ndim), ctypes.byref(base), ctypes.byref(size), ctypes.byref(mtype),
                    ctypes.byref(mtid), ctypes.byref(buserp)))  # fmt: skip
                shape = tuple(shape_p[d] for d in range(ndim.value))
                result.outputs[oname.value.decode()] = self._output_array(odtype.value, shape, base.value,
                                                                          size.value, buserp.value)  # fmt: skip
            pending.result = result
        except TritonError as exc:
            pending.error = exc

    def _output_array(self, code: int, shape: tuple[int, ...], base: int | None, size: int,
                      buffer_id: int | None) -> np.ndarray:  # fmt: skip
        owned = self.buffers.get(buffer_id or 0)
        if owned is not None and (size == 0 or owned.ctypes.data == base):
            raw = owned[:size]
        else:  # not from our allocator (should not happen on CPU): copy out before the response dies
            raw = np.frombuffer(_capi.read_bytes(base, size), dtype=np.uint8)
        if code == dtypes.BYTES:
            return dtypes.deserialize_bytes(raw.data, shape)
        dt = dtypes.numpy_dtype(code)
        expected = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if size != expected:
            raise InternalError(f"output of {size} bytes does not match {dtypes.NAMES[code]}{list(shape)}")
        return raw.view(dt).reshape(shape)

    # -- bookkeeping ----------------------------------------------------------------------------------
    def register(self, pending: _Pending) -> int:
        pending.id = next(self._ids)
        self.pending[pending.id] = pending
        return pending.id

    def maybe_forget(self, pending: _Pending) -> None:
        with pending.lock:
            done = pending.released and pending.responded
        if done:
            self.forget(pending)

    def forget(self, pending: _Pending) -> None:
        self.pending.pop(pending.id, None)
        # Break the future <-> pending cycle so a dropped result (e.g. a frame-sized output) is freed by
        # reference counting at once rather than at the next garbage collection.
        pending.future._pending = None
        pending.result = pending.error = None


_runtimes: dict[int, _Runtime] = {}
_runtimes_lock = threading.Lock()


def runtime_for(api: CApi) -> _Runtime:
    with _runtimes_lock:
        rt = _runtimes.get(id(api))
        if rt is None:
            rt = _runtimes[id(api)] = _Runtime(api)
        return rt


def submit(
    runtime: _Runtime,
    server_ptr: int,
    owner: object,
    model: str,
    inputs: Mapping[str, InputValue],
    outputs: Sequence[str] | None,
    *,
    version: int,
    request_id: str,
    timeout_s: float | None,
    on_inputs_released: Callable[[], None] | None,
    deadlines: Deadlines | None,
) -> InferFuture:
    """Build a Triton request over the caller's memory and start it; see the module docstring."""
    api = runtime.api
    future = InferFuture(request_id)
    try:
        if not isinstance(model, str) or not model:
            raise InvalidArgumentError(f"model name must be a non-empty string, got {model!r}")
        if timeout_s is not None and not timeout_s > 0:
            raise InvalidArgumentError(f"timeout_s must be positive, got {timeout_s!r}")
        prepared = [prepare_input(name, value) for name, value in inputs.items()]
    except BaseException:
        if on_inputs_released is not None:
            on_inputs_released()
        raise
    pending = _Pending(runtime, owner, model, request_id, future, prepared, on_inputs_released)
    future._pending = pending
    req = ctypes.c_void_p()
    try:
        check(api, api.TRITONSERVER_InferenceRequestNew(ctypes.byref(req), server_ptr, model.encode(), version))
        pending.request = req.value
        counters.add("requests_created")
        if request_id:
            check(api, api.TRITONSERVER_InferenceRequestSetId(req, request_id.encode()))
        if timeout_s is not None:
            check(api, api.TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(req, int(timeout_s * 1e6)))
        for inp in prepared:
            shape = (ctypes.c_int64 * len(inp.shape))(*inp.shape)
            check(api, api.TRITONSERVER_InferenceRequestAddInput(req, inp.name, inp.dtype, shape, len(inp.shape)))
            check(api, api.TRITONSERVER_InferenceRequestAppendInputData(req, inp.name, inp.address, inp.nbytes,
                                                                        _capi.MEMORY_CPU, 0))  # fmt: skip
        for name in outputs or ():
            check(api, api.TRITONSERVER_InferenceRequestAddRequestedOutput(req, name.encode()))
        key = runtime.register(pending)
        check(api, api.TRITONSERVER_InferenceRequestSetReleaseCallback(req, runtime.request_release_cb, key))
        check(api, api.TRITONSERVER_InferenceRequestSetResponseCallback(
            req, runtime.allocator, key, runtime.response_cb, key))  # fmt: skip
        err = api.TRITONSERVER_ServerInferAsync(server_ptr, req, None)
        if err:  # Triton did not take the request: it is still ours to delete
            raise take(api, err)
    except BaseException as exc:
        runtime.forget(pending)
        pending.delete_request()
        pending.release_inputs()
        if isinstance(exc, TritonError):
            _resolve(future, error=exc)
            return future
        raise
    if timeout_s is not None and deadlines is not None:
        deadlines.add(time.monotonic() + timeout_s, pending, timeout_s)
    return future


def fail_all(runtime: _Runtime, owner: object, message: str, *, release_inputs: bool) -> int:
    """Fail every request of ``owner`` still pending; return how many.

    With ``release_inputs`` (the server is deleted: Triton holds no request any more) they are also released
    and forgotten. Without, they stay registered with their inputs alive: Triton may still read the inputs and
    will call back when it releases the request, which deletes it then.
    """
    stuck = [p for p in list(runtime.pending.values()) if p.owner is owner]
    for p in stuck:
        _resolve(p.future, error=UnavailableError(message))
        if release_inputs:
            p.release_inputs()
            runtime.forget(p)
    return len(stuck)


def pending_count(runtime: _Runtime, owner: object) -> int:
    """How many requests of ``owner`` Triton has not finished with (released and responded)."""
    return sum(1 for p in list(runtime.pending.values()) if p.owner is owner)


class Deadlines:
    """One thread that expires timed requests (instead of a timer thread per request)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # Weak references: a finished request must not be kept alive (with its outputs) until its deadline.
        self._heap: list[tuple[float, int, weakref.ref[_Pending], float]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def add(self, when: float, pending: _Pending, timeout_s: float) -> None:
        with self._cond:
            if self._stopped:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="triton-deadlines", daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, (when, next(self._seq), weakref.ref(pending), timeout_s))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > self._clock()):
                    self._cond.wait(None if not self._heap else max(0.0, self._heap[0][0] - self._clock()))
                if self._stopped:
                    return
                _, _, ref, timeout_s = heapq.heappop(self._heap)
            pending = ref()
            if pending is None:
                continue
            try:
                pending.expire(timeout_s)
            except BaseException:  # noqa: BLE001
                log.exception("expiring a request failed")

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)
