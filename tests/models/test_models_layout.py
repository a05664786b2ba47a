"""Detector layout: how many instances and ONNX Runtime threads each, per device kind, camera count and load."""

from __future__ import annotations

import math

import pytest

from appliance.detector.repository.layout import BUSY_LIMIT, DetectorLayout, detector_layout, offered_load


def test_one_camera_gets_one_instance_on_every_core():
    assert detector_layout("onnxruntime", cameras=1, max_batch_size=4, cpus=8) == DetectorLayout(1, 0, 4)


@pytest.mark.parametrize("cpus, threads", [(2, 1), (8, 4), (6, 3)])
def test_several_cameras_split_the_cores_between_two_instances_without_batches(cpus, threads):
    # single-threaded instances: a batch is no cheaper per frame and would leave the other instance idle
    assert detector_layout("onnxruntime", cameras=4, max_batch_size=4, cpus=cpus) == DetectorLayout(2, threads, 1)


def test_a_single_core_never_splits():
    assert detector_layout("onnxruntime", cameras=4, max_batch_size=4, cpus=1) == DetectorLayout(1, 0, 4)


def test_the_operators_instance_count_wins_and_splits_the_cores():
    assert detector_layout("onnxruntime", cameras=1, max_batch_size=4, instances=2, cpus=8) == DetectorLayout(2, 4, 4)
    assert detector_layout("onnxruntime", cameras=4, max_batch_size=4, instances=1, cpus=8) == DetectorLayout(1, 0, 4)
    assert detector_layout("onnxruntime", cameras=4, max_batch_size=4, instances=4, cpus=2) == DetectorLayout(4, 1, 4)


def test_tensorrt_runs_one_instance_with_the_configured_batch():
    assert detector_layout("tensorrt_plan", cameras=8, max_batch_size=8, cpus=12) == DetectorLayout(1, 0, 8, True)
    assert detector_layout("tensorrt_plan", cameras=8, max_batch_size=8, instances=2, cpus=12).instances == 2


def test_describe_names_instances_threads_and_batch():
    assert detector_layout("onnxruntime", 4, 4, cpus=2).describe() == \
        "2 detector instance(s) x 1 thread(s), one frame at a time"
    assert "all cores" in detector_layout("onnxruntime", 1, 4, cpus=2).describe()


def test_requests_in_flight_keep_every_instance_busy_and_no_more():
    # ONNX Runtime: one frame per instance (a CPU batch is no cheaper) plus one being pre/post-processed
    assert detector_layout("onnxruntime", cameras=1, max_batch_size=4, cpus=2).requests_to_keep_busy() == 2
    assert detector_layout("onnxruntime", cameras=4, max_batch_size=4, cpus=2).requests_to_keep_busy() == 3
    # TensorRT: room for a full batch, which is where a GPU's throughput comes from
    assert detector_layout("tensorrt_plan", cameras=8, max_batch_size=8, cpus=12).requests_to_keep_busy() == 9


# With the detector's build-time speed (frame_ms), the load the cameras offer decides, not their number.
@pytest.mark.parametrize("cameras, offered_fps, instances", [
    (1, 4.0, 1),         # 12 % busy: the lone all-core instance keeps up with the lowest latency
    (4, 8.0, 1),         # four slow cameras: still 25 % busy
    (1, 30.0, 2),        # one fast camera: 93 % busy, frames would queue behind one instance
    (4, 40.0, 2),
    (1, math.inf, 2),    # a camera without fps sends as fast as its source
])
def test_the_offered_load_against_the_detectors_speed_picks_the_layout(cameras, offered_fps, instances):
    layout = detector_layout("onnxruntime", cameras, 4, cpus=2, offered_fps=offered_fps, frame_ms=31.0)
    assert layout.instances == instances


def test_the_switch_is_at_the_busy_limit():
    frame_ms = 25.0
    at_limit = BUSY_LIMIT * 1000 / frame_ms
    assert detector_layout("onnxruntime", 1, 4, cpus=2, offered_fps=at_limit * 0.99, frame_ms=frame_ms).instances == 1
    assert detector_layout("onnxruntime", 1, 4, cpus=2, offered_fps=at_limit, frame_ms=frame_ms).instances == 2


def test_without_a_timing_the_camera_count_decides_whatever_the_rate():
    assert detector_layout("onnxruntime", 1, 4, cpus=2, offered_fps=math.inf).instances == 1
    assert detector_layout("onnxruntime", 4, 4, cpus=2, offered_fps=1.0).instances == 2


def test_a_single_core_never_splits_however_busy():
    assert detector_layout("onnxruntime", 1, 4, cpus=1, offered_fps=math.inf, frame_ms=31.0).instances == 1


def test_offered_load():
    assert offered_load(10.0, 50.0) == pytest.approx(0.5)
    assert offered_load(math.inf, 50.0) == math.inf
    assert offered_load(10.0, None) is None
