"""Detector layout: how many instances and ONNX Runtime threads each, per device kind and camera count."""

from __future__ import annotations

import pytest

from appliance.modelrepo.layout import DetectorLayout, detector_layout


def test_one_camera_gets_one_instance_on_every_core():
    assert detector_layout("onnxruntime", cameras=1, max_batch_size=4, cpus=8) == DetectorLayout(1, 0, 4)


@pytest.mark.parametrize("cpus, threads", [(2, 1), (8, 4), (6, 3)])
def test_several_cameras_split_the_cores_between_two_instances_with_small_batches(cpus, threads):
    assert detector_layout("onnxruntime", cameras=4, max_batch_size=4, cpus=cpus) == DetectorLayout(2, threads, 2)
    assert detector_layout("onnxruntime", cameras=4, max_batch_size=1, cpus=cpus).max_batch_size == 1


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
        "2 detector instance(s) x 1 thread(s), batches up to 2"
    assert "all cores" in detector_layout("onnxruntime", 1, 4, cpus=2).describe()


def test_requests_in_flight_keep_every_instance_busy_and_no_more():
    # ONNX Runtime: one frame per instance (a CPU batch is no cheaper) plus one being pre/post-processed
    assert detector_layout("onnxruntime", cameras=1, max_batch_size=4, cpus=2).requests_to_keep_busy() == 2
    assert detector_layout("onnxruntime", cameras=4, max_batch_size=4, cpus=2).requests_to_keep_busy() == 3
    # TensorRT: room for a full batch, which is where a GPU's throughput comes from
    assert detector_layout("tensorrt_plan", cameras=8, max_batch_size=8, cpus=12).requests_to_keep_busy() == 9
