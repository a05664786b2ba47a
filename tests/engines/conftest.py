"""Fixtures for the engine tests; the helpers they are built from are in engines_helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from engines_helpers import EngineEnv, make_onnx, write_jetson_tree, write_profile


@pytest.fixture
def env(tmp_path: Path) -> EngineEnv:
    models = tmp_path / "models"
    make_onnx(models / "tiny.onnx")
    engines = tmp_path / "engines"
    write_profile(engines)
    return EngineEnv(
        root=tmp_path,
        models=models,
        engines=engines,
        state=tmp_path / "state",
        device_root=write_jetson_tree(tmp_path / "device"),
        events=[],
    )
