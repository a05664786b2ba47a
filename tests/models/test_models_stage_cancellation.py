"""The stages' cancellation logic without Triton: a ``pb_utils`` stand-in is injected (as the stages are built to
allow) whose requests say whether they are cancelled. A cancelled request is answered CANCELLED without its
inputs being read or its work done; the others in the same call are computed as if alone. (On real Triton:
test_models_cancel_triton.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from appliance.detector.repository.materialize import DetectorSource, RepositoryOptions, materialize
from appliance.detector.repository.stages.common import CANCELLED_METRIC
from appliance.detector.repository.stages.detector_ort import OrtDetectorStage
from appliance.detector.repository.stages.postprocess import PostprocessStage
from appliance.detector.repository.stages.preprocess import PreprocessStage


class _Metric:
    def __init__(self, family: str, labels: dict[str, str]) -> None:
        self.family, self.labels, self.value = family, labels, 0.0

    def increment(self, by: float) -> None:
        self.value += by


class _Family:
    COUNTER = "counter"

    def __init__(self, name: str, description: str, kind: str) -> None:
        self.name = name
        self.metrics: list[_Metric] = []
        _PbUtils.families.append(self)

    def Metric(self, labels: dict[str, str]) -> _Metric:  # noqa: N802 - pb_utils' name
        metric = _Metric(self.name, labels)
        self.metrics.append(metric)
        return metric


class _TritonError(Exception):
    CANCELLED, INVALID_ARG, INTERNAL = "CANCELLED", "INVALID_ARG", "INTERNAL"

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message, self.code = message, code


class _Request:
    """A request whose tensors are read through ``get_input_tensor_by_name`` (each read is recorded)."""

    def __init__(self, cancelled: bool, **tensors: np.ndarray) -> None:
        self._cancelled = cancelled
        self.tensors = tensors
        self.reads: list[str] = []

    def is_cancelled(self) -> bool:
        return self._cancelled


class _PbUtils:
    """What the stages use of triton_python_backend_utils."""

    families: list[_Family] = []
    MetricFamily = _Family
    TritonError = _TritonError

    @staticmethod
    def InferenceResponse(output_tensors: list[Any], error: _TritonError | None = None) -> Any:  # noqa: N802
        return SimpleNamespace(outputs={t.name: t.array for t in output_tensors}, error=error)

    @staticmethod
    def Tensor(name: str, array: np.ndarray) -> Any:  # noqa: N802
        return SimpleNamespace(name=name, array=np.asarray(array))

    @staticmethod
    def get_input_tensor_by_name(request: _Request, name: str) -> Any:
        request.reads.append(name)
        value = request.tensors.get(name)
        return None if value is None else SimpleNamespace(as_numpy=lambda: value)


@pytest.fixture
def pb() -> Any:
    _PbUtils.families = []
    return _PbUtils


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, detector_dir: Path, profile: Any):
    # the Python design's tensors (RAW, OUTPUT); the in-graph stages have their own fixture below
    return materialize(profile, DetectorSource(kind="onnxruntime", path=detector_dir / "model.onnx", in_graph="off"),
                       tmp_path_factory.mktemp("stages") / "repo", RepositoryOptions(prepare_python_models=False))


@pytest.fixture(scope="module")
def repo_in_graph(tmp_path_factory: pytest.TempPathFactory, detector_dir: Path, profile: Any):
    return materialize(profile, DetectorSource(kind="onnxruntime", path=detector_dir / "model.onnx"),
                       tmp_path_factory.mktemp("stages-in-graph") / "repo",
                       RepositoryOptions(prepare_python_models=False))


def _args(model_dir: Path, parameters: dict[str, str] | None = None) -> dict[str, str]:
    config = {"parameters": {k: {"string_value": v} for k, v in (parameters or {}).items()}}
    return {"model_config": json.dumps(config), "model_repository": str(model_dir), "model_version": "1",
            "model_instance_name": f"{model_dir.name}_0_0"}


def _cancelled_count(pb: Any) -> float:
    return sum(m.value for f in pb.families if f.name == CANCELLED_METRIC for m in f.metrics)


class _CountingSession:
    """The real ONNX Runtime session, with its runs and batch sizes counted."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.batches: list[int] = []

    def run(self, names: list[str], feeds: dict[str, np.ndarray]) -> Any:
        self.batches.append(len(next(iter(feeds.values()))))
        return self._session.run(names, feeds)


def test_preprocess_resizes_in_its_own_thread(pb, repo_in_graph) -> None:
    """Not cancellation, but the same stand-in: a stage instance is a process serving one request at a time, so
    OpenCV's pool of threads would only add hand-offs on busy cores."""
    import cv2

    before = cv2.getNumThreads()
    cv2.setNumThreads(4)
    try:
        PreprocessStage(pb, _args(repo_in_graph.path / repo_in_graph.preprocess))
        assert cv2.getNumThreads() == 1
    finally:
        cv2.setNumThreads(before)


def test_preprocess_answers_a_cancelled_request_without_reading_it(pb, repo, images) -> None:
    stage = PreprocessStage(pb, _args(repo.path / repo.preprocess))
    live, cancelled = _Request(False, IMAGE=images["dog"]), _Request(True, IMAGE=images["dog"])
    first, second = stage.execute([cancelled, live])
    assert first.error is not None and first.error.code == _TritonError.CANCELLED and first.outputs == {}
    assert "cancelled" in first.error.message
    assert cancelled.reads == []  # no input was even read
    assert second.error is None and second.outputs["INPUT_TENSOR"].shape == (1, 3, 416, 416)
    alone = stage.execute([_Request(False, IMAGE=images["dog"])])[0]
    np.testing.assert_array_equal(second.outputs["INPUT_TENSOR"], alone.outputs["INPUT_TENSOR"])
    assert _cancelled_count(pb) == 1


def test_postprocess_skips_a_cancelled_request(pb, repo, images) -> None:
    pre = PreprocessStage(pb, _args(repo.path / repo.preprocess))
    letterbox = pre.execute([_Request(False, IMAGE=images["dog"])])[0].outputs["LETTERBOX"]
    stage = PostprocessStage(pb, _args(repo.path / repo.postprocess))
    raw = np.zeros((1, 2535, 85), np.float32)  # a head that found nothing
    cancelled = _Request(True, RAW=raw, LETTERBOX=letterbox)
    (response,) = stage.execute([cancelled])
    assert response.error.code == _TritonError.CANCELLED and cancelled.reads == []
    (computed,) = stage.execute([_Request(False, RAW=raw, LETTERBOX=letterbox)])
    assert computed.error is None and computed.outputs["BOXES"].shape == (0, 4)
    assert _cancelled_count(pb) == 1


def test_detector_leaves_cancelled_frames_out_of_the_batch(pb, repo, images) -> None:
    pre = PreprocessStage(pb, _args(repo.path / repo.preprocess))
    tensors = [pre.execute([_Request(False, IMAGE=images[n])])[0].outputs["INPUT_TENSOR"] for n in ("dog", "horses")]
    stage = OrtDetectorStage(pb, _args(repo.path / repo.detector, {"intra_op_threads": "1"}))
    session = stage.session = _CountingSession(stage.session)  # type: ignore[assignment]
    alone = [stage.execute([_Request(False, INPUT=t)])[0].outputs["OUTPUT"] for t in tensors]
    requests = [_Request(False, INPUT=tensors[0]), _Request(True, INPUT=tensors[0]), _Request(False, INPUT=tensors[1])]
    responses = stage.execute(requests)
    assert session.batches == [1, 1, 2]  # the cancelled frame was not in the batch
    assert responses[1].error.code == _TritonError.CANCELLED and requests[1].reads == []
    for response, expected in zip((responses[0], responses[2]), alone):
        assert response.error is None
        np.testing.assert_allclose(response.outputs["OUTPUT"], expected, rtol=1e-4, atol=1e-4)
    assert _cancelled_count(pb) == 1


def test_detector_does_not_run_when_every_frame_is_cancelled(pb, repo, images) -> None:
    stage = OrtDetectorStage(pb, _args(repo.path / repo.detector, {"intra_op_threads": "1"}))
    session = stage.session = _CountingSession(stage.session)  # type: ignore[assignment]
    x = np.zeros((1, 3, 416, 416), np.float32)
    responses = stage.execute([_Request(True, INPUT=x), _Request(True, INPUT=x)])
    assert [r.error.code for r in responses] == [_TritonError.CANCELLED] * 2
    assert session.batches == [] and _cancelled_count(pb) == 2


def _chain(pb: Any, repo: Any, image: np.ndarray, in_graph: bool) -> dict[str, np.ndarray]:
    params = {"in_graph": "1"} if in_graph else {}
    pre = PreprocessStage(pb, _args(repo.path / repo.preprocess, params))
    det = OrtDetectorStage(pb, _args(repo.path / repo.detector, {"intra_op_threads": "1"}))
    post = PostprocessStage(pb, _args(repo.path / repo.postprocess, params))
    first = pre.execute([_Request(False, IMAGE=image)])[0].outputs
    head = det.execute([_Request(False, INPUT=first["INPUT_TENSOR"])])[0].outputs
    inputs = ({f"DET_{k}": v for k, v in head.items()} if in_graph else {"RAW": head["OUTPUT"]})
    return {"input": first["INPUT_TENSOR"], **post.execute([_Request(False, LETTERBOX=first["LETTERBOX"],
                                                                      **inputs)])[0].outputs}


def test_in_graph_stages_give_the_python_stages_detections(pb, repo, repo_in_graph, images) -> None:
    assert repo_in_graph.in_graph and not repo.in_graph
    for name in ("dog", "horses"):
        python, in_graph = _chain(pb, repo, images[name], False), _chain(pb, repo_in_graph, images[name], True)
        assert in_graph["input"].dtype == np.uint8 and in_graph["input"].shape == (1, 416, 416, 3)
        assert len(in_graph["SCORES"]) == len(python["SCORES"]) > 0
        np.testing.assert_allclose(in_graph["BOXES"], python["BOXES"], atol=0.05)
        np.testing.assert_allclose(in_graph["SCORES"], python["SCORES"], atol=1e-4)
        np.testing.assert_array_equal(in_graph["CLASSES"], python["CLASSES"])


def test_in_graph_postprocess_skips_a_cancelled_request_and_refuses_a_bad_count(pb, repo_in_graph, images) -> None:
    stage = PostprocessStage(pb, _args(repo_in_graph.path / repo_in_graph.postprocess, {"in_graph": "1"}))
    letterbox = np.array([640, 480, 416, 312, 0, 52], np.float32)
    outputs = {"DET_BOXES": np.zeros((1, 100, 4), np.float32), "DET_SCORES": np.zeros((1, 100), np.float32),
               "DET_CLASSES": np.zeros((1, 100), np.int32), "DET_COUNT": np.array([[0]], np.int32)}
    cancelled = _Request(True, LETTERBOX=letterbox, **outputs)
    (response,) = stage.execute([cancelled])
    assert response.error.code == _TritonError.CANCELLED and cancelled.reads == []
    (computed,) = stage.execute([_Request(False, LETTERBOX=letterbox, **outputs)])
    assert computed.error is None and computed.outputs["BOXES"].shape == (0, 4)
    too_many = {**outputs, "DET_COUNT": np.array([[101]], np.int32)}
    (bad,) = stage.execute([_Request(False, LETTERBOX=letterbox, **too_many)])
    assert bad.error.code == _TritonError.INVALID_ARG and "COUNT" in bad.error.message
