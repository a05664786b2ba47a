"""Engine build profiles: the shipped ones validate, each bad field is named in the error with its FILE:LINE, merge
keys work, the hash is canonical (formatting does not matter, content does)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from engines_helpers import REPO, write_profile

from appliance.detector.buildprofile import ProfileError, load_profile, load_profiles


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
        ({"tensorrt": {"worksapce_mib": 512}}, ["tensorrt.worksapce_mib", "unknown key"]),
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
    assert re.match(rf"{re.escape(str(path))}:\d+: ", message), message  # FILE:LINE: first
    for name in names:
        assert name in message


def test_unreadable_and_non_mapping_files(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ProfileError, match="invalid YAML"):
        load_profile(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ProfileError, match="must be a mapping"):
        load_profile(bad)


def test_missing_required_field(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("model: x\n")
    with pytest.raises(ProfileError, match="onnx: required key is missing"):
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


MERGED = """\
x-trt: &trt
  precision: fp16
  workspace_mib: 1
model: tiny
onnx: tiny.onnx
tensorrt:
  <<: *trt
  timing_cache: false
"""


def test_a_yaml_syntax_error_names_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text("model: tiny\nonnx: tiny.onnx\nbatch: {min: 1, opt: 2\nkeep: 3\n")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(err.value).startswith(f"{path}:4: <root>: invalid YAML: "), err.value  # PyYAML's mark: line 4


def test_a_bad_value_inside_a_merged_mapping_names_the_line_it_is_written_on(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(MERGED)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(err.value) == f"{path}:3: tensorrt.workspace_mib: Input should be greater than or equal to 16 (got 1)"
    assert [(i.line, i.key) for i in err.value.issues] == [(3, "tensorrt.workspace_mib")]


def test_merge_keys_and_anchor_only_keys_work_in_a_valid_profile(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(MERGED.replace("workspace_mib: 1", "workspace_mib: 512"))
    profile = load_profile(path)
    assert (profile.tensorrt.precision, profile.tensorrt.workspace_mib, profile.tensorrt.timing_cache) == (
        "fp16", 512, False)
    plain = tmp_path / "plain" / "tiny.yaml"
    plain.parent.mkdir()
    plain.write_text("model: tiny\nonnx: tiny.onnx\n"
                     "tensorrt: {precision: fp16, workspace_mib: 512, timing_cache: false}\n")
    assert load_profile(plain).digest() == profile.digest()  # the anchors leave no trace in the hash


def test_a_duplicate_key_is_an_error_not_the_last_one_silently(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text("model: tiny\nonnx: tiny.onnx\nkeep: 2\nkeep: 5\n")
    with pytest.raises(ProfileError, match=f"{path}:4: keep: "):
        load_profile(path)
