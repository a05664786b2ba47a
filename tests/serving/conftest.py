"""Fixtures for the serving tests on real Triton: the base detector's engine (ONNX Runtime) and a started server
on an empty live repository with explicit model control, shared by the switcher and warm-up modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from support.engineseed import seed_state_dir
from support.triton import started_server

from appliance.detector.engines import ensure_engines
from appliance.detector.engines.devicerepo import PROFILES
from appliance.detector.engines.manager import InstalledEngine
from appliance.detector.profile import load_profile
from appliance.detector.serving.switcher import ModelSpec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base_engine(tmp_path_factory: pytest.TempPathFactory, detector_onnx: Path, engine_seed: Path) -> InstalledEngine:
    """The shipped detector by the ONNX Runtime builder, taken from the run's seed (tests/support/engineseed.py)."""
    state = seed_state_dir(tmp_path_factory.mktemp("engines") / "state", engine_seed)
    (engine,) = ensure_engines(REPO / "engines", state_dir=state,
                               models_root=detector_onnx.parents[1], builder="onnxruntime", models=["yolov3-tiny"])
    return engine


@pytest.fixture(scope="module")
def base_spec(base_engine: InstalledEngine) -> ModelSpec:
    return ModelSpec(None, load_profile(PROFILES / "yolov3-tiny.yaml"), base_engine)


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """A started server on an empty live repository (explicit model control, no load retries)."""
    repo = tmp_path_factory.mktemp("live") / "repository"
    repo.mkdir()
    with started_server(repo, model_control="explicit", model_load_retries=0) as server:
        yield server, repo
