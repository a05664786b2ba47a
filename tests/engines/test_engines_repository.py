"""The cache feeds the model-repository materializer: the detector becomes the ONNX Runtime Python model
(CPU) or a tensorrt_plan (Jetson) pointing at the cached engine, batch capped at the engine's range."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from engines_helpers import REPO, EngineEnv

from appliance.detector.engines import ensure_engines
from appliance.detector.engines.devicerepo import RepositoryWiringError, detector_source, materialize_for_device

pytestmark = pytest.mark.usefixtures("detector_onnx")  # fails, not skips, without the detector (tests/conftest.py)


@pytest.fixture(scope="module")
def detector_engine(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    state = tmp_path_factory.mktemp("state")
    [engine] = ensure_engines(REPO / "engines", state_dir=state, models_root=REPO / ".models",
                              builder="onnxruntime", models=["yolov3-tiny"])
    return engine


def test_cpu_host_repository_uses_the_cached_optimized_model(detector_engine, tmp_path: Path) -> None:
    from appliance.detector.repository.materialize import RepositoryOptions

    repo = materialize_for_device(detector_engine, tmp_path / "repo",
                                  options=RepositoryOptions(max_batch_size=16, prepare_python_models=False))
    model_file = tmp_path / "repo" / repo.detector / "1" / "model.onnx"
    assert model_file.resolve() == detector_engine.engine_path.resolve()
    config = (tmp_path / "repo" / repo.detector / "config.pbtxt").read_text()
    assert re.search(r"max_batch_size: 4\b", config)  # capped at the profile's batch.max
    assert repo.models[-1] == repo.ensemble


def test_jetson_repository_gets_a_tensorrt_plan(detector_engine, tmp_path: Path) -> None:
    from appliance.detector.repository.materialize import RepositoryOptions

    plan = tmp_path / "model.plan"
    plan.write_bytes(b"stands in for the plan file; the materializer only links it")
    # an engine built without the in-graph pre/post (TensorRT int8, or in_graph: false): the raw head
    trt_engine = dataclasses.replace(detector_engine, triton_kind="tensorrt_plan", builder="tensorrt",
                                     engine_path=plan, in_graph=False,
                                     inputs=[{"name": "images", "dtype": "float32", "dims": [None, 3, 416, 416]}],
                                     outputs=[{"name": "output", "dtype": "float32", "dims": [None, 2535, 85]}])
    repo = materialize_for_device(trt_engine, tmp_path / "repo",
                                  options=RepositoryOptions(prepare_python_models=False))
    config = (tmp_path / "repo" / repo.detector / "config.pbtxt").read_text()
    assert 'platform: "tensorrt_plan"' in config and 'name: "images"' in config and 'name: "output"' in config
    assert (tmp_path / "repo" / repo.detector / "1" / "model.plan").resolve() == plan.resolve()
    assert not repo.in_graph and "RAW" in (tmp_path / "repo" / repo.postprocess / "config.pbtxt").read_text()


def test_jetson_repository_serves_an_in_graph_plan(detector_engine, tmp_path: Path) -> None:
    from appliance.detector.repository.materialize import RepositoryOptions

    assert detector_engine.in_graph  # the shipped profile builds the pre/post into the engine
    plan = tmp_path / "model.plan"
    plan.write_bytes(b"stands in for the plan file; the materializer only links it")
    trt_engine = dataclasses.replace(detector_engine, triton_kind="tensorrt_plan", builder="tensorrt",
                                     engine_path=plan)
    repo = materialize_for_device(trt_engine, tmp_path / "repo",
                                  options=RepositoryOptions(prepare_python_models=False))
    config = (tmp_path / "repo" / repo.detector / "config.pbtxt").read_text()
    assert 'platform: "tensorrt_plan"' in config
    assert 'name: "FRAME" data_type: TYPE_UINT8 dims: [ 416, 416, 3 ]' in config
    for output in ('"BOXES" data_type: TYPE_FP32 dims: [ 100, 4 ]', '"COUNT" data_type: TYPE_INT32 dims: [ 1 ]'):
        assert output in config
    assert repo.in_graph and "DET_COUNT" in (tmp_path / "repo" / repo.postprocess / "config.pbtxt").read_text()
    assert "TYPE_UINT8" in (tmp_path / "repo" / repo.preprocess / "config.pbtxt").read_text()


def test_multi_output_engine_is_refused_as_detector(env: EngineEnv) -> None:
    tiny = env.manager().ensure(env.profile())  # two outputs: scores, pooled
    with pytest.raises(RepositoryWiringError, match=r"exactly one input and one output.*'scores', 'pooled'"):
        detector_source(tiny)
