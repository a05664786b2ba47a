"""Verification against ONNX Runtime on the original ONNX: the comparison itself, a wrong engine refused with
the amount it missed by, and the I/O check between the engine and the ONNX."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from engines_helpers import EngineEnv, make_onnx, write_profile

from appliance.detector.buildprofile import EngineProfile, Tolerance, load_profile
from appliance.detector.engines.builders.base import IOMismatchError, check_io
from appliance.detector.engines.builders.ort import OnnxRuntimeBuilder
from appliance.detector.engines.manager import VerificationFailed
from appliance.detector.engines.onnxinfo import inspect_onnx
from appliance.detector.engines.verify import GoldenInputError, compare, golden_batches, golden_inputs


def test_compare_passes_within_tolerance() -> None:
    ref = np.linspace(-1, 1, 100, dtype=np.float32)
    check = compare("y", 0, ref + 1e-5, ref, Tolerance(atol=1e-4, rtol=0))
    assert check.passed and check.mismatch_fraction == 0 and check.worst_ratio == pytest.approx(0.1, rel=1e-2)


def test_compare_reports_by_how_much() -> None:
    ref = np.zeros(1000, dtype=np.float32)
    got = ref.copy()
    got[:5] = 0.5
    check = compare("y", 3, got, ref, Tolerance(atol=0.01, rtol=0, max_mismatch=0.001))
    assert not check.passed
    assert check.mismatch_fraction == pytest.approx(0.005)
    assert check.max_abs_err == pytest.approx(0.5)
    assert check.worst_ratio == pytest.approx(50)


def test_compare_allows_a_mismatch_budget_and_handles_nan_and_shape() -> None:
    ref = np.zeros(1000, dtype=np.float32)
    got = ref.copy()
    got[0] = 1.0
    assert compare("y", 0, got, ref, Tolerance(atol=0.01, rtol=0, max_mismatch=0.001)).passed
    got[1] = np.nan
    assert not compare("y", 0, got, ref, Tolerance(atol=0.01, rtol=0, max_mismatch=0.001)).passed
    both = np.array([np.nan, 1.0])
    assert compare("y", 0, both, both.copy(), Tolerance(atol=0, rtol=0)).passed
    wrong_shape = compare("y", 0, np.zeros((2, 3)), np.zeros((3, 2)), Tolerance(atol=1, rtol=1))
    assert not wrong_shape.passed and "shape" in wrong_shape.detail


def test_golden_inputs_are_seeded_and_cover_the_batch_range(env: EngineEnv) -> None:
    info = inspect_onnx(env.models / "tiny.onnx")
    profile = env.profile().model_copy(update={"verify": env.profile().verify.model_copy(update={"samples": 3})})
    assert golden_batches(profile) == [2, 4, 1]
    a, b = golden_inputs(info, profile), golden_inputs(info, profile)
    assert [s["images"].shape for s in a] == [(2, 3, 8, 8), (4, 3, 8, 8), (1, 3, 8, 8)]
    assert all(np.array_equal(x["images"], y["images"]) for x, y in zip(a, b))
    assert all(0 <= s["images"].min() and s["images"].max() <= 1 for s in a)


def test_golden_inputs_from_an_npz(env: EngineEnv) -> None:
    frames = np.random.default_rng(5).uniform(0, 1, (2, 3, 8, 8)).astype(np.float32)
    np.savez(env.engines / "golden.npz", images=frames)
    write_profile(env.engines, verify={"golden": str(env.engines / "golden.npz")})
    built = env.manager().ensure(env.profile())
    assert built.verification.startswith("passed")
    write_profile(env.engines, verify={"golden": str(env.engines / "absent.npz")})
    with pytest.raises(Exception, match="cannot read golden inputs"):
        env.manager().ensure(env.profile())


class _MiscompilingBuilder(OnnxRuntimeBuilder):
    """The real ORT builder, but it optimizes a model with different weights: a real engine file that is
    wrong, standing in for a toolchain that miscompiles."""

    def build(self, onnx, profile, out_path, progress, timing_dir):  # type: ignore[no-untyped-def]
        wrong = make_onnx(out_path.parent / "wrong-source.onnx", seed=42)
        details = super().build(inspect_onnx(wrong), profile, out_path, progress, timing_dir)
        wrong.unlink()
        return details


def test_failing_engine_is_not_installed_and_the_report_says_by_how_much(env: EngineEnv) -> None:
    with pytest.raises(VerificationFailed) as err:
        env.manager(builder=_MiscompilingBuilder()).ensure(env.profile())
    message = str(err.value)
    assert "FAILED (fp32 tolerance atol=0.0001 rtol=0.001" in message
    assert "of elements outside tolerance, max |diff|" in message and "the allowed error" in message
    report = json.loads(err.value.report_path.read_text())
    assert report["passed"] is False
    failed = [c for c in report["checks"] if not c["passed"]]
    assert failed and all(c["max_abs_err"] > 1e-2 and c["worst_ratio"] > 1 for c in failed)
    assert not (env.state / "engines" / "tiny").exists() or not list((env.state / "engines" / "tiny").iterdir())
    assert list((env.state / "engines" / ".tmp").iterdir()) == []
    assert env.events[-1].phase == "failed"
    # the honest builder then builds and installs for the same key
    assert env.manager().ensure(env.profile()).verification.startswith("passed")


def test_loose_tolerance_lets_the_same_engine_through(env: EngineEnv) -> None:
    write_profile(env.engines, verify={"tolerances": {"fp32": {"atol": 1000.0, "rtol": 1.0}}})
    built = env.manager(builder=_MiscompilingBuilder()).ensure(env.profile())
    assert built.verification.startswith("passed")


def test_io_check_names_every_difference(tmp_path: Path, env: EngineEnv) -> None:
    info = inspect_onnx(env.models / "tiny.onnx")
    other = make_onnx(tmp_path / "other.onnx", input_name="pixels", height=16, batch=1)
    runner = OnnxRuntimeBuilder().load(other, env.profile())
    with pytest.raises(IOMismatchError) as err:
        check_io(info, runner, env.profile())
    text = str(err.value)
    assert "unexpected input 'pixels'" in text and "input 'images' missing" in text
    assert "output 'scores' dim 2 is 16, ONNX says 8" in text
    same = OnnxRuntimeBuilder().load(env.models / "tiny.onnx", env.profile())
    check_io(info, same, env.profile())


def test_relative_golden_is_found_beside_the_profile_from_any_cwd(
    env: EngineEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """systemd starts the build with cwd /, so a relative verify.golden must resolve against the profile's folder."""
    frames = np.random.default_rng(7).uniform(0, 1, (3, 3, 8, 8)).astype(np.float32)  # batch 3: not a seeded batch
    np.savez(env.engines / "golden.npz", images=frames)
    write_profile(env.engines, verify={"golden": "golden.npz"})
    monkeypatch.chdir(env.root)
    profile = load_profile(Path("engines") / "tiny.yaml")  # a relative profile path, as `--engines-dir engines`
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    built = env.manager().ensure(profile)
    assert built.verification.startswith("passed"), built.verification
    manifest = json.loads(built.manifest_path.read_text())
    assert {c["sample"] for c in manifest["verification"]["checks"]} == {0}  # the .npz's one sample, not 2 seeded
    assert manifest["timing"]["batch"] == 3


def test_relative_golden_without_a_profile_file_is_a_clear_error(env: EngineEnv) -> None:
    in_memory = EngineProfile.model_validate({"model": "tiny", "onnx": "tiny.onnx", "verify": {"golden": "g.npz"}})
    with pytest.raises(GoldenInputError, match="relative but the profile was not loaded from a file"):
        golden_inputs(inspect_onnx(env.models / "tiny.onnx"), in_memory)


class _MiscompilingFp16Builder(_MiscompilingBuilder):
    """The same wrong engine, reported as an fp16 build (what TensorRT at precision fp16 reports)."""

    def precision(self, profile):  # type: ignore[no-untyped-def]
        return "fp16"


def test_fp16_engine_is_checked_against_the_fp16_tolerance(env: EngineEnv) -> None:
    # fp32's tolerance lets anything through here, so only the fp16 tolerance can refuse the engine
    write_profile(env.engines, verify={"tolerances": {"fp32": {"atol": 1000.0, "rtol": 1.0},
                                                      "fp16": {"atol": 0.02, "rtol": 0.02, "max_mismatch": 0.001}}})
    assert env.manager(builder=_MiscompilingBuilder()).ensure(env.profile()).verification.startswith("passed")
    with pytest.raises(VerificationFailed) as err:
        env.manager(builder=_MiscompilingFp16Builder()).ensure(env.profile())
    message = str(err.value)
    assert "FAILED (fp16 tolerance atol=0.02 rtol=0.02 max_mismatch=0.001)" in message
    assert re.search(r"of elements outside tolerance, max \|diff\| [\d.e+-]+, worst [\d.e+-]+x the allowed error",
                     message), message
    report = json.loads(err.value.report_path.read_text())
    assert report["precision"] == "fp16" and report["tolerance"] == {"atol": 0.02, "rtol": 0.02, "max_mismatch": 0.001}
    failed = [c for c in report["checks"] if not c["passed"]]
    assert failed and all(c["max_abs_err"] > 0.02 and c["worst_ratio"] > 1 for c in failed)
