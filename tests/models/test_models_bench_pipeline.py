"""`appliance bench pipeline` runs the plain loop and both detector layouts for real (a short run) and ends with
its headline ratio."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from appliance.appconfig.app import ModelConfig
from appliance.bench import pipeline
from appliance.detector.repository.layout import detector_layout
from appliance.exitcodes import ExitCode

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("detector_onnx"),  # fails, not skips, without the detector (tests/conftest.py)
]


def test_short_run_compares_both_layouts_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    """Smoke test: the run completes, the table has every row and the key=value last lines parse. No floor on
    ensemble_vs_plain_loop: on this 2-core CPU host the detector takes the cores whichever way frames reach it,
    so the ratio sits near 1 and moves with the machine's load; any floor would either mean nothing or flake."""
    assert pipeline.main(["--cameras", "1,4", "--rounds", "1", "--frames", "4"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    # cameras sending as fast as they can: the appliance's layout for any detector speed, beside one instance on
    # every core (the lowest-latency layout)
    batch = ModelConfig().max_batch_size
    layouts = {n: detector_layout("onnxruntime", n, batch, frame_ms=30.0) for n in (1, 4)}
    names = {n: f"{lay.instances}x{lay.intra_op_threads or 'all'}" for n, lay in layouts.items()}
    compared = {"1xall", *names.values()}
    assert re.search(rf"detector alone: [\d.]+ ms per frame.*the appliance runs {names[4]}\)", lines[0]), lines[0]
    # the pipelined runs are bounded in all as the appliance's scheduler bounds them (modelrepo.layout)
    for n, layout in layouts.items():
        assert f"{layout.requests_to_keep_busy()} ({names[n]})" in lines[0], lines[0]
    assert "2 (1xall)" in lines[0]
    rows = [re.match(r"\s+(\d+)\s+(plain|ensemble \S+, \d in flight)\s+(\d+)\s+([\d.]+)", line) for line in lines]
    rows = [m for m in rows if m]
    # per count: plain, each layout at 1 and 2 in flight, and each with the Python stages at 2 in flight
    assert len(rows) == 2 * (1 + 3 * len(compared))
    assert all(int(m.group(3)) > 0 and float(m.group(4)) > 0 for m in rows), lines  # frames and fps
    assert sum(f"{name}-py, 2 in flight" in line for line in lines for name in compared) == 2 * len(compared)
    assert re.fullmatch(rf"appliance_layout_1cam={names[1]} ensemble_vs_plain_loop_1cam=\d+\.\d{{3}}", lines[-10])
    assert re.fullmatch(rf"appliance_layout_4cam={names[4]} ensemble_vs_plain_loop_4cam=\d+\.\d{{3}}", lines[-9])
    assert re.fullmatch(r"ensemble_vs_plain_loop=\d+\.\d{3}", lines[-8])
    for i, cams in ((-7, 1), (-4, 4)):
        for j, label in ((0, "python_stages"), (1, "in_graph")):
            assert re.fullmatch(rf"stage_ms_{cams}cam_{label} pre=[\d.]+ detector=[\d.]+ post=[\d.]+", lines[i + j])
        assert re.fullmatch(rf"in_graph_vs_python_stages_{cams}cam=\d+\.\d{{3}}", lines[i + 2])
    assert re.fullmatch(r"in_graph_vs_python_stages=\d+\.\d{3}", lines[-1])
    assert float(lines[-1].split("=")[1]) > 0 and float(lines[-8].split("=")[1]) > 0


def test_a_model_dir_without_the_detector_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert pipeline.main(["--model-dir", str(tmp_path), "--quick"]) == ExitCode.BAD_INPUT
    assert f"{tmp_path / 'model.onnx'} missing" in capsys.readouterr().err
