"""Shared test setup. Fixtures used by more than one area live here; area-specific fixtures live in
tests/<area>/conftest.py; reusable helpers (real services, polling, setup checks) live in tests/support/.
No test module imports from another test module."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.engineseed import build_seed, seed_root
from support.mosquitto import Mosquitto
from support.provisioned import require_darknet_images, require_detector, require_triton
from support.shm import private_shm_dir

from appliance.triton.locate import TritonDistribution

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    """A real mosquitto for this test, stopped afterwards."""
    with Mosquitto(tmp_path / "broker") as b:
        yield b


@pytest.fixture
def shm_root() -> Iterator[Path]:
    """A fresh directory in the real /dev/shm; the test fails if it leaks a ring."""
    yield from private_shm_dir()


@pytest.fixture(scope="session")
def detector_onnx() -> Path:
    """The converted detector (.models/yolov3-tiny/model.onnx); the test fails, not skips, without it."""
    return require_detector()


@pytest.fixture(scope="session")
def darknet_images() -> Path:
    """The folder of Debian's darknet test images (dog, eagle, ...); the test fails, not skips, without them."""
    return require_darknet_images()


@pytest.fixture(scope="session")
def engine_seed(tmp_path_factory: pytest.TempPathFactory, detector_onnx: Path) -> Path:
    """A state directory holding the detector's engine, built once per run (tests/support/engineseed.py): daemon
    tests that are not about first boot copy it into their own state directory with ``seed_state_dir``."""
    return build_seed(seed_root(tmp_path_factory.getbasetemp()))


@pytest.fixture(scope="session")
def triton_distribution() -> TritonDistribution:
    """The Triton distribution; the test fails, not skips, without it."""
    return require_triton()


# The arm64 smoke set: scripts/aarch64-smoke.sh runs `pytest -m aarch64` on these modules in the emulated arm64
# root (the file says which and why).
AARCH64_MODULES = tuple(line for line in (REPO / "tests" / "aarch64-modules.txt").read_text().splitlines()
                        if line.strip() and not line.startswith("#"))


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
