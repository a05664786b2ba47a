"""Shared test setup. Area-specific fixtures live in tests/<area>/conftest.py; reusable helpers that start
real services (broker, RTSP server, Triton) live in tests/support/ so every area can use them."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """GPU-only tests run only where an NVIDIA GPU is visible."""
    if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvhost-ctrl-gpu"):
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (TensorRT/CUDA)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
