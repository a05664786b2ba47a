"""Questions and orders to a running Triton server: liveness, metrics, model load/unload, index, config and
statistics. Each function takes the library and a server pointer that the caller keeps alive for the call
(``Server`` holds it in use through ``_running``); messages Triton returns are deleted here."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from appliance.triton import _capi, pymodels
from appliance.triton.errors import InvalidArgumentError, check, non_null


def check_name(name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name:
        raise InvalidArgumentError(f"model name must be a non-empty string without '/', got {name!r}")


def is_live(api: _capi.CApi, ptr: int) -> bool:
    flag = ctypes.c_bool()
    check(api, api.TRITONSERVER_ServerIsLive(ptr, ctypes.byref(flag)))
    return flag.value


def is_ready(api: _capi.CApi, ptr: int) -> bool:
    flag = ctypes.c_bool()
    check(api, api.TRITONSERVER_ServerIsReady(ptr, ctypes.byref(flag)))
    return flag.value


def metrics_text(api: _capi.CApi, ptr: int) -> str:
    """The server's metrics in Prometheus text format."""
    metrics = ctypes.c_void_p()
    check(api, api.TRITONSERVER_ServerMetrics(ptr, ctypes.byref(metrics)))
    try:
        base, size = ctypes.c_void_p(), ctypes.c_size_t()
        check(api, api.TRITONSERVER_MetricsFormatted(metrics, _capi.METRIC_PROMETHEUS,
                                                     ctypes.byref(base), ctypes.byref(size)))  # fmt: skip
        return _capi.read_bytes(base.value, size.value).decode("utf-8")
    finally:
        check(api, api.TRITONSERVER_MetricsDelete(metrics))


def load_model(api: _capi.CApi, ptr: int, name: str, repositories: Sequence[Path], python_stub: Path | None) -> None:
    """Load (or reload) ``name``; with ``python_stub``, first point a Python model's path hook at it."""
    check_name(name)
    if python_stub is not None:
        for repo in repositories:
            model_dir = repo / name
            if model_dir.is_dir() and pymodels.is_python_model(model_dir):
                pymodels.write_path_hook(model_dir, stub=python_stub)
    check(api, api.TRITONSERVER_ServerLoadModel(ptr, name.encode()))


def unload_model(api: _capi.CApi, ptr: int, name: str) -> None:
    check_name(name)
    check(api, api.TRITONSERVER_ServerUnloadModel(ptr, name.encode()))


def model_ready(api: _capi.CApi, ptr: int, name: str, version: int) -> bool:
    check_name(name)
    flag = ctypes.c_bool()
    check(api, api.TRITONSERVER_ServerModelIsReady(ptr, name.encode(), version, ctypes.byref(flag)))
    return flag.value


def model_index(api: _capi.CApi, ptr: int, ready_only: bool) -> list[dict[str, Any]]:
    msg = ctypes.c_void_p()
    flags = _capi.INDEX_FLAG_READY if ready_only else 0
    check(api, api.TRITONSERVER_ServerModelIndex(ptr, flags, ctypes.byref(msg)))
    return _message_json(api, non_null(msg.value, "ServerModelIndex"))


def model_config(api: _capi.CApi, ptr: int, name: str, version: int) -> dict[str, Any]:
    check_name(name)
    msg = ctypes.c_void_p()
    check(api, api.TRITONSERVER_ServerModelConfig(ptr, name.encode(), version, 1, ctypes.byref(msg)))
    return _message_json(api, non_null(msg.value, "ServerModelConfig"))


def model_statistics(api: _capi.CApi, ptr: int, name: str, version: int) -> dict[str, Any]:
    msg = ctypes.c_void_p()
    check(api, api.TRITONSERVER_ServerModelStatistics(ptr, name.encode(), version, ctypes.byref(msg)))
    return _message_json(api, non_null(msg.value, "ServerModelStatistics"))


def _message_json(api: _capi.CApi, msg: int) -> Any:
    """Parse a TRITONSERVER_Message we own, and delete it."""
    try:
        base, size = ctypes.c_void_p(), ctypes.c_size_t()
        check(api, api.TRITONSERVER_MessageSerializeToJson(msg, ctypes.byref(base), ctypes.byref(size)))
        return json.loads(_capi.read_bytes(base.value, size.value))
    finally:
        check(api, api.TRITONSERVER_MessageDelete(msg))
