"""`appliance build-engines` as a real process: build, cache hit, JSON, exit codes, progress over a real
sd_notify socket; the first-boot unit passes `systemd-analyze verify`."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from engines_helpers import REPO, EngineEnv, make_onnx, write_profile
from support.cli import run_appliance
from support.smalldisk import small_tmpfs

UNIT = REPO / "systemd" / "appliance-build-engines.service"


def _cli(env: EngineEnv, *args: str, environ: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_appliance("build-engines", "--engines-dir", str(env.engines), "--models-dir", str(env.models),
                         "--state-dir", str(env.state), "--builder", "onnxruntime", *args, env=environ, expect=None)


def test_build_then_cache_hit(env: EngineEnv) -> None:
    first = _cli(env, "--json")
    assert first.returncode == 0, first.stderr
    built = json.loads(first.stdout)["engines"][0]
    assert built["cache_hit"] is False and built["triton_kind"] == "onnxruntime"
    assert Path(built["engine_path"]).is_file()
    assert "tiny: build" in first.stderr and "tiny: done 100%" in first.stderr
    second = _cli(env)
    assert second.returncode == 0, second.stderr
    assert re.search(r"^tiny: cached; onnxruntime fp32 -> .*model\.onnx$", second.stdout, re.M)


def test_progress_goes_to_a_real_notify_socket(env: EngineEnv, tmp_path: Path) -> None:
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(5)
        result = _cli(env, environ={"NOTIFY_SOCKET": path})
        assert result.returncode == 0, result.stderr
        messages = []
        sock.setblocking(False)
        while True:
            try:
                messages.append(sock.recv(4096).decode())
            except BlockingIOError:
                break
    statuses = [m for m in messages if m.startswith("STATUS=engines: tiny")]
    assert any("tiny build" in m for m in statuses) and any("tiny done 100%" in m for m in statuses)
    assert all("EXTEND_TIMEOUT_USEC=300000000" in m for m in statuses)
    assert messages[-1] == "STATUS=engines: 1 ready"


def test_bad_profile_exits_2(env: EngineEnv) -> None:
    env.profile_path.write_text("model: tiny\nonnx: tiny.onnx\nbatch: {min: 3, opt: 2, max: 1}\n")
    result = _cli(env)
    assert result.returncode == 2
    assert "error:" in result.stderr and "batch" in result.stderr and "min <= opt <= max" in result.stderr


def test_bad_onnx_exits_1_naming_the_phase(env: EngineEnv) -> None:
    (env.models / "tiny.onnx").write_bytes(b"\x08\x07garbage")
    result = _cli(env)
    assert result.returncode == 1
    assert "tiny: parse failed:" in result.stderr


def test_unknown_model_exits_2(env: EngineEnv) -> None:
    result = _cli(env, "--model", "nope")
    assert result.returncode == 2 and "no engine profile for nope" in result.stderr


def test_repository_flag_materializes_the_triton_repository(env: EngineEnv, tmp_path: Path) -> None:
    """`--repository DIR` writes preprocess -> detector -> postprocess and the ensemble, the detector linked to the
    cached engine; a second run (a cache hit) writes it again."""
    make_onnx(env.models / "yolov3-tiny.onnx", pooled=False)  # one input, one output: usable as the detector
    write_profile(env.engines, model="yolov3-tiny")  # pre/post-processing: repository/profiles/yolov3-tiny.yaml
    repo = tmp_path / "repo"
    for cache_hit in (False, True):
        result = _cli(env, "--model", "yolov3-tiny", "--repository", str(repo), "--json")
        assert result.returncode == 0, result.stderr
        [engine] = json.loads(result.stdout)["engines"]
        assert engine["cache_hit"] is cache_hit
        assert sorted(p.name for p in repo.iterdir()) == ["detect", "detector", "postprocess", "preprocess"]
        assert (repo / "detector" / "1" / "model.onnx").resolve() == Path(engine["engine_path"]).resolve()
        detector = (repo / "detector" / "config.pbtxt").read_text()
        assert re.search(r"^max_batch_size: 4\b", detector, re.M), detector  # capped at the engine's batch.max
        assert 'name: "detect"' in (repo / "detect" / "config.pbtxt").read_text()


def test_repository_flag_with_an_unusable_detector_exits_1_and_keeps_the_engine(env: EngineEnv,
                                                                                tmp_path: Path) -> None:
    make_onnx(env.models / "yolov3-tiny.onnx")  # two outputs (scores, pooled): not a detector stage
    write_profile(env.engines, model="yolov3-tiny")
    result = _cli(env, "--model", "yolov3-tiny", "--repository", str(tmp_path / "repo"))
    assert result.returncode == 1
    assert "error: yolov3-tiny: cannot materialize the repository: " in result.stderr
    assert "exactly one input and one output" in result.stderr
    again = _cli(env, "--model", "yolov3-tiny")  # the engine itself was fine, built and installed
    assert again.returncode == 0 and "yolov3-tiny: cached;" in again.stdout


@pytest.mark.slow
@pytest.mark.usefixtures("detector_onnx")  # fails, not skips, without the detector (tests/conftest.py)
def test_the_real_detector_builds_verifies_and_hits(tmp_path: Path) -> None:
    args = ["build-engines", "--engines-dir", str(REPO / "engines"), "--models-dir", str(REPO / ".models"),
            "--state-dir", str(tmp_path / "state"), "--builder", "onnxruntime", "--model", "yolov3-tiny", "--json"]
    first = run_appliance(*args, timeout=300)
    engine = json.loads(first.stdout)["engines"][0]
    assert engine["cache_hit"] is False and engine["verification"].startswith("passed")
    # pre/post built into the engine: the letterboxed uint8 frame in, final detections out
    assert engine["in_graph"] is True
    assert engine["inputs"] == [{"name": "FRAME", "dtype": "uint8", "dims": [None, 416, 416, 3]}]
    assert [(o["name"], o["dtype"], o["dims"]) for o in engine["outputs"]] == [
        ("BOXES", "float32", [None, 100, 4]), ("SCORES", "float32", [None, 100]),
        ("CLASSES", "int32", [None, 100]), ("COUNT", "int32", [None, 1])]
    second = run_appliance(*args, timeout=300, expect=None)
    assert second.returncode == 0 and json.loads(second.stdout)["engines"][0]["cache_hit"] is True


def test_first_boot_unit_is_a_oneshot_before_the_appliance() -> None:
    text = UNIT.read_text()
    for line in ("Type=oneshot", "Before=appliance.service", "NotifyAccess=main", "StateDirectory=appliance",
                 "WantedBy=multi-user.target", "ProtectSystem=strict"):
        assert re.search(rf"^{re.escape(line)}$", text, re.M), line
    assert re.search(r"^ExecStart=\S+/appliance build-engines$", text, re.M)
    assert re.search(r"^TimeoutStartSec=\d+", text, re.M)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_first_boot_unit_verifies(tmp_path: Path) -> None:
    real_bin = str(Path(sys.executable).with_name("appliance"))
    staged = tmp_path / UNIT.name
    staged.write_text(UNIT.read_text().replace("/opt/appliance/venv/bin/appliance", real_bin))
    result = subprocess.run(["systemd-analyze", "verify", str(staged)], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60)
    problems = [line for line in result.stderr.splitlines() if "appliance" in line]
    assert result.returncode == 0 and not problems, result.stderr


def test_a_state_dir_too_small_for_the_build_is_named_and_not_restarted(env: EngineEnv, tmp_path: Path) -> None:
    """A real small filesystem: the build says how much it needs and how much is free, before it writes
    anything, and exits 2 (the unit's RestartPreventExitStatus) instead of failing later on a torn file."""
    with small_tmpfs(tmp_path / "small-state", 8 * 1024 * 1024) as state:
        result = _cli(env, "--state-dir", str(state))
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert re.search(rf"not enough space in {re.escape(str(state))}: the engine build of tiny needs about "
                         r"1\d MB, 8\.0 MB free", result.stderr), result.stderr
        assert not list(state.rglob("*.onnx"))  # nothing half-written
