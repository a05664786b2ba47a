"""The locator: search order, what counts as a usable distribution, and what it says when none is."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.triton import make_dist

from appliance.commands import main as cli
from appliance.triton.locate import ENV_VAR, TritonNotFound, inspect, locate


def test_explicit_home_wins_over_everything(tmp_path: Path) -> None:
    explicit = make_dist(tmp_path / "explicit")
    env_home = make_dist(tmp_path / "env")
    dist = locate(explicit, env={ENV_VAR: str(env_home)}, system_home=make_dist(tmp_path / "sys"),
                  checkout=make_dist(tmp_path / "co"))  # fmt: skip
    assert dist.home == explicit.resolve()
    assert dist.source == "argument"


def test_environment_before_system_and_checkout(tmp_path: Path) -> None:
    env_home = make_dist(tmp_path / "env")
    dist = locate(env={ENV_VAR: str(env_home)}, system_home=make_dist(tmp_path / "sys"),
                  checkout=make_dist(tmp_path / "co"))  # fmt: skip
    assert dist.home == env_home.resolve()
    assert ENV_VAR in dist.source


def test_system_before_checkout_then_checkout(tmp_path: Path) -> None:
    system, checkout = make_dist(tmp_path / "sys"), make_dist(tmp_path / "co")
    assert locate(env={}, system_home=system, checkout=checkout).source == "system"
    assert locate(env={}, system_home=tmp_path / "absent", checkout=checkout).source == "checkout"


def test_paths_are_real_paths_through_symlinks(tmp_path: Path) -> None:
    real = make_dist(tmp_path / "real")
    (tmp_path / "link").symlink_to(real)
    dist = locate(tmp_path / "link", env={})
    assert dist.home == real.resolve()
    assert dist.library == (real / "lib" / "libtritonserver.so").resolve()
    assert dist.server_binary == (real / "bin" / "tritonserver").resolve()
    assert dist.version == "2.51.0"


def test_describe_names_every_path(tmp_path: Path) -> None:
    dist = locate(make_dist(tmp_path / "d"), env={})
    text = dist.describe()
    for path in (dist.library, dist.backend_dir, dist.python_stub, dist.server_binary):
        assert str(path) in text
    assert "2.51.0" in text and "argument" in text


def test_binary_is_optional(tmp_path: Path) -> None:
    dist = locate(make_dist(tmp_path / "d", binary=False), env={})
    assert dist.bin_dir is None and dist.server_binary is None
    assert "not shipped" in dist.describe()


def test_explicit_home_that_is_incomplete_is_reported_not_skipped(tmp_path: Path) -> None:
    broken = make_dist(tmp_path / "broken")
    (broken / "backends" / "python" / "libtriton_python.so").unlink()
    with pytest.raises(TritonNotFound) as err:
        locate(broken, env={}, system_home=make_dist(tmp_path / "sys"))
    assert str(broken / "backends" / "python" / "libtriton_python.so") in str(err.value)
    assert "Python backend is missing" in str(err.value)
    assert "provision_triton.py" in str(err.value)


def test_environment_variable_is_authoritative(tmp_path: Path) -> None:
    with pytest.raises(TritonNotFound, match="does not exist") as err:
        locate(env={ENV_VAR: str(tmp_path / "nowhere")}, system_home=make_dist(tmp_path / "sys"))
    assert ENV_VAR in str(err.value)


def test_nothing_found_lists_every_place_looked(tmp_path: Path) -> None:
    with pytest.raises(TritonNotFound) as err:
        locate(env={}, system_home=tmp_path / "opt-tritonserver", checkout=tmp_path / "dot-triton")
    assert len(err.value.problems) == 2
    assert str(tmp_path / "opt-tritonserver") in str(err.value)
    assert str(tmp_path / "dot-triton") in str(err.value)
    assert "APPLIANCE_TRITON_HOME" in str(err.value)


def test_each_missing_part_is_named(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TritonNotFound) as err:
        inspect(tmp_path / "empty", "argument")
    text = str(err.value)
    assert "server library is missing" in text
    assert "Python backend is missing" in text
    assert "Python-backend stub is missing" in text


def test_stub_must_be_executable(tmp_path: Path) -> None:
    with pytest.raises(TritonNotFound, match="not executable"):
        inspect(make_dist(tmp_path / "d", stub_mode=0o644), "argument")


def test_damaged_marker_only_loses_the_version(tmp_path: Path) -> None:
    home = make_dist(tmp_path / "d")
    (home / "PROVISIONED.json").write_text("{not json")
    assert locate(home, env={}).version is None


def test_real_checkout_distribution_is_found() -> None:
    dist = locate(env={}, system_home=Path("/nonexistent/opt/tritonserver"))
    assert dist.source == "checkout"
    assert dist.library.is_file() and dist.python_stub.is_file()


def test_cli_triton_info_reports_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["triton-info", "--triton-home", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["triton-info", "--triton-home", str(make_dist(tmp_path / "ok"))]) == 0
    assert "libtritonserver.so" in capsys.readouterr().out
