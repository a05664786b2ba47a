"""The processing functions with ONNX Runtime (no Triton) against the independent OpenCV reference."""

from __future__ import annotations

import cv2
import numpy as np
import onnxruntime as ort
import pytest
from models_reference import assert_same_detections

from appliance.detector.prepost.pipeline import Postprocessor, Preprocessor


@pytest.fixture(scope="module")
def session(detector_dir):
    return ort.InferenceSession(str(detector_dir / "model.onnx"), providers=["CPUExecutionProvider"])


def test_tensor_equals_opencv_blob_of_the_reference_letterbox(profile, reference, images) -> None:
    for name, img in images.items():
        tensor, _ = Preprocessor(profile).frame(img, "BGR")
        canvas, *_ = reference.letterbox(img)
        blob = cv2.dnn.blobFromImage(canvas, 1 / 255.0, (416, 416), swapRB=True)
        np.testing.assert_allclose(tensor, blob[0], atol=1e-6, err_msg=name)


def test_rgb_frame_gives_the_same_tensor_as_bgr(profile, images) -> None:
    pre = Preprocessor(profile)
    bgr = images["kite"]
    np.testing.assert_array_equal(pre.frame(bgr, "BGR")[0], pre.frame(np.ascontiguousarray(bgr[:, :, ::-1]), "RGB")[0])


@pytest.mark.slow
def test_detections_match_the_opencv_reference(profile, reference, images, session) -> None:
    pre, post = Preprocessor(profile), Postprocessor(profile)
    total = 0
    for img in images.values():
        tensor, lb = pre.frame(img, "BGR")
        raw = session.run(None, {"images": tensor[None]})[0][0]
        det = post(raw, lb)
        ref = reference.detect(img, profile.thresholds.score, profile.thresholds.iou)
        assert_same_detections(ref, det.boxes, det.scores, det.class_ids)
        total += len(ref)
    assert total >= 15  # real content found: dogs, horses, a person, a kite, an eagle, giraffes


def test_known_content_of_dog_jpg(profile, images, session) -> None:
    pre, post = Preprocessor(profile), Postprocessor(profile)
    tensor, lb = pre.frame(images["dog"])
    det = post(session.run(None, {"images": tensor[None]})[0][0], lb)
    names = {profile.classes[i] for i in det.class_ids}
    assert {"dog", "bicycle"} <= names
    assert det.boxes.dtype == np.float32 and det.scores.dtype == np.float32 and det.class_ids.dtype == np.int32


def test_normalization_mean_std_and_nhwc(profile, images) -> None:
    custom = profile.model_copy(update={"input": profile.input.model_copy(update={
        "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225), "layout": "NHWC"})})
    tensor, lb = Preprocessor(custom).frame(images["eagle"], "BGR")
    canvas = np.full((416, 416, 3), profile.input.pad_value, np.uint8)
    resized = cv2.resize(images["eagle"], (lb.new_w, lb.new_h))
    canvas[lb.pad_y:lb.pad_y + lb.new_h, lb.pad_x:lb.pad_x + lb.new_w] = resized
    rgb = canvas[:, :, ::-1].astype(np.float64) / 255.0
    expected = (rgb - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
    assert tensor.shape == (416, 416, 3)
    np.testing.assert_allclose(tensor, expected, atol=1e-5)


def test_allow_list_per_class_threshold_and_max_detections_on_real_detections(profile, images, session) -> None:
    tensor, lb = Preprocessor(profile).frame(images["dog"])
    raw = session.run(None, {"images": tensor[None]})[0][0]
    full = Postprocessor(profile)(raw, lb)
    dog, car = profile.classes.index("dog"), profile.classes.index("car")
    assert {dog, car} <= set(full.class_ids.tolist())

    def with_thresholds(**update):
        return Postprocessor(profile.model_copy(update={"thresholds": profile.thresholds.model_copy(update=update)}))

    only_dogs = with_thresholds(allow=["dog"])(raw, lb)
    assert set(only_dogs.class_ids.tolist()) == {dog}
    no_cars = with_thresholds(per_class={"car": 0.99})(raw, lb)
    assert car not in no_cars.class_ids and len(no_cars.boxes) == len(full.boxes) - int((full.class_ids == car).sum())
    top2 = with_thresholds(max_detections=2)(raw, lb)
    np.testing.assert_array_equal(top2.scores, full.scores[:2])
