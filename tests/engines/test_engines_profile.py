"""Engine build profiles: the shipped ones validate, each bad field is named in the error, the hash is
canonical (formatting does not matter, content does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.engines.profile import ProfileError, load_profile, load_profiles
from engines_helpers import REPO, write_profile


def test_shipped_profiles_validate() -> None:
    profiles = load_profiles(REPO / "engines")
    assert "yolov3-tiny" in [p.model for p in profiles]
    detector = next(p for p in profiles if p.model == "yolov3-tiny")
    assert detector.batch.min <= detector.batch.opt <= detector.batch.max
    assert set(detector.verify.tolerances) == {"fp32", "fp16", "int8"}


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"batch": {"min": 4, "opt": 2, "max": 8}}, ["batch", "min <= opt <= max"]),
        ({"tensorrt": {"precision": "fp8"}}, ["tensorrt.precision", "fp16"]),
        ({"tensorrt": {"precision": "fp32", "dla_core": 0}}, ["tensorrt", "dla_core"]),
        ({"tensorrt": {"workspace_mib": 1}}, ["tensorrt.workspace_mib"]),
        ({"tensorrt": {"worksapce_mib": 512}}, ["tensorrt.worksapce_mib", "Extra inputs"]),
        ({"onnxruntime": {"precision": "fp16"}}, ["onnxruntime.precision"]),
        ({"verify": {"low": 1.0, "high": 0.0}}, ["verify", "high"]),
        ({"verify": {"tolerances": {"fp16": {"atol": -1, "rtol": 0}}}}, ["verify.tolerances.fp16.atol"]),
        ({"inputs": {"images": {"dims": [3, 0, 8]}}}, ["inputs.images", "positive"]),
        ({"model": "bad name!"}, ["model"]),
        ({"keep": 0}, ["keep"]),
    ],
)
def test_bad_field_is_named(tmp_path: Path, fields: dict, names: list[str]) -> None:
    path = write_profile(tmp_path, **fields)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    message = str(err.value)
    assert str(path) in message
    for name in names:
        assert name in message


def test_unreadable_and_non_mapping_files(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ProfileError, match="not valid YAML"):
        load_profile(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ProfileError, match="must be a mapping"):
        load_profile(bad)


def test_missing_required_field(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("model: x\n")
    with pytest.raises(ProfileError, match="onnx: Field required"):
        load_profile(path)


def test_digest_ignores_formatting_but_not_content(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    a.write_text("model: m\nonnx: m.onnx\nbatch: {min: 1, opt: 2, max: 4}\n")
    b = tmp_path / "b.yaml"
    b.write_text("# a comment\nbatch:\n  max: 4\n  opt: 2\n  min: 1\nonnx: m.onnx\nmodel: m\n")
    assert load_profile(a).digest() == load_profile(b).digest()
    c = tmp_path / "c.yaml"
    c.write_text("model: m\nonnx: m.onnx\nbatch: {min: 1, opt: 2, max: 8}\n")
    assert load_profile(a).digest() != load_profile(c).digest()


def test_load_profiles_selects_and_rejects(tmp_path: Path) -> None:
    write_profile(tmp_path, "one")
    write_profile(tmp_path, "two")
    assert [p.model for p in load_profiles(tmp_path)] == ["one", "two"]
    assert [p.model for p in load_profiles(tmp_path, ["two"])] == ["two"]
    with pytest.raises(ProfileError, match="no engine profile for three"):
        load_profiles(tmp_path, ["three"])
    (tmp_path / "dup.yaml").write_text((tmp_path / "one.yaml").read_text())
    with pytest.raises(ProfileError, match="more than one profile"):
        load_profiles(tmp_path)
    with pytest.raises(ProfileError, match="does not exist"):
        load_profiles(tmp_path / "nowhere")
