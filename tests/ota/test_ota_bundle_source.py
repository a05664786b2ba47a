"""`appliance ota sign`'s source directory is read like every config file: bundle.yaml and the profile files it
names may use YAML merge keys, and a problem is reported as FILE:LINE: key: message, in the file it is in."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from ota_helpers import tiny_engine_profile, tiny_model_profile

from appliance.fleet.bundle import BundleSourceError, manifest_from_source

ENGINE = """\
x-verify: &verify
  samples: 0
  seed: 3
model: tiny
onnx: ignored.onnx
batch: {min: 1, opt: 1, max: 2}
verify:
  <<: *verify
  low: 0.0
"""


def _source(src: Path, tiny_onnx: Path, bundle: str, engine: str | None = None) -> Path:
    src.mkdir()
    os.symlink(tiny_onnx, src / "model.onnx")
    (src / "bundle.yaml").write_text(bundle)
    if engine is not None:
        (src / "engine.yaml").write_text(engine)
    return src


def _bundle(engine_profile: str) -> str:
    return ("model: tiny\nversion: '2'\nmin_appliance_version: 0.1.0\n"
            f"model_profile: {json.dumps(tiny_model_profile())}\nengine_profile: {engine_profile}\n")


def test_a_yaml_syntax_error_in_bundle_yaml_names_its_line(tmp_path: Path, tiny_onnx: Path) -> None:
    src = _source(tmp_path / "src", tiny_onnx, _bundle("engine.yaml") + "golden: [unclosed\n", ENGINE)
    with pytest.raises(BundleSourceError) as err:
        manifest_from_source(src)
    assert str(err.value).startswith(f"{src / 'bundle.yaml'}:7: <root>: invalid YAML: "), err.value


def test_a_bad_value_merged_into_the_engine_profile_file_names_that_file_and_line(tmp_path: Path,
                                                                                  tiny_onnx: Path) -> None:
    src = _source(tmp_path / "src", tiny_onnx, _bundle("engine.yaml"), ENGINE)
    with pytest.raises(BundleSourceError) as err:
        manifest_from_source(src)
    assert str(err.value) == (f"{src / 'engine.yaml'}:2: engine_profile.verify.samples: "
                              "Input should be greater than or equal to 1"), err.value


def test_a_bad_inline_value_names_its_line_in_bundle_yaml(tmp_path: Path, tiny_onnx: Path) -> None:
    inline = json.dumps({**tiny_engine_profile(), "keep": 0})
    src = _source(tmp_path / "src", tiny_onnx, _bundle(inline))
    with pytest.raises(BundleSourceError) as err:
        manifest_from_source(src)
    assert str(err.value) == (f"{src / 'bundle.yaml'}:5: engine_profile.keep: "
                              "Input should be greater than or equal to 1"), err.value


def test_merge_keys_in_a_profile_file_give_the_same_manifest_as_the_mapping_written_out(
        tmp_path: Path, tiny_onnx: Path) -> None:
    merged = _source(tmp_path / "merged", tiny_onnx, _bundle("engine.yaml"), ENGINE.replace("samples: 0",
                                                                                            "samples: 2"))
    plain = {"model": "tiny", "onnx": "ignored.onnx", "batch": {"min": 1, "opt": 1, "max": 2},
             "verify": {"samples": 2, "seed": 3, "low": 0.0}}
    written = _source(tmp_path / "plain", tiny_onnx, _bundle("engine.yaml"), yaml.safe_dump(plain))
    a, b = manifest_from_source(merged), manifest_from_source(written)
    assert a.engine_profile.verify.samples == 2 and a.engine_profile.verify.seed == 3
    assert a.model_dump(mode="json") == b.model_dump(mode="json")


def test_a_duplicate_key_in_bundle_yaml_is_an_error(tmp_path: Path, tiny_onnx: Path) -> None:
    src = _source(tmp_path / "src", tiny_onnx, _bundle("engine.yaml") + "version: '3'\n", ENGINE)
    with pytest.raises(BundleSourceError, match=f"{src / 'bundle.yaml'}:6: version: "):
        manifest_from_source(src)
