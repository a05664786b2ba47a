"""TritonSwitcher against the real embedded Triton and the real YOLOv3-tiny pipeline: a version Triton cannot
load is serving's own ``LoadFailed`` (OTA maps it to its rejection: tests/ota/test_ota_serving_errors.py), and
what was materialized and loaded of it is gone again."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from appliance.detector.serving.errors import LoadFailed, ServingError
from appliance.detector.serving.router import Router
from appliance.detector.serving.switcher import ModelSpec, TritonSwitcher

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(live_server: tuple[Any, Path], base_spec: ModelSpec, tmp_path_factory: pytest.TempPathFactory,
           ) -> tuple[Any, Path, ModelSpec]:
    """The live server, and a spec whose detector file is not a model."""
    garbage = tmp_path_factory.mktemp("switcher") / "garbage.onnx"
    garbage.write_bytes(b"this is not an ONNX model")
    broken = dataclasses.replace(base_spec, version="9",
                                 engine=dataclasses.replace(base_spec.engine, engine_path=garbage))
    return (*live_server, broken)


def test_a_damaged_engine_is_load_failed_before_triton_sees_it_and_leaves_nothing_behind(served: Any) -> None:
    """The spec's engine file no longer matches its manifest: refused before Triton is asked (Triton 2.51 can crash
    deleting a model whose instance failed to initialize: appliance/detector/serving/switcher.py)."""
    from appliance.detector.repository.materialize import RepositoryOptions

    server, repo, broken = served
    router = Router()
    switcher = TritonSwitcher(server, repo, router, options=RepositoryOptions(preprocess_instances=1))
    with pytest.raises(LoadFailed) as info:
        switcher.load(broken)
    error = info.value
    assert isinstance(error, ServingError) and error.code == "load_failed"
    assert error.message.startswith("cannot load yolov3-tiny@9: the engine file ") and str(error) == error.message
    assert "does not match its manifest" in error.message and "not handed to Triton" in error.message
    assert router.current() is None
    assert not [p.name for p in repo.iterdir() if p.name.startswith("ota-9-")]
    assert not [m["name"] for m in server.model_index(ready_only=True) if m["name"].startswith("ota-9-")]
