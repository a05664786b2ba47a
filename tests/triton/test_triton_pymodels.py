"""The Python-model path hook and the numpy<2 stub site (the stub's own interpreter is exercised by the
venv_probe model in test_triton_infer.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from appliance.triton import pymodels, stubsite


def python_model(root: Path, name: str, *, config: str = 'backend: "python"\n') -> Path:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(config)
    (root / name / "1" / "model.py").write_text("import _appliance_site\n")
    return root / name


def test_hook_goes_into_python_models_only(tmp_path: Path) -> None:
    py = python_model(tmp_path, "pre")
    onnx = tmp_path / "det"
    (onnx / "1").mkdir(parents=True)
    (onnx / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')
    (tmp_path / "ens").mkdir()
    (tmp_path / "ens" / "config.pbtxt").write_text('platform: "ensemble"\n')
    hooks = pymodels.prepare_repository(tmp_path, site_dirs=["/x/site"])
    assert hooks == [py / "_appliance_site.py", py / "1" / "_appliance_site.py"]
    assert not list(onnx.rglob("_appliance_site.py"))


def test_every_version_gets_the_hook(tmp_path: Path) -> None:
    model = python_model(tmp_path, "pre")
    (model / "2").mkdir()
    (model / "2" / "model.py").write_text("")
    (model / "notes").mkdir()
    assert pymodels.write_path_hook(model, ["/a"]) == [
        model / "_appliance_site.py", model / "1" / "_appliance_site.py", model / "2" / "_appliance_site.py"]


def test_model_without_config_but_with_model_py_counts(tmp_path: Path) -> None:
    (tmp_path / "bare" / "3").mkdir(parents=True)
    (tmp_path / "bare" / "3" / "model.py").write_text("")
    assert pymodels.is_python_model(tmp_path / "bare")


def test_hook_puts_site_dirs_in_front_and_honours_pth_files(tmp_path: Path) -> None:
    site_dir = tmp_path / "site"
    (site_dir / "extra").mkdir(parents=True)
    (site_dir / "extra" / "marker_mod.py").write_text("VALUE = 42\n")
    (site_dir / "extra.pth").write_text(str(site_dir / "extra") + "\n")
    model = python_model(tmp_path / "repo", "pre")
    _, hook = pymodels.write_path_hook(model, [str(site_dir)])
    # Run the hook in an isolated interpreter like the stub's: -I ignores PYTHONPATH and user site.
    code = ("import sys; sys.path.append(sys.argv[1]); import _appliance_site, marker_mod; "
            "print(sys.path[0], marker_mod.VALUE)")
    out = subprocess.run(["/usr/bin/python3", "-I", "-c", code, str(hook.parent)], capture_output=True, text=True,
                         check=True).stdout.split()  # fmt: skip
    assert out == [str(site_dir), "42"]


def test_writing_is_idempotent(tmp_path: Path) -> None:
    model = python_model(tmp_path, "pre")
    hook = pymodels.write_path_hook(model, ["/a"])[0]
    before = hook.stat().st_mtime_ns
    os.utime(hook, ns=(before - 10**9, before - 10**9))
    pymodels.write_path_hook(model, ["/a"])
    assert hook.stat().st_mtime_ns == before - 10**9  # unchanged content is not rewritten
    pymodels.write_path_hook(model, ["/b"])
    assert "'/b'" in hook.read_text()


def test_default_site_dirs_start_with_the_stub_site_then_the_venv() -> None:
    dirs = pymodels.default_site_dirs()
    if stubsite.needed():
        assert dirs[0] == str(stubsite.location())
    import numpy

    assert any(Path(numpy.__file__).is_relative_to(d) for d in dirs)


def test_missing_repository_or_model_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="model repository .* does not exist"):
        pymodels.prepare_repository(tmp_path / "nope", site_dirs=[])
    with pytest.raises(FileNotFoundError, match="model directory .* does not exist"):
        pymodels.write_path_hook(tmp_path / "nope", site_dirs=[])


def test_stub_site_missing_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(stubsite.StubSiteMissing) as err:
        stubsite.require({stubsite.ENV_VAR: str(tmp_path / "empty")})
    assert "-m appliance.triton.stubsite" in str(err.value)
    assert str(tmp_path / "empty") in str(err.value)


def test_stub_site_rejects_numpy_2(tmp_path: Path) -> None:
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text("")
    (tmp_path / "numpy-2.1.0.dist-info").mkdir()
    assert not stubsite.is_provisioned(tmp_path)
    (tmp_path / "numpy-2.1.0.dist-info").rename(tmp_path / "numpy-1.26.4.dist-info")
    assert stubsite.is_provisioned(tmp_path)


def test_stub_site_needed_for_the_provisioned_stub_only_with_numpy_2(tmp_path: Path) -> None:
    import numpy

    from appliance.triton.locate import locate

    real_stub = locate().python_stub
    assert stubsite.handles_numpy2(real_stub) is False  # the 2.51 stub's pybind11 only knows numpy.core
    assert stubsite.needed(real_stub) is (int(numpy.__version__.split(".")[0]) >= 2)
    newer = tmp_path / "triton_python_backend_stub"
    newer.write_bytes(b"\x7fELF...numpy._core.multiarray...")
    assert stubsite.handles_numpy2(newer)
    assert stubsite.needed(newer) is False
    # A NumPy-2-capable stub gets no stub site in its hook.
    assert str(stubsite.location()) not in pymodels.default_site_dirs(newer)
