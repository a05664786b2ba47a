"""Tensors between numpy and Triton: caller-owned inputs described without a copy, outputs read back.

An input is read by Triton straight from the caller's memory: ``prepare_input`` validates it and returns a
``PreparedInput`` whose ``keepalive`` is the object that owns that memory (the caller's array or buffer, or
for BYTES our serialized copy). The request holds the ``PreparedInput`` until Triton releases the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from appliance.triton import dtypes
from appliance.triton.errors import InternalError, InvalidArgumentError


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
class PreparedInput:
    """One input as Triton gets it: a pointer into memory that ``keepalive`` owns."""

    name: bytes
    dtype: int
    shape: tuple[int, ...]
    address: int
    nbytes: int
    keepalive: object  # owns the memory at ``address`` (the caller's, or our BYTES copy) until the request is released


def prepare_input(name: str, value: InputValue) -> PreparedInput:
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
        return PreparedInput(name.encode(), code, shape, raw.ctypes.data, raw.nbytes, raw)
    if not isinstance(value, np.ndarray):
        raise InvalidArgumentError(
            f"input {name!r}: expected a numpy array or InputBuffer, got {type(value).__name__}"
        )
    code = dtypes.triton_dtype(value.dtype)
    if code == dtypes.BYTES:
        buf = dtypes.serialize_bytes(value)
        return PreparedInput(name.encode(), code, value.shape, buf.ctypes.data, buf.nbytes, buf)
    if not value.flags.c_contiguous:
        raise InvalidArgumentError(
            f"input {name!r}: the array must be C-contiguous (use np.ascontiguousarray, which copies)"
        )
    return PreparedInput(name.encode(), code, value.shape, value.ctypes.data, value.nbytes, value)


def output_array(code: int, shape: tuple[int, ...], raw: np.ndarray) -> np.ndarray:
    """An output tensor over ``raw`` (uint8 bytes that own their memory); BYTES become an object array."""
    if code == dtypes.BYTES:
        return dtypes.deserialize_bytes(raw.data, shape)
    dt = dtypes.numpy_dtype(code)
    expected = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if raw.nbytes != expected:
        raise InternalError(f"output of {raw.nbytes} bytes does not match {dtypes.NAMES[code]}{list(shape)}")
    return raw.view(dt).reshape(shape)
