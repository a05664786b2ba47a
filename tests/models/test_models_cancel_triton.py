"""Cancellation on the real in-process Triton: a frame whose deadline passes while an earlier step runs is
cancelled in Triton, and the real pipeline stages after that step answer it CANCELLED without computing.

The ``gated`` ensemble (tests/models/gated) puts a ``gate`` step in front of the materialized preprocess ->
detector -> postprocess: it hands the frame on after SECONDS and, like any step that is running when the
appliance gives up, is not interrupted. Executions are read from Triton's model statistics and the stages'
own cancelled counter in Triton's metrics."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.triton import started_server
from support.wait import wait_until

from appliance.detector.repository.materialize import DetectorSource, RepositoryOptions, materialize
from appliance.detector.repository.stages.common import CANCELLED_METRIC
from appliance.triton import InferTimeoutError

pytestmark = pytest.mark.slow
GATED = Path(__file__).parent / "gated"
STAGES = ("preprocess", "detector", "postprocess")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, detector_dir: Path, profile: Any):
    repo = tmp_path_factory.mktemp("cancel") / "repo"
    # tests/models/gated wires the Python design's tensors (RAW): serve that design
    materialize(profile, DetectorSource(kind="onnxruntime", path=detector_dir / "model.onnx", in_graph="off"), repo,
                RepositoryOptions(preprocess_instances=1, intra_op_threads=1))
    for model in ("gate", "gated"):
        shutil.copytree(GATED / model, repo / model)
    with started_server(repo, models=["gated"]) as server:
        yield server


def _stats(server: Any, model: str) -> dict[str, int]:
    stats = server.model_statistics(model)["model_stats"][0]
    return {"success": int(stats["inference_stats"]["success"]["count"]),
            "fail": int(stats["inference_stats"]["fail"]["count"]),
            "executions": int(stats["execution_count"])}


def _cancelled(server: Any, stage: str) -> float:
    pattern = re.compile(rf'^{CANCELLED_METRIC}{{[^}}]*stage="{stage}"[^}}]*}} (\S+)$', re.M)
    return sum(float(v) for v in pattern.findall(server.metrics()))


def _inputs(image: np.ndarray, seconds: float) -> dict[str, np.ndarray]:
    return {"IMAGE": image, "SECONDS": np.array([seconds], np.float32)}


def test_a_frame_that_times_out_is_not_computed_by_the_stages_after(served, images, profile) -> None:
    server = served
    image = images["dog"]
    done = server.infer("gated", _inputs(image, 0.0), timeout_s=60)  # the control: the chain computes a frame
    assert "dog" in {profile.classes[i] for i in done["CLASSES"]}
    wait_until(lambda: _stats(server, "postprocess")["success"] == 1, timeout_s=10, message="statistics settle")
    before = {stage: _stats(server, stage) for stage in STAGES}

    future = server.infer_async("gated", _inputs(image, 1.5), timeout_s=0.3)
    with pytest.raises(InferTimeoutError):
        future.result(timeout=30)
    # The gate finishes its 1.5 s; Triton creates the preprocess step's request already cancelled and hands it
    # to preprocess (Triton counts an answered request a success, even CANCELLED: executions are what tell).
    wait_until(lambda: _stats(server, "preprocess")["executions"] == before["preprocess"]["executions"] + 1,
               timeout_s=30, message="preprocess is handed the cancelled request")
    # The sentinel: the next frame. Its steps queue behind any the cancelled frame would have run on the same
    # models (first come, first served), so once its own runs are counted, such a run would be counted too.
    again = server.infer("gated", _inputs(image, 0.0), timeout_s=60)  # the pipeline serves on
    np.testing.assert_array_equal(again["CLASSES"], done["CLASSES"])
    wait_until(lambda: all(_stats(server, stage)["success"] > before[stage]["success"] for stage in STAGES[1:]),
               timeout_s=10, message="the next frame's statistics")
    after = {stage: _stats(server, stage) for stage in STAGES}
    for stage in ("detector", "postprocess"):  # preprocess answered CANCELLED: the ensemble stopped there
        only_the_next_frame = {"success": before[stage]["success"] + 1, "fail": before[stage]["fail"],
                               "executions": before[stage]["executions"] + 1}
        assert after[stage] == only_the_next_frame, stage
    assert _cancelled(server, "preprocess") == 1  # answered without computing (no input read: the unit test)
    assert _cancelled(server, "detector") == 0 and _cancelled(server, "postprocess") == 0
