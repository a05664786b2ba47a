"""Letterbox geometry and its inverse, checked on awkward frame sizes."""

from __future__ import annotations

import numpy as np
import pytest

from appliance.detector.prepost import letterbox as lb

ODD_SIZES = [(1, 1), (1, 4000), (4000, 1), (3000, 4000), (4000, 3000), (577, 311), (416, 416), (2, 3), (1079, 1921)]


@pytest.mark.parametrize("h,w", ODD_SIZES)
def test_frame_edges_round_trip_exactly(h: int, w: int) -> None:
    plan = lb.plan(w, h, 416, 416)
    assert 1 <= plan.new_w <= 416 and 1 <= plan.new_h <= 416
    assert plan.pad_x + plan.new_w <= 416 and plan.pad_y + plan.new_h <= 416
    frame_box = np.array([[0, 0, w, h]], dtype=np.float64)
    net = lb.boxes_to_net(frame_box, plan)
    # The frame lands exactly on the resized region's pixel edges ...
    np.testing.assert_array_equal(net[0], [plan.pad_x, plan.pad_y, plan.pad_x + plan.new_w, plan.pad_y + plan.new_h])
    # ... and comes back onto itself, exactly (float32 frame pixels).
    back = lb.boxes_to_frame(net, plan, clip=False)
    np.testing.assert_array_equal(back[0], np.array([0, 0, w, h], dtype=np.float32))


@pytest.mark.parametrize("h,w", ODD_SIZES)
def test_image_content_fills_exactly_the_planned_region(h: int, w: int) -> None:
    image = np.full((h, w, 3), 200, dtype=np.uint8)
    canvas, plan = lb.apply(image, 416, 416, pad_value=7)
    assert canvas.shape == (416, 416, 3)
    inside = np.zeros((416, 416), dtype=bool)
    inside[plan.pad_y:plan.pad_y + plan.new_h, plan.pad_x:plan.pad_x + plan.new_w] = True
    assert (canvas[inside] == 200).all()
    assert (canvas[~inside] == 7).all()


def test_interior_points_round_trip() -> None:
    plan = lb.plan(773, 512, 416, 416)
    rng = np.random.default_rng(0)
    boxes = np.sort(rng.uniform(0, 512, size=(50, 4)), axis=1)[:, [0, 1, 2, 3]]
    back = lb.boxes_to_frame(lb.boxes_to_net(boxes, plan), plan, clip=False)
    np.testing.assert_allclose(back, boxes, atol=1e-3)


def test_boxes_outside_the_frame_are_clipped() -> None:
    plan = lb.plan(640, 480, 416, 416)
    out = lb.boxes_to_frame(np.array([[-50, -50, 500, 500]], dtype=np.float32), plan)
    assert out[0, 0] == 0 and out[0, 1] == 0 and out[0, 2] == 640 and out[0, 3] == 480


def test_stretch_mode_has_no_padding() -> None:
    plan = lb.plan(1000, 10, 416, 416, mode="stretch")
    assert (plan.new_w, plan.new_h, plan.pad_x, plan.pad_y) == (416, 416, 0, 0)
    back = lb.boxes_to_frame(np.array([[0, 0, 416, 416]]), plan)
    np.testing.assert_allclose(back[0], [0, 0, 1000, 10], atol=1e-4)


def test_letterbox_array_round_trip_and_rejects_nonsense() -> None:
    plan = lb.plan(3000, 4000, 416, 416)
    assert lb.Letterbox.from_array(plan.as_array()) == plan
    with pytest.raises(ValueError, match="6 numbers"):
        lb.Letterbox.from_array(np.zeros(5))
    with pytest.raises(ValueError, match="positive sizes"):
        lb.Letterbox.from_array(np.zeros(6))
