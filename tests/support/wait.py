"""Poll for a condition with a deadline: the one way tests wait for something another thread or process does,
instead of sleeping for a guessed time."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout_s: float = 20.0, interval_s: float = 0.02,
               message: str = "the condition") -> T:
    """Call ``predicate`` every ``interval_s`` until it returns something truthy, and return that.

    Raises AssertionError naming ``message`` once ``timeout_s`` has passed (the predicate gets one last try at
    the deadline). Timeouts are generous limits for a loaded machine, never an assertion on speed."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {message}")
        time.sleep(interval_s)
