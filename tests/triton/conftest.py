"""Fixtures for the Triton tests: one shared server on a copy of tests/triton/models for the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.triton import copy_models, started_server

from appliance.triton.locate import TritonDistribution
from appliance.triton.server import Server

MODELS = Path(__file__).parent / "models"
SHARED_MODELS = ["echo", "dtypes", "raiser", "slow", "venv_probe", "frame"]


@pytest.fixture(scope="session")
def models_src() -> Path:
    return MODELS


@pytest.fixture(scope="session")
def shared_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_models(tmp_path_factory.mktemp("repo"), sorted(p for p in MODELS.iterdir() if p.is_dir()))


@pytest.fixture(scope="session")
def server(shared_repo: Path, triton_distribution: TritonDistribution) -> Iterator[Server]:
    """A running server with every test model loaded; tests must not stop or unload it. Without Triton the tests
    fail naming the fix (``triton_distribution``, tests/conftest.py)."""
    with started_server(shared_repo, models=SHARED_MODELS) as srv:
        yield srv


@pytest.fixture
def private_repo(tmp_path: Path, triton_distribution: TritonDistribution) -> Path:
    """A fresh copy of the test models for tests that change or unload models or stop their server (which need
    Triton: without it they fail naming the fix)."""
    return copy_models(tmp_path / "repo", sorted(p for p in MODELS.iterdir() if p.is_dir()))
