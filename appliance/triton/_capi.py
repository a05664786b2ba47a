"""ctypes declarations for the parts of ``tritonserver.h`` (API 1.x) the appliance uses.

Only this module and its siblings in ``appliance.triton`` touch ctypes for Triton. Every function that
returns ``TRITONSERVER_Error*`` is declared with ``restype = c_void_p`` so that the pointer comes back as an
int (or None for success) and ``errors.check`` can read, convert and delete it exactly once.

The library is opened once per process with RTLD_GLOBAL (backends such as libtriton_python.so link against
its symbols) and never closed: Triton keeps threads and callbacks into it until the process exits.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from _ctypes import CFuncPtr  # the base of every foreign function; typeshed hides ctypes._CFuncPtr
from ctypes import POINTER, c_bool, c_char_p, c_int, c_int64, c_size_t, c_uint32, c_uint64, c_void_p
from pathlib import Path

from appliance.errors import ApplianceError

# Enums (values from tritonserver.h).
MEMORY_CPU = 0
MODEL_CONTROL = {"none": 0, "poll": 1, "explicit": 2}
LOG_FORMAT = {"default": 0, "iso8601": 1}
METRIC_PROMETHEUS = 0
INDEX_FLAG_READY = 1
REQUEST_RELEASE_ALL = 1
RESPONSE_COMPLETE_FINAL = 1
API_MAJOR = 1
API_MIN_MINOR = 17  # cancellation and the other calls used here exist from 1.17 on

# Callback signatures.
ALLOC_FN = ctypes.CFUNCTYPE(
    c_void_p,  # TRITONSERVER_Error*
    c_void_p, c_char_p, c_size_t, c_int, c_int64, c_void_p,
    POINTER(c_void_p), POINTER(c_void_p), POINTER(c_int), POINTER(c_int64),
)  # fmt: skip
RELEASE_FN = ctypes.CFUNCTYPE(c_void_p, c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int64)
REQUEST_RELEASE_FN = ctypes.CFUNCTYPE(None, c_void_p, c_uint32, c_void_p)
RESPONSE_COMPLETE_FN = ctypes.CFUNCTYPE(None, c_void_p, c_uint32, c_void_p)

E = c_void_p  # every "TRITONSERVER_Error*" result
_P = c_void_p
_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "TRITONSERVER_ApiVersion": (E, [POINTER(c_uint32), POINTER(c_uint32)]),
    "TRITONSERVER_ErrorNew": (_P, [c_int, c_char_p]),
    "TRITONSERVER_ErrorDelete": (None, [_P]),
    "TRITONSERVER_ErrorCode": (c_int, [_P]),
    "TRITONSERVER_ErrorMessage": (c_char_p, [_P]),
    "TRITONSERVER_MessageSerializeToJson": (E, [_P, POINTER(c_void_p), POINTER(c_size_t)]),
    "TRITONSERVER_MessageDelete": (E, [_P]),
    "TRITONSERVER_MetricsFormatted": (E, [_P, c_int, POINTER(c_void_p), POINTER(c_size_t)]),
    "TRITONSERVER_MetricsDelete": (E, [_P]),
    "TRITONSERVER_ResponseAllocatorNew": (E, [POINTER(c_void_p), ALLOC_FN, RELEASE_FN, c_void_p]),
    "TRITONSERVER_ResponseAllocatorDelete": (E, [_P]),
    # server options
    "TRITONSERVER_ServerOptionsNew": (E, [POINTER(c_void_p)]),
    "TRITONSERVER_ServerOptionsDelete": (E, [_P]),
    "TRITONSERVER_ServerOptionsSetServerId": (E, [_P, c_char_p]),
    "TRITONSERVER_ServerOptionsSetModelRepositoryPath": (E, [_P, c_char_p]),
    "TRITONSERVER_ServerOptionsSetModelControlMode": (E, [_P, c_int]),
    "TRITONSERVER_ServerOptionsSetStartupModel": (E, [_P, c_char_p]),
    "TRITONSERVER_ServerOptionsSetStrictModelConfig": (E, [_P, c_bool]),
    "TRITONSERVER_ServerOptionsSetExitOnError": (E, [_P, c_bool]),
    "TRITONSERVER_ServerOptionsSetStrictReadiness": (E, [_P, c_bool]),
    "TRITONSERVER_ServerOptionsSetExitTimeout": (E, [_P, ctypes.c_uint]),
    "TRITONSERVER_ServerOptionsSetPinnedMemoryPoolByteSize": (E, [_P, c_uint64]),
    "TRITONSERVER_ServerOptionsSetModelLoadRetryCount": (E, [_P, ctypes.c_uint]),
    "TRITONSERVER_ServerOptionsSetLogFile": (E, [_P, c_char_p]),
    "TRITONSERVER_ServerOptionsSetLogInfo": (E, [_P, c_bool]),
    "TRITONSERVER_ServerOptionsSetLogWarn": (E, [_P, c_bool]),
    "TRITONSERVER_ServerOptionsSetLogError": (E, [_P, c_bool]),
    "TRITONSERVER_ServerOptionsSetLogFormat": (E, [_P, c_int]),
    "TRITONSERVER_ServerOptionsSetLogVerbose": (E, [_P, c_int]),
    "TRITONSERVER_ServerOptionsSetMetrics": (E, [_P, c_bool]),
    "TRITONSERVER_ServerOptionsSetGpuMetrics": (E, [_P, c_bool]),
    "TRITONSERVER_ServerOptionsSetCpuMetrics": (E, [_P, c_bool]),
    "TRITONSERVER_ServerOptionsSetBackendDirectory": (E, [_P, c_char_p]),
    "TRITONSERVER_ServerOptionsSetBackendConfig": (E, [_P, c_char_p, c_char_p, c_char_p]),
    # server
    "TRITONSERVER_ServerNew": (E, [POINTER(c_void_p), _P]),
    "TRITONSERVER_ServerDelete": (E, [_P]),
    "TRITONSERVER_ServerStop": (E, [_P]),
    "TRITONSERVER_ServerIsLive": (E, [_P, POINTER(c_bool)]),
    "TRITONSERVER_ServerIsReady": (E, [_P, POINTER(c_bool)]),
    "TRITONSERVER_ServerModelIsReady": (E, [_P, c_char_p, c_int64, POINTER(c_bool)]),
    "TRITONSERVER_ServerModelIndex": (E, [_P, c_uint32, POINTER(c_void_p)]),
    "TRITONSERVER_ServerModelConfig": (E, [_P, c_char_p, c_int64, c_uint32, POINTER(c_void_p)]),
    "TRITONSERVER_ServerModelStatistics": (E, [_P, c_char_p, c_int64, POINTER(c_void_p)]),
    "TRITONSERVER_ServerLoadModel": (E, [_P, c_char_p]),
    "TRITONSERVER_ServerUnloadModel": (E, [_P, c_char_p]),
    "TRITONSERVER_ServerMetrics": (E, [_P, POINTER(c_void_p)]),
    "TRITONSERVER_ServerInferAsync": (E, [_P, _P, _P]),
    # requests
    "TRITONSERVER_InferenceRequestNew": (E, [POINTER(c_void_p), _P, c_char_p, c_int64]),
    "TRITONSERVER_InferenceRequestDelete": (E, [_P]),
    "TRITONSERVER_InferenceRequestSetId": (E, [_P, c_char_p]),
    "TRITONSERVER_InferenceRequestCancel": (E, [_P]),
    "TRITONSERVER_InferenceRequestSetTimeoutMicroseconds": (E, [_P, c_uint64]),
    "TRITONSERVER_InferenceRequestAddInput": (E, [_P, c_char_p, c_int, POINTER(c_int64), c_uint64]),
    "TRITONSERVER_InferenceRequestAppendInputData": (E, [_P, c_char_p, c_void_p, c_size_t, c_int, c_int64]),
    "TRITONSERVER_InferenceRequestAddRequestedOutput": (E, [_P, c_char_p]),
    "TRITONSERVER_InferenceRequestSetReleaseCallback": (E, [_P, REQUEST_RELEASE_FN, c_void_p]),
    "TRITONSERVER_InferenceRequestSetResponseCallback": (E, [_P, _P, c_void_p, RESPONSE_COMPLETE_FN, c_void_p]),
    # responses
    "TRITONSERVER_InferenceResponseDelete": (E, [_P]),
    "TRITONSERVER_InferenceResponseError": (_P, [_P]),  # owned by the response: never delete
    "TRITONSERVER_InferenceResponseModel": (E, [_P, POINTER(c_char_p), POINTER(c_int64)]),
    "TRITONSERVER_InferenceResponseId": (E, [_P, POINTER(c_char_p)]),
    "TRITONSERVER_InferenceResponseOutputCount": (E, [_P, POINTER(c_uint32)]),
    "TRITONSERVER_InferenceResponseOutput": (
        E,
        [_P, c_uint32, POINTER(c_char_p), POINTER(c_int), POINTER(POINTER(c_int64)), POINTER(c_uint64),
         POINTER(c_void_p), POINTER(c_size_t), POINTER(c_int), POINTER(c_int64), POINTER(c_void_p)],
    ),  # fmt: skip
}


class LibraryError(ApplianceError, OSError):
    """The Triton library could not be opened or is an incompatible version."""


_MISSING = re.compile(r"^([^:/\s]+): cannot open shared object file")


def _open_with_siblings(path: Path) -> ctypes.CDLL:
    """dlopen ``path``; when a dependency is not found, load it from the same directory and retry.

    The provisioned libtritonserver finds its direct dependencies through RUNPATH ``$ORIGIN``, but RUNPATH
    does not apply to *their* dependencies (libcurl -> libnghttp2), which the tritonserver binary gets from
    its own RPATH. Pre-loading exactly the sibling the loader names fixes that without LD_LIBRARY_PATH.
    """
    loaded: set[str] = set()

    def open_one(target: Path, depth: int) -> ctypes.CDLL:
        while True:
            try:
                lib = ctypes.CDLL(str(target), mode=ctypes.RTLD_GLOBAL)
                loaded.add(target.name)
                return lib
            except OSError as exc:
                match = _MISSING.match(str(exc).split(f"{target}: ", 1)[-1])
                sibling = path.parent / match.group(1) if match else None
                if sibling is None or not sibling.is_file() or sibling.name in loaded or depth > 32:
                    raise LibraryError(f"cannot load the Triton library {path}: {exc}") from exc
                open_one(sibling, depth + 1)  # load the missing dependency first, then retry

    return open_one(path, 0)


class CApi:
    """The opened library with typed functions as attributes (``api.TRITONSERVER_ServerNew(...)``)."""

    def __init__(self, library: Path) -> None:
        self.path = Path(os.path.realpath(library))
        self.lib = _open_with_siblings(self.path)
        for name, (restype, argtypes) in _SIGNATURES.items():
            try:
                fn = getattr(self.lib, name)
            except AttributeError as exc:
                raise LibraryError(f"{self.path} lacks {name}; it is too old for the appliance") from exc
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)
        major, minor = c_uint32(), c_uint32()
        self.lib.TRITONSERVER_ApiVersion(ctypes.byref(major), ctypes.byref(minor))
        self.version = (major.value, minor.value)
        if major.value != API_MAJOR or minor.value < API_MIN_MINOR:
            raise LibraryError(
                f"{self.path} reports Triton C API {major.value}.{minor.value}; "
                f"the appliance needs {API_MAJOR}.{API_MIN_MINOR} or newer within {API_MAJOR}.x"
            )

    def __getattr__(self, name: str) -> CFuncPtr:  # only reached for undeclared names
        raise AttributeError(f"{name} is not declared in appliance.triton._capi")


_lock = threading.Lock()
_loaded: dict[Path, CApi] = {}


def load(library: Path) -> CApi:
    """Open (once per process) and return the library at ``library``."""
    key = Path(os.path.realpath(library))
    with _lock:
        api = _loaded.get(key)
        if api is None:
            if _loaded:
                other = next(iter(_loaded))
                raise LibraryError(f"Triton is already loaded from {other}; one process can host only one build")
            api = _loaded[key] = CApi(key)
        return api


def read_bytes(base: int | None, size: int) -> bytes:
    return b"" if not base or not size else ctypes.string_at(base, size)
