"""Fixtures for the supervisor tests. ``broker`` comes from tests/conftest.py; ``shm_root`` is overridden here
without the leak check: these tests run the whole appliance (in-process or as `appliance run`), whose rings are
checked by the tests that assert on them, e.g. test_supervisor_e2e's `list(shm_root.iterdir()) == []`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.shm import private_shm_dir


@pytest.fixture
def shm_root() -> Iterator[Path]:
    """A fresh directory in the real /dev/shm, removed afterwards whatever is left in it."""
    yield from private_shm_dir("appliance-supervisor", check_leaks=False)
