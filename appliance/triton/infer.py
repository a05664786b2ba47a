"""Inference: zero-copy inputs, allocator-backed outputs, futures; the façade over ``tensors``, ``allocator``,
``requests`` and ``deadlines``.

Triton reads inputs straight from the caller's memory, so the caller must not modify or free it before
``on_inputs_released``, which is called exactly once on every path. Outputs are numpy arrays we allocate, so they
own their memory. Callbacks run on Triton's threads: keep them short (docs/triton.md, "Memory ownership")."""

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
