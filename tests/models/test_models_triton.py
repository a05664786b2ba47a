"""The materialized repository served by the real in-process Triton: golden detections against the independent
OpenCV reference, both head layouts, concurrent frames of different sizes, and every bad input's error."""

from __future__ import annotations

import re

import cv2
import numpy as np
import pytest
from models_reference import assert_same_detections, write_v8_adapter

from appliance.detector.repository.materialize import DetectorSource, RepositoryOptions, materialize
from appliance.triton import InvalidArgumentError

pytestmark = pytest.mark.slow
V8_QUEUE_DELAY_US = 500_000  # long enough that concurrent frames always meet in one detector batch


@pytest.fixture(scope="module")
def served(tmp_path_factory, detector_dir, profile):
    from support.triton import started_server

    root = tmp_path_factory.mktemp("models_triton")
    repo = root / "repo"
    test_profile = profile.model_copy(update={"limits": profile.limits.model_copy(
        update={"max_width": 4096, "max_height": 4096, "max_encoded_bytes": 4 << 20})})
    v3 = materialize(test_profile, DetectorSource(kind="onnxruntime", path=detector_dir / "model.onnx"), repo,
                     RepositoryOptions(preprocess_instances=2, intra_op_threads=2))
    write_v8_adapter(detector_dir / "model.onnx", root / "v8.onnx")
    v8_profile = test_profile.model_copy(update={
        "name": "yolov3-tiny-v8head", "head": test_profile.head.model_copy(update={"layout": "channels_first"})})
    v8 = materialize(v8_profile, DetectorSource(kind="onnxruntime", path=root / "v8.onnx"), repo,
                     RepositoryOptions(prefix="v8_", preprocess_instances=1, queue_delay_us=V8_QUEUE_DELAY_US,
                                       intra_op_threads=2))
    with started_server(repo, models=v3.models + v8.models) as server:
        yield server, v3, v8


def _detect(server, model: str, **inputs):
    result = server.infer(model, inputs)
    return result["BOXES"], result["SCORES"], result["CLASSES"]


def test_detections_match_the_opencv_reference(served, images, reference, profile) -> None:
    server, v3, _ = served
    total = 0
    for name, img in images.items():
        boxes, scores, classes = _detect(server, v3.ensemble, IMAGE=img)
        assert boxes.dtype == np.float32 and boxes.shape[1:] == (4,)
        assert scores.dtype == np.float32 and classes.dtype == np.int32
        ref = reference.detect(img)
        assert_same_detections(ref, boxes, scores, classes)
        total += len(ref)
        if name == "dog":  # both finding nothing would match too: the known content must be there
            assert {"dog", "bicycle"} <= {profile.classes[i] for i in classes}
    assert total >= 15  # real content found: dogs, horses, a person, a kite, an eagle, giraffes


def test_rgb_frames_and_encoded_bytes_give_the_same_detections(served, images, profile) -> None:
    server, v3, _ = served
    img = images["person"]
    expected = _detect(server, v3.ensemble, IMAGE=img)
    assert "person" in {profile.classes[i] for i in expected[2]}  # not two empty results that happen to agree
    rgb = _detect(server, v3.ensemble, IMAGE=np.ascontiguousarray(img[:, :, ::-1]),
                  CHANNEL_ORDER=np.array([b"RGB"], dtype=object))
    ok, png = cv2.imencode(".png", img)
    encoded = _detect(server, v3.ensemble, ENCODED=png.reshape(-1))
    for got in (rgb, encoded):
        for a, b in zip(expected, got):
            np.testing.assert_array_equal(a, b)


def test_v8_head_layout_on_a_real_network_in_one_batch(served, images, reference) -> None:
    server, _, v8 = served
    before = server.model_statistics(v8.detector)["model_stats"][0]
    futures = {n: server.infer_async(v8.ensemble, {"IMAGE": img}) for n, img in images.items()}
    total = 0
    for name, fut in futures.items():
        result = fut.result(timeout=120)
        ref = reference.detect(images[name])
        assert_same_detections(ref, result["BOXES"], result["SCORES"], result["CLASSES"])
        total += len(ref)
    assert total >= 15  # both finding nothing would match too: real content must have been found
    after = server.model_statistics(v8.detector)["model_stats"][0]
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == len(images)
    assert executions < inferences, "the dynamic batcher should have put frames of several sizes in one batch"


def test_concurrent_frames_of_odd_sizes(served, images, reference) -> None:
    server, v3, _ = served
    rng = np.random.default_rng(4)
    frames = [
        images["giraffe"][:1, :1].copy(),             # 1×1
        rng.integers(0, 256, (1, 4000, 3), dtype=np.uint8),
        rng.integers(0, 256, (4000, 1, 3), dtype=np.uint8),
        cv2.resize(images["horses"], (4000, 3000)),  # 3000×4000
        cv2.resize(images["dog"], (311, 577)),
    ]
    futures = [server.infer_async(v3.ensemble, {"IMAGE": f}) for f in frames]
    for frame, fut in zip(frames, futures):
        result = fut.result(timeout=120)
        h, w = frame.shape[:2]
        boxes = result["BOXES"]
        assert (boxes[:, 0::2] >= 0).all() and (boxes[:, 0::2] <= w).all()
        assert (boxes[:, 1::2] >= 0).all() and (boxes[:, 1::2] <= h).all()
        assert_same_detections(reference.detect(frame), boxes, result["SCORES"], result["CLASSES"])


def test_grayscale_and_rgba_frames_are_converted(served, images) -> None:
    server, v3, _ = served
    gray = cv2.cvtColor(images["horses"], cv2.COLOR_BGR2GRAY)
    as_bgr = _detect(server, v3.ensemble, IMAGE=cv2.cvtColor(gray, cv2.COLOR_GRAY2BGR))
    assert len(as_bgr[0]) > 0  # not two empty results that happen to agree
    for a, b in zip(as_bgr, _detect(server, v3.ensemble, IMAGE=gray[:, :, None].copy())):
        np.testing.assert_array_equal(a, b)
    bgra = cv2.cvtColor(images["kite"], cv2.COLOR_BGR2BGRA)
    kite = _detect(server, v3.ensemble, IMAGE=images["kite"])
    assert len(kite[0]) > 0
    for a, b in zip(kite, _detect(server, v3.ensemble, IMAGE=bgra)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("inputs,words", [
    ({"IMAGE": np.zeros((0, 8, 3), np.uint8)}, "frame is empty"),
    ({"IMAGE": np.zeros((8, 8, 2), np.uint8)}, "1, 3 or 4 channels, got 2"),
    ({"IMAGE": np.zeros((10, 5000, 3), np.uint8)}, "5000×10 exceeds the limit 4096×4096"),
    ({"ENCODED": np.frombuffer(b"GIF89a not an image", np.uint8)}, "not a decodable JPEG/PNG"),
    ({"ENCODED": np.zeros(0, np.uint8)}, "encoded image is empty"),
    ({"ENCODED": np.zeros(5 << 20, np.uint8)}, "over the limit 4194304"),
    ({}, "send exactly one of IMAGE"),
    ({"IMAGE": np.zeros((8, 8, 3), np.uint8), "ENCODED": np.zeros(4, np.uint8)}, "send exactly one of IMAGE"),
    ({"IMAGE": np.zeros((8, 8, 3), np.uint8), "CHANNEL_ORDER": np.array([b"YUV"], dtype=object)},
     "channel order must be 'BGR' or 'RGB', got 'YUV'"),
])
def test_bad_input_gets_invalid_arg_naming_the_problem(served, inputs, words) -> None:
    server, v3, _ = served
    with pytest.raises(InvalidArgumentError, match=words):
        server.infer(v3.ensemble, inputs)


@pytest.mark.parametrize("frame,words", [
    (np.zeros((8, 8, 3), np.uint16), "UINT16"),   # 16-bit: refused by the ensemble's input type
    (np.zeros((8, 8), np.uint8), "shape"),         # H×W without a channel axis: send H×W×1
])
def test_frames_triton_refuses_before_preprocess(served, frame, words) -> None:
    server, v3, _ = served
    with pytest.raises(InvalidArgumentError, match=words):
        server.infer(v3.ensemble, {"IMAGE": frame})


def test_stage_survives_bad_input_and_reports_metrics(served, images) -> None:
    server, v3, _ = served
    with pytest.raises(InvalidArgumentError):
        server.infer(v3.ensemble, {"ENCODED": np.frombuffer(b"junk", np.uint8)})
    boxes, _, _ = _detect(server, v3.ensemble, IMAGE=images["dog"])
    assert len(boxes) > 0
    text = server.metrics()
    # One series per stub (model_instance, pid): series shared between stubs crash Triton 2.51 on reload.
    stub = r'model_instance="[^"]+",pid="\d+"'
    for stage in ("preprocess", "detector", "postprocess"):
        assert re.search(rf'appliance_stage_busy_seconds_total{{model="yolov3-tiny",{stub},stage="{stage}"}}', text)
        assert re.search(rf'appliance_stage_requests_total{{model="yolov3-tiny",{stub},stage="{stage}"}}', text)
    assert re.search(rf'appliance_stage_rejected_inputs_total{{model="yolov3-tiny",{stub},reason="undecodable",'
                     rf'stage="preprocess"}}', text)


def test_every_step_is_pinned_to_version_one(served) -> None:
    server, v3, _ = served
    config = server.model_config(v3.ensemble)
    steps = config["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == [v3.preprocess, v3.detector, v3.postprocess]
    assert all(int(s["model_version"]) == 1 for s in steps)
    for name in v3.models:
        assert server.model_config(name)["version_policy"] == {"specific": {"versions": [1]}}
    assert server.model_config(v3.detector)["dynamic_batching"]
