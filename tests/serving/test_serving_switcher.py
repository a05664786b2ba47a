"""TritonSwitcher against the real embedded Triton and the real YOLOv3-tiny pipeline: a version Triton cannot
load is serving's own ``LoadFailed`` (OTA maps it to its rejection: tests/ota/test_ota_serving_errors.py), and
what was materialized and loaded of it is gone again."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterator

import pytest

from appliance.serving.errors import LoadFailed, ServingError
from appliance.serving.router import Router
from appliance.serving.switcher import ModelSpec, TritonSwitcher

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (REPO / ".models/yolov3-tiny/model.onnx").exists(), reason="run scripts/setup.sh"),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path, ModelSpec]]:
    """A started server on an empty live repository, and a spec whose detector file is not a model."""
    from support.triton import started_server

    from appliance.engines import ensure_engines
    from appliance.engines.repository import PROFILES
    from appliance.models.profile import load_profile

    tmp = tmp_path_factory.mktemp("switcher")
    (engine,) = ensure_engines(REPO / "engines", state_dir=tmp / "state", models_root=REPO / ".models",
                               builder="onnxruntime", models=["yolov3-tiny"])
    garbage = tmp / "garbage.onnx"
    garbage.write_bytes(b"this is not an ONNX model")
    broken = ModelSpec("9", load_profile(PROFILES / "yolov3-tiny.yaml"),
                       dataclasses.replace(engine, engine_path=garbage))
    repo = tmp / "repository"
    repo.mkdir()
    with started_server(repo, model_control="explicit", model_load_retries=0) as server:
        yield server, repo, broken


def test_a_version_triton_cannot_load_is_load_failed_and_leaves_nothing_behind(served: Any) -> None:
    from appliance.modelrepo.materialize import RepositoryOptions

    server, repo, broken = served
    router = Router()
    switcher = TritonSwitcher(server, repo, router, options=RepositoryOptions(preprocess_instances=1))
    with pytest.raises(LoadFailed) as info:
        switcher.load(broken)
    error = info.value
    assert isinstance(error, ServingError) and error.code == "load_failed"
    assert error.message.startswith("Triton could not load yolov3-tiny@9: ") and str(error) == error.message
    assert error.__cause__ is not None  # Triton's own error, for the log's traceback
    assert router.current() is None
    assert not [p.name for p in repo.iterdir() if p.name.startswith("ota-9-")]
    assert not [m["name"] for m in server.model_index(ready_only=True) if m["name"].startswith("ota-9-")]
