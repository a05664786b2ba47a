"""Triton data types <-> numpy dtypes, and the BYTES tensor wire format.

A BYTES tensor is a flat sequence of elements, each a 4-byte little-endian length followed by its bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from appliance.triton.errors import InternalError, InvalidArgumentError

# TRITONSERVER_DataType values.
INVALID, BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES, BF16 = range(15)

_TO_NUMPY: dict[int, np.dtype] = {
    BOOL: np.dtype(np.bool_),
    UINT8: np.dtype(np.uint8),
    UINT16: np.dtype(np.uint16),
    UINT32: np.dtype(np.uint32),
    UINT64: np.dtype(np.uint64),
    INT8: np.dtype(np.int8),
    INT16: np.dtype(np.int16),
    INT32: np.dtype(np.int32),
    INT64: np.dtype(np.int64),
    FP16: np.dtype(np.float16),
    FP32: np.dtype(np.float32),
    FP64: np.dtype(np.float64),
    BF16: np.dtype(np.uint16),  # numpy has no bfloat16: outputs come back as their raw 16-bit patterns
}
_FROM_NUMPY: dict[np.dtype, int] = {dt: code for code, dt in _TO_NUMPY.items() if code != BF16}
NAMES = {
    BOOL: "BOOL", UINT8: "UINT8", UINT16: "UINT16", UINT32: "UINT32", UINT64: "UINT64", INT8: "INT8",
    INT16: "INT16", INT32: "INT32", INT64: "INT64", FP16: "FP16", FP32: "FP32", FP64: "FP64",
    BYTES: "BYTES", BF16: "BF16",
}  # fmt: skip
_BY_NAME = {name: code for code, name in NAMES.items()}
_LEN = struct.Struct("<I")


def triton_dtype(dtype: object) -> int:
    """The Triton type for a numpy dtype (object/bytes/str arrays are BYTES) or a name like ``"FP32"``."""
    if isinstance(dtype, str) and dtype.upper().removeprefix("TYPE_") in _BY_NAME:
        return _BY_NAME[dtype.upper().removeprefix("TYPE_")]
    try:
        dt = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as exc:
        raise InvalidArgumentError(f"unknown data type {dtype!r}") from exc
    if dt.kind in "OSU":
        return BYTES
    code = _FROM_NUMPY.get(dt)
    if code is None:
        raise InvalidArgumentError(f"numpy dtype {dt.str} has no Triton equivalent (native byte order needed)")
    return code


def numpy_dtype(code: int) -> np.dtype:
    if code == BYTES:
        return np.dtype(object)
    try:
        return _TO_NUMPY[code]
    except KeyError:
        raise InternalError(f"Triton returned unknown data type {code}") from None


def serialize_bytes(array: np.ndarray) -> np.ndarray:
    """Encode an object/bytes/str array as a BYTES tensor buffer (uint8, owned by the caller)."""
    parts: list[bytes] = []
    for item in array.reshape(-1):
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif isinstance(item, np.bytes_ | bytes | bytearray | memoryview):
            item = bytes(item)
        else:
            raise InvalidArgumentError(f"BYTES tensors hold bytes or str, not {type(item).__name__}")
        parts.append(_LEN.pack(len(item)))
        parts.append(item)
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def deserialize_bytes(buffer: memoryview | bytes, shape: Sequence[int]) -> np.ndarray:
    """Decode a BYTES tensor buffer into an object array of ``bytes`` with ``shape``."""
    count = int(np.prod(shape, dtype=np.int64))
    out = np.empty(count, dtype=object)
    view = memoryview(buffer)
    offset = 0
    for i in range(count):
        if offset + 4 > len(view):
            raise InternalError(f"BYTES output truncated: {count} elements expected, buffer ended at {i}")
        (n,) = _LEN.unpack_from(view, offset)
        offset += 4
        out[i] = bytes(view[offset : offset + n])
        offset += n
    return out.reshape(tuple(shape))
