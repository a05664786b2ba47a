"""In-process Triton Inference Server: the only package that touches Triton's C API.

Layers: ``_capi`` (ctypes declarations over ``tritonserver.h``), ``errors`` (TRITONSERVER_Error ->
typed exceptions), ``server`` / ``infer`` (the Pythonic API; ``server`` takes its ``options`` and calls
``modelcontrol``; ``infer`` is the façade over ``tensors``, ``allocator``, ``requests``, ``deadlines`` and
``counters``), ``stubs`` (finding Python-backend stub processes and their shared-memory regions;
``robustlocks`` picks the moment to kill one, outside the locks it shares with the server),
``locate`` (where Triton is) and ``pymodels`` (making the appliance's packages importable inside
Python-backend models).

Importing this package loads nothing: the library is opened when a ``Server`` starts.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TritonNotFound": "locate",
    "TritonDistribution": "locate",
    "locate": "locate",
    "prepare_repository": "pymodels",
    "write_path_hook": "pymodels",
    "TritonError": "errors",
    "NotFoundError": "errors",
    "InvalidArgumentError": "errors",
    "UnavailableError": "errors",
    "InternalError": "errors",
    "UnsupportedError": "errors",
    "AlreadyExistsError": "errors",
    "CancelledError": "errors",
    "InferTimeoutError": "errors",
    "StartupError": "errors",
    "StubSiteMissing": "stubsite",
    "UnknownError": "errors",
    "ServerStateError": "errors",
    "Server": "server",
    "ServerOptions": "options",
    "ServerState": "server",
    "InputBuffer": "tensors",
    "InferFuture": "requests",
    "InferResult": "requests",
    "HandleCounters": "counters",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'appliance.triton' has no attribute {name!r}")
    return getattr(importlib.import_module(f"appliance.triton.{module}"), name)
