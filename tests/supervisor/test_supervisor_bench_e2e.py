"""`appliance bench e2e` runs all its alternatives for real (a short run) and ends with its headline ratio; with
``--opcua`` it adds the appliance with analytics on, then with the OPC UA server and a subscribed client too, and
ends with that ratio; with ``--profile`` it profiles the appliance's run at capacity (the attribution itself is
tested on hand-written samples in test_supervisor_bench_profile.py). Run as the command a user runs, in its own
process: it starts several embedded Triton servers in turn, and the test process has had many already."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.cli import run_appliance

from appliance.bench._profile_parts import PART_KEYS
from appliance.exitcodes import ExitCode

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("detector_onnx"),  # fails, not skips, without the detector (tests/conftest.py)
]

# The key=value lines of a plain run, in their order; --analytics appends its two after them.
KEYS = ["latency_beyond_detector_compute_same_run_p50_ms", "latency_overhead_p50_ms",
        "e2e_python_stages_vs_detector_alone", "in_graph_vs_python_stages_e2e", "detector_alone_vs_naive",
        "e2e_vs_naive", "e2e_vs_detector_plus_decode", "e2e_vs_detector_alone"]
# --profile puts its own before them, with its table: CPU ms per result of every part, then of the appliance.
PROFILE_KEYS = [f"profile_{key}_ms_per_frame" for key in (*PART_KEYS, "appliance")]
ANALYTICS_KEYS = ["e2e_analytics_vs_e2e", "e2e_analytics_vs_detector_alone"]
# --opcua (which implies --analytics) appends what its client received, the CPU times and its ratio.
OPCUA_KEYS = ["opcua_changes", "opcua_events", "opcua_cpu_ms", "opcua_server_cpu_ms", "e2e_opcua_vs_without"]


# The --opcua run is ten appliance runs (about 2 min alone); beside the suite's other processes it can take 5.
# Its client runs at normal priority here: at nice 19 beside the suite's processes it would get next to no CPU.
# It runs every alternative of a plain run first, so one run smoke-tests both (a plain run prints a prefix of it).
@pytest.mark.timeout(600)
def test_short_run_measures_every_alternative_smoke() -> None:
    """Smoke test: every alternative runs and publishes, the table and latency split are complete and the key=value
    last lines parse, come in their order and agree with each other. No speed floor: on this 2-core CPU host the
    detector's compute dominates every alternative, so e2e_vs_naive sits near 1 and moves with the machine's load."""
    argv = ["--seconds", "3", "--cameras", "2", "--fps", "6", "--latency-fps", "3", "--opcua", "--profile"]
    result = run_appliance("bench", "e2e", *argv, timeout=600, env={"APPLIANCE_BENCH_OPCUA_CLIENT_NICE": "0"})
    lines = result.stdout.strip().splitlines()
    table = "\n".join(lines)
    for row in ("detector alone", "detector + decode (2 cameras x 6 fps", "naive (OpenCV client + tritonclient HTTP",
                "appliance (2 cameras",
                "appliance, Python pre/post stages (2 cameras", "appliance (1 camera"):
        assert row in table
    pairs = [(m.group(1), float(m.group(2))) for m in (re.match(r"(\w+)=(-?[\d.]+)$", line) for line in lines) if m]
    assert [key for key, _ in pairs] == PROFILE_KEYS + KEYS + ANALYTICS_KEYS + OPCUA_KEYS
    rates = dict(pairs)
    _check_profile(lines, rates)
    # the latency split names every stage with its work inside the stub, from the same run
    split = next(line for line in lines if line.startswith("1-camera latency split"))
    for stage in ("capture->submit", "preprocess", "detector", "postprocess", "rest to the subscriber"):
        assert stage in split, split
    assert split.count("(inside ") == 3, split
    # Every alternative produced results: a ratio of 0 (or nan) would mean one of them published nothing.
    assert rates["e2e_vs_naive"] > 0 and rates["e2e_vs_detector_alone"] > 0
    assert rates["e2e_vs_detector_plus_decode"] > 0
    assert rates["e2e_python_stages_vs_detector_alone"] > 0
    # in-graph vs Python stages is the quotient of the two appliance runs' ratios (same detector-alone rate)
    assert rates["in_graph_vs_python_stages_e2e"] == pytest.approx(
        rates["e2e_vs_detector_alone"] / rates["e2e_python_stages_vs_detector_alone"], rel=0.1, abs=0.02)
    # each design's stages timed inside their stubs in the 2-camera runs (numbers, not nan: both ran)
    for design in ("python_stages", "in_graph"):
        assert re.search(rf"^stage_ms_{design}_2cam preprocess=[\d.]+ detector=[\d.]+ postprocess=[\d.]+$", table,
                         re.M), table
    # the ceiling line is the product of the other two ratios' parts (same rates, same run)
    assert rates["detector_alone_vs_naive"] == pytest.approx(
        rates["e2e_vs_naive"] / rates["e2e_vs_detector_alone"], rel=0.05)  # each rounded to 0.01
    assert any(re.fullmatch(r"e2e_vs_detector_alone=\d+\.\d\d", line) for line in lines), table
    row = re.search(r"appliance \+ analytics \(2 cameras, (\d+) events, (\d+) snapshots\)", table)
    assert row is not None, table
    # the analytics did work in the window: objects appear in the zone at every change of the sample's image
    assert int(row.group(1)) > 0 and int(row.group(2)) > 0, row.group(0)
    assert rates["e2e_analytics_vs_e2e"] > 0
    # both analytics ratios share the analytics run's rate: their quotient is the plain appliance's ratio
    assert rates["e2e_analytics_vs_detector_alone"] == pytest.approx(
        rates["e2e_analytics_vs_e2e"] * rates["e2e_vs_detector_alone"], rel=0.05, abs=0.01)
    # --opcua: the server ran with its client subscribed, which received the counts' changes, in both runs with it
    assert "appliance + analytics + OPC UA client (twice" in table
    assert rates["opcua_changes"] > 0 and rates["opcua_server_cpu_ms"] > 0 and rates["opcua_cpu_ms"] > 0
    assert re.fullmatch(r"e2e_opcua_vs_without=\d+\.\d{3}", lines[-1])


def test_a_models_dir_without_the_detector_is_bad_input(tmp_path: Path) -> None:
    result = run_appliance("bench", "e2e", "--quick", env={"APPLIANCE_MODELS_DIR": str(tmp_path)},
                           expect=ExitCode.BAD_INPUT)
    assert f"{tmp_path / 'yolov3-tiny' / 'model.onnx'} is missing" in result.stderr


def _check_profile(lines: list[str], rates: dict[str, float]) -> None:
    """The --profile table: its shares add up to 100 %, the capture processes decoded and wrote frames, and on a
    CPU host the detector's stub outweighs capture (ONNX Runtime takes ~50 ms or more a frame, decoding one
    640x480 frame a few ms); its key lines add up to the appliance's total."""
    start = lines.index(next(line for line in lines if line.startswith("part (CPU of one e2e run)")))
    end = lines.index(next(line for line in lines if line.startswith("the appliance, all parts above")))
    shares = [float(line[62:].split()[0]) for line in lines[start + 1:end]]
    assert sum(shares) == pytest.approx(100, abs=1.0), lines[start:end]
    for cam in ("cam0", "cam1"):
        row = next(line for line in lines if line.startswith(f"camera {cam}: capture process"))
        assert float(re.search(r"([\d.]+) frames/s written", row).group(1)) > 0, row
    profile = {key[len("profile_"):-len("_ms_per_frame")]: v for key, v in rates.items() if key.startswith("profile_")}
    # the capture processes' CPU comes from /proc; its split into decode, ring copy and loop comes from py-spy's few
    # samples of a 3 s run, so only their sum is certain to be non-zero here
    capture = profile["decode"] + profile["ring_copy"] + profile["capture_other"]
    assert capture > 0 and profile["stub_detector"] > capture, profile
    inside = sum(v for key, v in profile.items() if key not in ("bench", "broker", "profiler", "appliance"))
    assert profile["appliance"] == pytest.approx(inside, abs=0.01 * len(profile))
