"""The materializer: what it writes for each detector kind, and its errors. (Serving it: test_models_triton.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from appliance.detector.repository.materialize import DetectorSource, MaterializeError, RepositoryOptions, materialize

NO_HOOK = RepositoryOptions(prepare_python_models=False)


@pytest.fixture
def fake_onnx(tmp_path: Path) -> Path:
    path = tmp_path / "det.onnx"
    path.write_bytes(b"onnx bytes are not read by the materializer")
    return path


def test_onnxruntime_detector_layout(tmp_path, profile, fake_onnx) -> None:
    repo = materialize(profile, DetectorSource(kind="onnxruntime", path=fake_onnx), tmp_path / "repo",
                       RepositoryOptions(max_batch_size=4, queue_delay_us=500))
    assert repo.models == ["preprocess", "detector", "postprocess", "detect"]
    det = repo.path / "detector"
    assert (det / "1" / "model.onnx").resolve() == fake_onnx.resolve()
    config = (det / "config.pbtxt").read_text()
    assert 'backend: "python"' in config and "max_batch_size: 4" in config
    assert "dims: [ 3, 416, 416 ]" in config and "max_queue_delay_microseconds: 500" in config
    assert (det / "1" / "model.py").read_text().startswith('"""Triton Python model')
    for stage in ("preprocess", "postprocess"):
        saved = json.loads((repo.path / stage / "profile.json").read_text())
        assert saved["name"] == "yolov3-tiny" and len(saved["classes"]) == 80
        assert "import _appliance_site" in (repo.path / stage / "1" / "model.py").read_text()
    assert "dims: [ 1, 3, 416, 416 ]" in (repo.path / "preprocess" / "config.pbtxt").read_text()
    ensemble = (repo.path / "detect" / "config.pbtxt").read_text()
    assert 'key: "INPUT" value: "detector_input"' in ensemble and "${" not in ensemble
    for name in repo.models:
        assert "version_policy: { specific: { versions: [ 1 ] } }" in (repo.path / name / "config.pbtxt").read_text()


def test_python_models_get_the_path_hook(tmp_path, profile, fake_onnx) -> None:
    repo = materialize(profile, DetectorSource(kind="onnxruntime", path=fake_onnx), tmp_path / "repo")
    for name in ("preprocess", "detector", "postprocess"):
        assert (repo.path / name / "_appliance_site.py").is_file()
    assert not (repo.path / "detect" / "_appliance_site.py").exists()


def test_tensorrt_plan_detector_uses_the_engine_bindings(tmp_path, profile) -> None:
    plan = tmp_path / "det.plan"
    plan.write_bytes(b"engine")
    repo = materialize(profile, DetectorSource(kind="tensorrt_plan", path=plan, input_name="images",
                                               output_name="output0", output_dims=[2535, 85]),
                       tmp_path / "repo", RepositoryOptions(prefix="cam_", link="copy"))
    det = repo.path / "cam_detector"
    config = (det / "config.pbtxt").read_text()
    assert 'platform: "tensorrt_plan"' in config and "KIND_GPU" in config
    assert 'name: "images"' in config and 'name: "output0" data_type: TYPE_FP32 dims: [ 2535, 85 ]' in config
    assert (det / "1" / "model.plan").read_bytes() == b"engine" and not (det / "1" / "model.plan").is_symlink()
    assert not (det / "1" / "model.py").exists() and not (det / "_appliance_site.py").exists()
    ensemble = (repo.path / "cam_detect" / "config.pbtxt").read_text()
    assert 'model_name: "cam_detector"' in ensemble
    assert 'key: "images" value: "detector_input"' in ensemble and 'key: "output0" value: "raw_head"' in ensemble


def test_rewriting_replaces_own_models_and_keeps_others(tmp_path, profile, fake_onnx) -> None:
    dest = tmp_path / "repo"
    (dest / "someone_else" / "1").mkdir(parents=True)
    materialize(profile, DetectorSource(kind="onnxruntime", path=fake_onnx), dest, NO_HOOK)
    (dest / "preprocess" / "stale.txt").write_text("from an older version")
    materialize(profile, DetectorSource(kind="onnxruntime", path=fake_onnx), dest,
                NO_HOOK.model_copy(update={"max_batch_size": 2}))
    assert not (dest / "preprocess" / "stale.txt").exists()
    assert "max_batch_size: 2" in (dest / "detector" / "config.pbtxt").read_text()
    assert (dest / "someone_else" / "1").is_dir()
    assert sorted(p.name for p in dest.iterdir()) == ["detect", "detector", "postprocess", "preprocess",
                                                      "someone_else"]


def test_missing_detector_file_is_named(tmp_path, profile) -> None:
    with pytest.raises(MaterializeError, match=r"detector.path: .*nope.onnx is not a file"):
        materialize(profile, DetectorSource(kind="onnxruntime", path=tmp_path / "nope.onnx"), tmp_path / "repo")


def test_unfilled_template_placeholder_is_an_error(tmp_path, profile, repo_root, fake_onnx) -> None:
    templates = tmp_path / "templates"
    shutil.copytree(repo_root / "repository", templates, ignore=shutil.ignore_patterns("profiles"))
    cfg = templates / "preprocess" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "\n# ${no_such_value}\n")
    with pytest.raises(MaterializeError, match="placeholder 'no_such_value' has no value"):
        materialize(profile, DetectorSource(kind="onnxruntime", path=fake_onnx), tmp_path / "repo", NO_HOOK,
                    templates=templates)


@pytest.mark.parametrize("cls,data,field", [
    (DetectorSource, {"kind": "tflite", "path": "x"}, "kind"),
    (DetectorSource, {"kind": "onnxruntime", "path": "x", "batch": 4}, "batch"),
    (DetectorSource, {"kind": "tensorrt_plan", "path": "x", "output_dims": [85]}, "output_dims"),
    (RepositoryOptions, {"max_batch_size": 0}, "max_batch_size"),
    (RepositoryOptions, {"prefix": "a/b"}, "prefix"),
    (RepositoryOptions, {"link": "hardlink"}, "link"),
])
def test_options_are_validated_naming_the_field(cls, data, field) -> None:
    with pytest.raises(ValidationError) as info:
        cls.model_validate(data)
    assert any(field in map(str, e["loc"]) for e in info.value.errors())
