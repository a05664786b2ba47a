"""Bad ONNX files and shape problems fail before any engine exists, with a message naming the problem."""

from __future__ import annotations

from pathlib import Path

import pytest
from engines_helpers import EngineEnv, make_onnx, write_profile

from appliance.detector.engines.manager import EngineBuildError
from appliance.detector.engines.onnxinfo import OnnxModelError, inspect_onnx


def _nothing_installed(env: EngineEnv) -> None:
    model_dir = env.state / "engines" / "tiny"
    assert not model_dir.exists() or list(model_dir.iterdir()) == []
    tmp = env.state / "engines" / ".tmp"
    assert not tmp.exists() or list(tmp.iterdir()) == []


@pytest.mark.parametrize("cut", [0.5, 0.9, 0.02])
def test_truncated_onnx(env: EngineEnv, cut: float) -> None:
    path = env.models / "tiny.onnx"
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(EngineBuildError) as err:
        env.manager().ensure(env.profile())
    assert err.value.phase == "parse"
    assert "truncated or corrupt" in str(err.value) or "invalid ONNX graph" in str(err.value)
    assert str(path) in str(err.value)
    _nothing_installed(env)


def test_garbage_file(tmp_path: Path) -> None:
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\xff\xfe this is not protobuf \x00\x01" * 10)
    with pytest.raises(OnnxModelError, match="truncated or corrupt"):
        inspect_onnx(path)


@pytest.mark.parametrize(("opset", "text"), [(99, "unsupported opset 99"), (5, "unsupported opset 5")])
def test_unsupported_opset(env: EngineEnv, opset: int, text: str) -> None:
    make_onnx(env.models / "tiny.onnx", opset=opset)
    with pytest.raises(EngineBuildError, match=text) as err:
        env.manager().ensure(env.profile())
    assert "re-export" in str(err.value)
    _nothing_installed(env)


def test_missing_input(env: EngineEnv) -> None:
    make_onnx(env.models / "tiny.onnx", drop_input=True)
    with pytest.raises(EngineBuildError, match="reads 'images'.*missing input") as err:
        env.manager().ensure(env.profile())
    assert err.value.phase == "parse"
    _nothing_installed(env)


def test_onnx_file_absent(env: EngineEnv) -> None:
    (env.models / "tiny.onnx").unlink()
    with pytest.raises(EngineBuildError, match="not found.*profile field 'onnx'"):
        env.manager().ensure(env.profile())


def test_dynamic_non_batch_dim_needs_the_profile_field(env: EngineEnv) -> None:
    make_onnx(env.models / "tiny.onnx", height="H")
    with pytest.raises(EngineBuildError, match=r"dim 2 is dynamic.*inputs\.images\.dims"):
        env.manager().ensure(env.profile())
    write_profile(env.engines, inputs={"images": {"dims": [3, 16, 8]}})
    built = env.manager().ensure(env.profile())
    assert built.verification.startswith("passed")


def test_profile_dims_contradicting_the_onnx(env: EngineEnv) -> None:
    write_profile(env.engines, inputs={"images": {"dims": [3, 16, 8]}})
    with pytest.raises(EngineBuildError, match=r"inputs\.images\.dims\[1\]=16 contradicts the ONNX's static dim 8"):
        env.manager().ensure(env.profile())


def test_static_batch_outside_the_profile_range(env: EngineEnv) -> None:
    make_onnx(env.models / "tiny.onnx", batch=1)
    with pytest.raises(EngineBuildError, match="static batch of 1 but the profile asks for batch 2"):
        env.manager().ensure(env.profile())
    write_profile(env.engines, batch={"min": 1, "opt": 1, "max": 1})
    assert env.manager().ensure(env.profile()).verification.startswith("passed")
