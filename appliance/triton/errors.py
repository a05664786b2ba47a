"""Triton errors as Python exceptions.

Every ``TRITONSERVER_Error*`` becomes an instance of a ``TritonError`` subclass chosen by its code; the
exception carries Triton's ``code`` (the enum value), ``code_name`` and ``message``. ``check`` deletes
the error object exactly once; errors owned by a response are converted with ``from_borrowed``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.errors import ApplianceError

if TYPE_CHECKING:
    from appliance.triton._capi import CApi

# TRITONSERVER_Error_Code values.
UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)


class TritonError(ApplianceError):
    """Base of every error raised by ``appliance.triton`` for Triton-side failures."""

    code: int = UNKNOWN
    code_name: str = "UNKNOWN"

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
            self.code_name = _NAMES.get(code, f"CODE_{code}")

    def __str__(self) -> str:
        return f"[{self.code_name}] {self.message}"


class UnknownError(TritonError):
    code, code_name = UNKNOWN, "UNKNOWN"


class InternalError(TritonError):
    code, code_name = INTERNAL, "INTERNAL"


class NotFoundError(TritonError):
    code, code_name = NOT_FOUND, "NOT_FOUND"


class InvalidArgumentError(TritonError, ValueError):
    code, code_name = INVALID_ARG, "INVALID_ARG"


class UnavailableError(TritonError):
    code, code_name = UNAVAILABLE, "UNAVAILABLE"


class UnsupportedError(TritonError):
    code, code_name = UNSUPPORTED, "UNSUPPORTED"


class AlreadyExistsError(TritonError):
    code, code_name = ALREADY_EXISTS, "ALREADY_EXISTS"


class CancelledError(TritonError):
    code, code_name = CANCELLED, "CANCELLED"


class InferTimeoutError(CancelledError, TimeoutError):
    """A request ran past its ``timeout_s``; it was cancelled in Triton."""


class ServerStateError(TritonError, RuntimeError):
    """The call is not valid in the server's current state (e.g. before ``start`` or after ``stop``)."""

    code, code_name = UNAVAILABLE, "UNAVAILABLE"


class StartupError(TritonError):
    """The server did not start (bad options, a startup model failed, or the start timed out)."""


_BY_CODE: dict[int, type[TritonError]] = {
    cls.code: cls
    for cls in (UnknownError, InternalError, NotFoundError, InvalidArgumentError, UnavailableError,
                UnsupportedError, AlreadyExistsError, CancelledError)
}  # fmt: skip
_NAMES = {code: cls.code_name for code, cls in _BY_CODE.items()}


def from_code(code: int, message: str) -> TritonError:
    return _BY_CODE.get(code, UnknownError)(message, code)


def from_borrowed(api: CApi, err: int) -> TritonError:
    """Convert an error we do not own (e.g. a response's); it is not deleted."""
    code = int(api.TRITONSERVER_ErrorCode(err))
    raw = api.TRITONSERVER_ErrorMessage(err)
    return from_code(code, raw.decode("utf-8", "replace") if raw else "")


def take(api: CApi, err: int) -> TritonError:
    """Convert an error we own and delete it."""
    try:
        return from_borrowed(api, err)
    finally:
        api.TRITONSERVER_ErrorDelete(err)


def check(api: CApi, err: int | None) -> None:
    """Raise the typed exception for a non-null error (deleting it); do nothing for success."""
    if err:
        raise take(api, err)


def non_null(pointer: int | None, what: str) -> int:
    """The handle a successful call filled in; NULL despite success is Triton's fault, raised as ``InternalError``."""
    if not pointer:
        raise InternalError(f"{what} succeeded but returned no handle")
    return pointer
