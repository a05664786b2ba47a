"""The wrapped detector graph (appliance.detector.repository.wrap): pre/post inside the ONNX, in ONNX Runtime.

The real network is checked against the independent OpenCV reference on both head layouts; synthetic heads
(a graph that answers a fixed head per batch item) are checked against a row loop + OpenCV's NMSBoxesBatched,
written here without appliance.detector.prepost.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from models_reference import assert_same_detections, write_v8_adapter
from onnx import TensorProto, helper, numpy_helper

from appliance.detector.prepost.errors import InputRejected
from appliance.detector.prepost.pipeline import Postprocessor, Preprocessor
from appliance.detector.repository.materialize import DetectorSource, materialize
from appliance.detector.repository.wrap import FRAME_INPUT, TRT_DOMAIN, Unwrappable, WrapSpec, wrap_model

C = 3  # classes of the synthetic heads


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _run(session: ort.InferenceSession, canvases: np.ndarray) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {FRAME_INPUT: canvases})))


@pytest.fixture(scope="module")
def v8_onnx(detector_dir, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("v8") / "v8.onnx"
    write_v8_adapter(detector_dir / "model.onnx", path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["rows_with_objectness", "channels_first"])
def test_wrapped_real_network_matches_the_opencv_reference(layout, profile, reference, images, detector_dir,
                                                            v8_onnx) -> None:
    prof = profile.model_copy(update={"head": profile.head.model_copy(update={"layout": layout})})
    path = detector_dir / "model.onnx" if layout == "rows_with_objectness" else v8_onnx
    session = _session(wrap_model(onnx.load(str(path)), WrapSpec.from_profile(prof)))
    pre, post = Preprocessor(prof), Postprocessor(prof)
    canvases, boxes = zip(*(pre.canvas(img, "BGR") for img in images.values()))
    out = _run(session, np.stack(canvases))  # all six frames in one batch: per-item packing is exercised
    total = 0
    for i, img in enumerate(images.values()):
        det = post.final(out["BOXES"][i], out["SCORES"][i], out["CLASSES"][i], out["COUNT"][i], boxes[i])
        ref = reference.detect(img, prof.thresholds.score, prof.thresholds.iou, prof.thresholds.max_detections)
        assert_same_detections(ref, det.boxes, det.scores, det.class_ids)
        total += len(ref)
    assert total >= 10  # the reference finds real objects on these images


def test_rgb_frames_give_the_same_canvas_as_bgr(profile, images) -> None:
    pre = Preprocessor(profile)
    bgr = images["kite"]
    a, lb_a = pre.canvas(bgr, "BGR")
    b, lb_b = pre.canvas(np.ascontiguousarray(bgr[:, :, ::-1]), "RGB")
    np.testing.assert_array_equal(a, b)
    assert lb_a == lb_b
    assert a.dtype == np.uint8 and a.shape == (profile.input.height, profile.input.width, 3)


def test_the_graph_normalizes_as_opencv_blob_does(profile, reference, images) -> None:
    """The wrapped pre-processing alone (an identity 'network' exposing its input) against cv2.dnn.blobFromImage."""
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["b", 3, 416, 416])
    # The input reshaped into [B, N, 8] rows (3 classes) so that the wrapper accepts it as a head.
    identity = helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["images"], ["seen"]),
         helper.make_node("Reshape", ["seen", "shape"], ["head"])], "id", [x],
        [helper.make_tensor_value_info("head", TensorProto.FLOAT, ["b", None, 5 + C])],
        [numpy_helper.from_array(np.array([0, -1, 5 + C], dtype=np.int64), "shape")]),
        opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    wrapped = wrap_model(identity, WrapSpec.from_profile(profile.model_copy(update={"classes": ["a", "b", "c"]})))
    wrapped.graph.output.append(helper.make_tensor_value_info("seen", TensorProto.FLOAT, None))
    session = _session(wrapped)
    canvas, *_ = reference.letterbox(images["dog"])
    seen = session.run(["seen"], {FRAME_INPUT: canvas[None]})[0]
    blob = cv2.dnn.blobFromImage(canvas, 1 / 255.0, (416, 416), swapRB=True)
    np.testing.assert_allclose(seen, blob, atol=1e-6)


def _fixed_heads_model(heads: np.ndarray, layout: str, size: int = 64) -> onnx.ModelProto:
    """A 'network' answering heads[k] for a frame whose pixel (0,0) has value k in every channel."""
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["b", 3, size, size])
    data = heads if layout == "rows_with_objectness" else heads.transpose(0, 2, 1)
    nodes = [
        helper.make_node("Slice", ["images", "s", "e", "ax"], ["px"]),  # [B,1,1,1] = k/255
        helper.make_node("Mul", ["px", "k255"], ["k"]),
        helper.make_node("Round", ["k"], ["kr"]),
        helper.make_node("Cast", ["kr"], ["ki"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["ki", "flat"], ["idx"]),
        helper.make_node("Gather", ["heads", "idx"], ["head"], axis=0),
    ]
    inits = [numpy_helper.from_array(np.asarray(v, dtype=dt), n) for n, v, dt in (
        ("s", [0, 0, 0], np.int64), ("e", [1, 1, 1], np.int64), ("ax", [1, 2, 3], np.int64),
        ("k255", 255.0, np.float32), ("flat", [-1], np.int64), ("heads", data, np.float32))]
    out = helper.make_tensor_value_info("head", TensorProto.FLOAT, ["b", None, None])
    return helper.make_model(helper.make_graph(nodes, "fixed", [x], [out], inits),
                             opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _random_heads(rng: np.random.Generator, items: int, n: int = 200) -> np.ndarray:
    heads = np.zeros((items, n, 5 + C), dtype=np.float32)
    centres = rng.uniform(8, 56, size=(items, 6, 2))  # clusters, so NMS has work to do
    pick = rng.integers(0, 6, size=(items, n))
    jitter = rng.normal(0, 2, (items, n, 2))
    heads[:, :, :2] = np.take_along_axis(centres, pick[..., None].repeat(2, -1), axis=1) + jitter
    heads[:, :, 2:4] = rng.uniform(4, 20, size=(items, n, 2))
    heads[:, :, 4] = rng.uniform(0, 1, size=(items, n))
    heads[:, :, 5:] = rng.uniform(0, 1, size=(items, n, C))
    return heads


def _reference(head: np.ndarray, thr: list[float], allowed: list[int] | None, iou: float, max_det: int):
    """Row loop + cv2.dnn.NMSBoxesBatched (class-aware), boxes xyxy in network pixels."""
    rects, scores, ids = [], [], []
    for row in head:
        cls = row[5:] * row[4]
        if allowed is not None:
            cls = np.where(np.isin(np.arange(C), allowed), cls, -1)
        cid = int(np.argmax(cls))
        if cls[cid] > thr[cid]:
            rects.append((float(row[0] - row[2] / 2), float(row[1] - row[3] / 2), float(row[2]), float(row[3])))
            scores.append(float(cls[cid]))
            ids.append(cid)
    if not rects:
        return np.zeros((0, 4)), np.zeros(0), np.zeros(0, dtype=int)
    keep = np.asarray(cv2.dnn.NMSBoxesBatched(rects, scores, ids, 0.0, iou)).reshape(-1)
    keep = sorted(keep, key=lambda k: -scores[k])[:max_det]
    boxes = np.array([[rects[k][0], rects[k][1], rects[k][0] + rects[k][2], rects[k][1] + rects[k][3]] for k in keep])
    return boxes, np.array([scores[k] for k in keep]), np.array([ids[k] for k in keep])


def _synthetic_profile(profile, **thresholds):
    return profile.model_copy(update={
        "classes": ["a", "b", "c"],
        "input": profile.input.model_copy(update={"width": 64, "height": 64}),
        "thresholds": profile.thresholds.model_copy(update=thresholds)})


@pytest.mark.parametrize("layout", ["rows_with_objectness", "channels_first"])
@pytest.mark.parametrize("settings", [
    {"score": 0.3},
    {"score": 0.2, "per_class": {"b": 0.6}, "allow": ["a", "b"]},
    {"score": 0.1, "iou": 0.3, "max_detections": 4},
])
def test_batch_items_get_their_own_detections_as_the_reference(profile, layout, settings) -> None:
    heads = _random_heads(np.random.default_rng(7), items=4)
    heads[2, :, 4] = 0.0  # one item with nothing above threshold
    prof = _synthetic_profile(profile, **settings)
    if layout == "channels_first":  # the v8 head has no objectness: fold it into the class scores
        heads[:, :, 5:] *= heads[:, :, 4:5]
        heads[:, :, 4] = 1.0
    session = _session(wrap_model(_fixed_heads_model(heads[:, :, [0, 1, 2, 3, *range(5, 5 + C)]]
                                                     if layout == "channels_first" else heads, layout),
                                  WrapSpec.from_profile(prof.model_copy(update={
                                      "head": prof.head.model_copy(update={"layout": layout})}))))
    frames = np.zeros((4, 64, 64, 3), dtype=np.uint8)
    order = [3, 0, 2, 1]  # batch item i answers heads[order[i]]
    frames[:, 0, 0, :] = np.array(order, dtype=np.uint8)[:, None]
    out = _run(session, frames)
    k = prof.thresholds.max_detections
    assert out["BOXES"].shape == (4, k, 4) and out["COUNT"].shape == (4, 1) and out["CLASSES"].dtype == np.int32
    for i, h in enumerate(order):
        boxes, scores, ids = _reference(heads[h], prof.class_thresholds(), prof.allowed_ids(), prof.thresholds.iou, k)
        n = int(out["COUNT"][i, 0])
        assert n == len(scores), f"item {i}: {n} detections, the reference {len(scores)}"
        np.testing.assert_allclose(out["BOXES"][i, :n], boxes, atol=1e-3)
        np.testing.assert_allclose(out["SCORES"][i, :n], scores, atol=1e-5)
        np.testing.assert_array_equal(out["CLASSES"][i, :n], ids)
        assert not out["SCORES"][i, n:].any() and not out["BOXES"][i, n:].any()  # rows past COUNT are zeros
    assert int(out["COUNT"][2 if order[2] == 2 else order.index(2), 0]) == 0


def test_normalized_xyxy_boxes_are_scaled_to_network_pixels(profile) -> None:
    heads = np.zeros((1, 2, 5 + C), dtype=np.float32)
    heads[0, 0] = [0.25, 0.5, 0.75, 1.0, 0.9, 0.9, 0.1, 0.1]  # xyxy, normalized
    prof = _synthetic_profile(profile)
    prof = prof.model_copy(update={"head": prof.head.model_copy(update={"box_format": "xyxy",
                                                                         "box_units": "normalized"})})
    out = _run(_session(wrap_model(_fixed_heads_model(heads, "rows_with_objectness"), WrapSpec.from_profile(prof))),
               np.zeros((1, 64, 64, 3), dtype=np.uint8))
    assert int(out["COUNT"][0, 0]) == 1
    np.testing.assert_allclose(out["BOXES"][0, 0], [16, 32, 48, 64], atol=1e-4)


def test_a_frame_with_nothing_above_threshold_gives_count_zero(profile, detector_dir) -> None:
    session = _session(wrap_model(onnx.load(str(detector_dir / "model.onnx")), WrapSpec.from_profile(profile)))
    out = _run(session, np.zeros((2, 416, 416, 3), dtype=np.uint8))
    assert out["COUNT"].tolist() == [[0], [0]]
    assert not out["BOXES"].any()


@pytest.mark.parametrize("change, words", [
    ("two_outputs", "2 outputs"),
    ("classes", "with 3 classes has 8"),
    ("opset", "opset 10 is below 11"),
    ("input", "the profile says"),
])
def test_a_model_that_cannot_be_wrapped_says_why(profile, change, words) -> None:
    heads = np.zeros((1, 4, 5 + 80), dtype=np.float32)
    model = _fixed_heads_model(heads, "rows_with_objectness")
    prof = _synthetic_profile(profile).model_copy(update={"classes": [str(i) for i in range(80)]})
    if change == "two_outputs":
        model.graph.output.append(helper.make_tensor_value_info("px", TensorProto.FLOAT, None))
    elif change == "classes":
        prof = _synthetic_profile(profile)
        model.graph.output[0].type.tensor_type.shape.dim[2].dim_value = 85
    elif change == "opset":
        model.opset_import[0].version = 10
    else:
        prof = prof.model_copy(update={"input": prof.input.model_copy(update={"width": 96})})
    with pytest.raises(Unwrappable, match=words):
        wrap_model(model, WrapSpec.from_profile(prof))


def test_materialize_serves_in_graph_by_default_and_falls_back_with_the_reason(profile, detector_dir, v8_onnx,
                                                                                 tmp_path) -> None:
    v3 = materialize(profile, DetectorSource(kind="onnxruntime", path=detector_dir / "model.onnx"), tmp_path)
    assert v3.in_graph and v3.in_graph_reason == ""
    served = onnx.load(str(tmp_path / v3.detector / "1" / "model.onnx"), load_external_data=False)
    assert [i.name for i in served.graph.input] == [FRAME_INPUT]
    assert "TYPE_UINT8" in (tmp_path / v3.preprocess / "config.pbtxt").read_text()
    assert "DET_BOXES" in (tmp_path / v3.postprocess / "config.pbtxt").read_text()
    v8 = materialize(profile.model_copy(update={"head": profile.head.model_copy(update={"layout": "channels_first"})}),
                     DetectorSource(kind="onnxruntime", path=v8_onnx), tmp_path / "v8")
    assert v8.in_graph
    # a profile that lists 3 classes for the 80-class network: the Python stages serve (and refuse its head)
    wrong = materialize(profile.model_copy(update={"classes": ["a", "b", "c"]}),
                        DetectorSource(kind="onnxruntime", path=detector_dir / "model.onnx"), tmp_path / "wrong")
    assert not wrong.in_graph and "with 3 classes has 8" in wrong.in_graph_reason
    assert "RAW" in (tmp_path / "wrong" / wrong.postprocess / "config.pbtxt").read_text()
    off = materialize(profile, DetectorSource(kind="onnxruntime", path=detector_dir / "model.onnx", in_graph="off"),
                      tmp_path / "off")
    assert not off.in_graph


@pytest.mark.parametrize("boxes, scores, classes, count, words", [
    (np.zeros((1, 5, 3)), np.zeros((1, 5)), np.zeros((1, 5)), np.array([[1]]), "BOXES"),
    (np.zeros((1, 5, 4)), np.zeros((1, 4)), np.zeros((1, 5)), np.array([[1]]), "SCORES"),
    (np.zeros((1, 5, 4)), np.zeros((1, 5)), np.zeros((1, 5)), np.array([[6]]), "COUNT"),
    (np.zeros((1, 5, 4)), np.zeros((1, 5)), np.zeros((1, 5)), np.array([[-1]]), "COUNT"),
    (np.zeros((1, 5, 4)), np.zeros((1, 5)), np.zeros((1, 5)), np.array([[1, 2]]), "COUNT"),
])
def test_postprocess_refuses_malformed_in_graph_outputs(profile, boxes, scores, classes, count, words) -> None:
    from appliance.detector.prepost.letterbox import plan

    with pytest.raises(InputRejected, match=words) as info:
        Postprocessor(profile).final(boxes, scores, classes, count, plan(640, 480, 416, 416))
    assert info.value.reason == "head_shape"


def test_final_boxes_are_mapped_back_to_the_frame_and_clipped(profile) -> None:
    from appliance.detector.prepost.letterbox import plan

    lb = plan(832, 416, 416, 416)  # scale 0.5, 104 px of padding above and below
    boxes = np.array([[[10, 104, 20, 124], [-5, 90, 500, 400], [0, 0, 0, 0]]], dtype=np.float32)
    det = Postprocessor(profile).final(boxes, np.array([[0.9, 0.8, 0]]), np.array([[1, 2, 0]]), np.array([[2]]), lb)
    np.testing.assert_allclose(det.boxes, [[20, 0, 40, 40], [0, 0, 832, 416]])
    assert det.class_ids.tolist() == [1, 2] and det.scores.dtype == np.float32


def test_tensorrt_variant_uses_efficient_nms_with_the_profile_settings(profile, detector_dir) -> None:
    prof = profile.model_copy(update={"thresholds": profile.thresholds.model_copy(
        update={"iou": 0.5, "max_detections": 50})})
    model = wrap_model(onnx.load(str(detector_dir / "model.onnx")), WrapSpec.from_profile(prof, nms="trt"))
    onnx.checker.check_model(model)  # the plugin's own domain keeps the standard checker content
    nms = [n for n in model.graph.node if n.op_type == "EfficientNMS_TRT"]
    assert len(nms) == 1 and nms[0].domain == TRT_DOMAIN
    assert not [n for n in model.graph.node if n.op_type == "NonMaxSuppression"]
    attrs = {a.name: helper.get_attribute_value(a) for a in nms[0].attribute}
    assert attrs["max_output_boxes"] == 50 and attrs["iou_threshold"] == pytest.approx(0.5)
    assert attrs["class_agnostic"] == 0 and attrs["box_coding"] == 0 and attrs["background_class"] == -1
    assert list(nms[0].output) == ["COUNT", "BOXES", "SCORES", "CLASSES"]
    assert [o.name for o in model.graph.output] == ["BOXES", "SCORES", "CLASSES", "COUNT"]
    # the pre-processing and the network are the ONNX variant's: the same nodes up to the network's last one
    plain = wrap_model(onnx.load(str(detector_dir / "model.onnx")), WrapSpec.from_profile(prof))
    last = onnx.load(str(detector_dir / "model.onnx"), load_external_data=False).graph.node[-1].name

    def upto(m: onnx.ModelProto) -> list[tuple[str, str]]:
        names = [n.name for n in m.graph.node]
        return [(n.op_type, n.name) for n in m.graph.node[:names.index(last) + 1]]

    assert upto(model) == upto(plain) and len(upto(model)) > 30


def test_the_spec_digest_follows_every_baked_in_setting(profile) -> None:
    base = WrapSpec.from_profile(profile)
    assert base.digest() == WrapSpec.from_profile(profile).digest()
    changed = [
        profile.model_copy(update={"thresholds": profile.thresholds.model_copy(update={"iou": 0.5})}),
        profile.model_copy(update={"thresholds": profile.thresholds.model_copy(update={"per_class": {"dog": 0.5}})}),
        profile.model_copy(update={"input": profile.input.model_copy(update={"channel_order": "BGR"})}),
    ]
    digests = {base.digest(), WrapSpec.from_profile(profile, nms="trt").digest()}
    digests |= {WrapSpec.from_profile(p).digest() for p in changed}
    assert len(digests) == 5
