"""Shared test setup. Area-specific fixtures live in tests/<area>/conftest.py; reusable helpers that start
real services (broker, RTSP server, Triton) live in tests/support/ so every area can use them."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


# The arm64 smoke set: scripts/aarch64-smoke.sh runs `pytest -m aarch64` in the emulated arm64 root. Fast modules
# whose behaviour the architecture decides: the shared-memory ring's seqlock on a weakly ordered CPU, SQLite's
# durability, and the numpy decode and NMS math.
AARCH64_MODULES = ("capture/test_capture_ring.py", "mqtt/test_mqtt_spool.py", "models/test_models_postprocessing.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the arm64 smoke set; GPU-only tests run only where an NVIDIA GPU is visible."""
    for item in items:
        if Path(item.path).relative_to(REPO / "tests").as_posix() in AARCH64_MODULES:
            item.add_marker(pytest.mark.aarch64)
    if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvhost-ctrl-gpu"):
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (TensorRT/CUDA)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
