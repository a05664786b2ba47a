"""Inference: zero-copy inputs, allocator-backed outputs, futures. The façade over its parts:

* ``tensors``: numpy / raw buffers -> Triton inputs over the caller's memory; outputs back to numpy.
* ``allocator``: the response allocator whose callbacks hand Triton our numpy arrays.
* ``requests``: building a request, its completion callbacks, the ``InferFuture``; the per-server
  ``Runtime`` that owns the callbacks, the allocator, the pending requests and the ``HandleCounters``.
* ``deadlines``: one thread per server that expires timed requests.

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

from appliance.triton.counters import HandleCounters
from appliance.triton.deadlines import Deadlines
from appliance.triton.requests import InferFuture, InferResult, Runtime, fail_all, pending_count, submit
from appliance.triton.tensors import InputBuffer, InputValue, PreparedInput, prepare_input

__all__ = [
    "Deadlines",
    "HandleCounters",
    "InferFuture",
    "InferResult",
    "InputBuffer",
    "InputValue",
    "PreparedInput",
    "Runtime",
    "fail_all",
    "pending_count",
    "prepare_input",
    "submit",
]
