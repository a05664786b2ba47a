"""Inference requests: building a Triton request, its completion callbacks, and the future it completes.

Lifetime of one request (a ``Pending``): ``submit`` registers it with the server's ``Runtime`` under a key that
Triton passes back to the callbacks; the response callback reads the outputs, deletes the response and
completes the future; the release callback deletes the request and lets go of the caller's inputs
(``on_inputs_released``, exactly once on every path). The runtime forgets the request after both.

Each ``Server`` owns one ``Runtime``: its ctypes callbacks, its response allocator, its registry of pending
requests and its ``HandleCounters``. Triton may call the callbacks until that server is deleted, so the runtime
must outlive it (the server keeps an abandoned server's runtime for the life of the process).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from appliance.triton import _capi
from appliance.triton.allocator import ResponseAllocator
from appliance.triton.errors import (
    InferTimeoutError,
    InternalError,
    InvalidArgumentError,
    TritonError,
    UnavailableError,
    check,
    from_borrowed,
    take,
)
from appliance.triton.tensors import InputValue, PreparedInput, output_array, prepare_input

if TYPE_CHECKING:
    from appliance.triton._capi import CApi
    from appliance.triton.counters import HandleCounters
    from appliance.triton.deadlines import Deadlines

log = logging.getLogger(__name__)


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
        self._pending: Pending | None = None

    def cancel(self) -> bool:
        if self.done():
            return False
        pending = self._pending
        if pending is not None:
            pending.cancel_in_triton()
        return super().cancel()


def resolve(future: concurrent.futures.Future, result: Any = None, error: BaseException | None = None) -> None:
    """Complete a future unless it already is (cancelled or timed out): completion races are expected."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


class Pending:
    """One request between submission and the later of (final response, request release).

    It owns the Triton request handle (deleted exactly once) and, through ``inputs``, the caller's memory.
    """

    def __init__(
        self, runtime: Runtime, owner: object, model: str, request_id: str, future: InferFuture,
        inputs: list[PreparedInput], on_released: Callable[[], None] | None,
    ) -> None:  # fmt: skip
        self.runtime = runtime
        self.owner = owner  # the Server that submitted it (fail_all on stop)
        self.model = model
        self.request_id = request_id
        self.future = future
        self.inputs: list[PreparedInput] | None = inputs
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
        self.runtime.counters.add("inputs_released")
        if callback is not None:
            try:
                callback()
            except Exception:  # a caller bug must not break Triton's thread
                log.exception("on_inputs_released callback for %s failed", self.model)

    def delete_request(self) -> None:
        req, self.request = self.request, None
        if req:
            self.runtime.delete_request(req)

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
        """The request's deadline passed (``deadlines.Deadlines``): cancel it and fail its future."""
        if self.future.done():
            return
        self.cancel_in_triton()
        resolve(
            self.future,
            error=InferTimeoutError(f"request {self.request_id!r} to model {self.model!r} exceeded {timeout_s} s"),
        )


_KEPT_CALLBACKS: list[object] = []


class Runtime:
    """One server's callback objects, response allocator, pending requests and handle counters."""

    def __init__(self, api: CApi, counters: HandleCounters) -> None:
        self.api = api
        self.counters = counters
        self._keys = itertools.count(1)
        self.pending: dict[int, Pending] = {}
        self.allocator = ResponseAllocator(api, counters)
        self.request_release_cb = _capi.REQUEST_RELEASE_FN(self._request_released)
        self.response_cb = _capi.RESPONSE_COMPLETE_FN(self._response_complete)
        # Triton calls these from its own threads through executable trampolines that ctypes frees with their
        # objects. Kept for the life of the process (with this runtime, which they are bound to: small and empty
        # once its server stopped; the appliance makes one server), so that a call that comes after the server was
        # stopped and dropped runs Python that finds nothing pending, instead of jumping into freed memory, which
        # kills the process from a native thread.
        _KEPT_CALLBACKS.append((self.allocator.callbacks(), self.request_release_cb, self.response_cb))

    @property
    def buffers(self) -> dict[int, np.ndarray]:
        """Output buffers Triton has not released yet (the leak test checks that none is left)."""
        return self.allocator.buffers

    def delete_request(self, request: int) -> None:
        err = self.api.TRITONSERVER_InferenceRequestDelete(request)
        self.counters.add("requests_deleted")
        if err:
            log.error("deleting a request failed: %s", take(self.api, err))

    # -- request/response callbacks (Triton threads) --------------------------------------------------
    # Argument types are what ctypes passes for REQUEST_RELEASE_FN / RESPONSE_COMPLETE_FN (a NULL is None).
    def _request_released(self, request: int | None, flags: int, userp: int | None) -> None:
        try:
            if flags & _capi.REQUEST_RELEASE_ALL:
                pending = self.pending.get(userp or 0)
                if pending is not None:
                    pending.on_request_released()
                elif request:  # already given up on (server stop timed out): still delete it once
                    self.delete_request(request)
        except BaseException:  # noqa: BLE001
            log.exception("request release callback failed")

    def _response_complete(self, response: int | None, flags: int, userp: int | None) -> None:
        try:
            pending = self.pending.get(userp or 0)
            if response:
                self.counters.add("responses_received")
                try:
                    if pending is not None and pending.result is None and pending.error is None:
                        self._read_response(pending, response)
                finally:
                    err = self.api.TRITONSERVER_InferenceResponseDelete(response)
                    self.counters.add("responses_deleted")
                    if err:
                        log.error("deleting a response failed: %s", take(self.api, err))
            if pending is not None and flags & _capi.RESPONSE_COMPLETE_FINAL:
                if pending.error is not None:
                    resolve(pending.future, error=pending.error)
                elif pending.result is not None:
                    resolve(pending.future, pending.result)
                else:
                    resolve(pending.future, error=InternalError(f"model {pending.model!r} sent no response"))
                with pending.lock:  # only now: maybe_forget clears the result
                    pending.responded = True
                self.maybe_forget(pending)
        except BaseException:  # noqa: BLE001
            log.exception("response callback failed")

    def _read_response(self, pending: Pending, response: int) -> None:
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
                raw = self.allocator.output_bytes(buserp.value, base.value, size.value)
                result.outputs[(oname.value or b"").decode()] = output_array(odtype.value, shape, raw)
            pending.result = result
        except TritonError as exc:
            pending.error = exc

    # -- bookkeeping ----------------------------------------------------------------------------------
    def register(self, pending: Pending) -> int:
        pending.id = next(self._keys)
        self.pending[pending.id] = pending
        return pending.id

    def maybe_forget(self, pending: Pending) -> None:
        with pending.lock:
            done = pending.released and pending.responded
        if done:
            self.forget(pending)

    def forget(self, pending: Pending) -> None:
        self.pending.pop(pending.id, None)
        # Break the future <-> pending cycle so a dropped result (e.g. a frame-sized output) is freed by
        # reference counting at once rather than at the next garbage collection.
        pending.future._pending = None
        pending.result = pending.error = None

    def close(self) -> None:
        """Free the response allocator: only once Triton can no longer call back (its server is deleted)."""
        self.allocator.close()


def submit(
    runtime: Runtime,
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
    """Build a Triton request over the caller's memory and start it; see ``appliance.triton.infer``."""
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
    pending = Pending(runtime, owner, model, request_id, future, prepared, on_inputs_released)
    future._pending = pending
    req = ctypes.c_void_p()
    try:
        check(api, api.TRITONSERVER_InferenceRequestNew(ctypes.byref(req), server_ptr, model.encode(), version))
        pending.request = req.value
        runtime.counters.add("requests_created")
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
            req, runtime.allocator.handle, key, runtime.response_cb, key))  # fmt: skip
        err = api.TRITONSERVER_ServerInferAsync(server_ptr, req, None)
        if err:  # Triton did not take the request: it is still ours to delete
            raise take(api, err)
    except BaseException as exc:
        runtime.forget(pending)
        pending.delete_request()
        pending.release_inputs()
        if isinstance(exc, TritonError):
            resolve(future, error=exc)
            return future
        raise
    if timeout_s is not None and deadlines is not None:
        deadlines.add(time.monotonic() + timeout_s, pending, timeout_s)
    return future


def fail_all(runtime: Runtime, owner: object, message: str, *, release_inputs: bool) -> int:
    """Fail every request of ``owner`` still pending; return how many.

    With ``release_inputs`` (the server is deleted: Triton holds no request any more) they are also released
    and forgotten. Without, they stay registered with their inputs alive: Triton may still read the inputs and
    will call back when it releases the request, which deletes it then.
    """
    stuck = [p for p in list(runtime.pending.values()) if p.owner is owner]
    for p in stuck:
        resolve(p.future, error=UnavailableError(message))
        if release_inputs:
            p.release_inputs()
            runtime.forget(p)
    return len(stuck)


def pending_count(runtime: Runtime, owner: object) -> int:
    """How many requests of ``owner`` Triton has not finished with (released and responded)."""
    return sum(1 for p in list(runtime.pending.values()) if p.owner is owner)
