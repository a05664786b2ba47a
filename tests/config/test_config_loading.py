"""Config files: every problem reported with file, line, key path and reason."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

import pytest
from pydantic import Field, field_validator

from appliance.config import StrictModel
from appliance.config.validate import load_config
from appliance.config.yamlsource import ConfigError, parse_yaml


class _Rtsp(StrictModel):
    type: Literal["rtsp"]
    url: str


class _File(StrictModel):
    type: Literal["file"]
    path: str


class _Camera(StrictModel):
    id: str
    fps: float = Field(10, gt=0, le=120)
    source: Annotated[Union[_Rtsp, _File], Field(discriminator="type")]

    @field_validator("id")
    @classmethod
    def _id_is_topic_safe(cls, v: str) -> str:
        if "/" in v:
            raise ValueError("camera id must not contain '/' (it becomes an MQTT topic level)")
        return v


class _Config(StrictModel):
    cameras: list[_Camera]
    qos: Literal[0, 1, 2] = 1


def _errors(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> list[str]:
    path = tmp_path / "appliance.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, _Config, environ or {})
    return [str(i).replace(str(path), "F") for i in info.value.issues]


def test_valid_file_loads_with_env_substitution(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("cameras:\n  - id: line1\n    source: {type: rtsp, url: 'rtsp://${CAM_HOST}/s'}\n")
    config = load_config(path, _Config, {"CAM_HOST": "10.0.0.5"})
    assert config.cameras[0].source.url == "rtsp://10.0.0.5/s"
    assert config.qos == 1


def test_unknown_key_is_reported_at_its_line(tmp_path: Path) -> None:
    errors = _errors(tmp_path, "cameras:\n  - id: a\n    fsp: 5\n    source: {type: file, path: x.mp4}\n")
    assert errors == ["F:3: cameras.0.fsp: unknown key (not allowed here; check the spelling against "
                      "`appliance check-config --schema`)"]


def test_out_of_range_and_bad_choice_name_key_line_and_value(tmp_path: Path) -> None:
    text = "qos: 3\ncameras:\n  - id: a\n    fps: 0\n    source: {type: file, path: x.mp4}\n"
    errors = _errors(tmp_path, text)
    assert len(errors) == 2
    assert errors[0].startswith("F:1: qos: ") and "(got 3)" in errors[0]
    assert errors[1].startswith("F:4: cameras.0.fps: ") and "greater than 0" in errors[1]


def test_union_member_error_points_at_the_key_not_the_tag(tmp_path: Path) -> None:
    errors = _errors(tmp_path, "cameras:\n  - id: a\n    source:\n      type: rtsp\n      uri: rtsp://x\n")
    assert errors[0] == "F:3: cameras.0.source.url: required key is missing"
    assert errors[1].startswith("F:5: cameras.0.source.uri: unknown key")


def test_unknown_source_type_is_named(tmp_path: Path) -> None:
    errors = _errors(tmp_path, "cameras:\n  - id: a\n    source: {type: gige, url: x}\n")
    assert len(errors) == 1 and errors[0].startswith("F:3: cameras.0.source")
    assert "'rtsp', 'file'" in errors[0] and "gige" in errors[0]


def test_cross_field_validator_message_reaches_the_operator(tmp_path: Path) -> None:
    errors = _errors(tmp_path, "cameras:\n  - id: a/b\n    source: {type: file, path: x.mp4}\n")
    assert errors == ["F:2: cameras.0.id: camera id must not contain '/' (it becomes an MQTT topic level)"]


def test_duplicate_keys_are_rejected_not_silently_overwritten() -> None:
    with pytest.raises(ConfigError) as info:
        parse_yaml("qos: 1\ncameras: []\nqos: 0\n", "F", {})
    assert str(info.value) == "F:3: qos: duplicate key (first defined on line 1)"


def test_unset_environment_variable_is_an_error_with_a_default_form() -> None:
    with pytest.raises(ConfigError) as info:
        parse_yaml("a: ${MQTT_PASSWORD}\nb: ${X:-fallback}\n", "F", {})
    assert str(info.value) == "F:1: a: environment variable MQTT_PASSWORD is not set (referenced as ${MQTT_PASSWORD})"
    assert parse_yaml("b: ${X:-fallback}\n", "F", {}).data == {"b": "fallback"}


def test_yaml_syntax_error_has_a_line(tmp_path: Path) -> None:
    errors = _errors(tmp_path, "cameras:\n  - id: a\n   source: [\n")
    assert len(errors) == 1 and errors[0].startswith("F:") and "invalid YAML" in errors[0]


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml", _Config, {})


# -- YAML merge keys (<<: *defaults) and everything else the loader cannot take --------------------------------
_MERGED = """\
x-defaults: &defaults
  fps: 15
  source: {type: rtsp, url: 'rtsp://cam/1'}
x-file: &file
  source: {type: file, path: /tmp/v.mp4}
cameras:
  - <<: *defaults
    id: a
  - <<: *defaults
    id: b
    fps: 30
  - <<: [*file, *defaults]
    id: c
"""


def test_merge_keys_fill_in_the_anchor_and_the_mapping_own_keys_win(tmp_path: Path) -> None:
    path = tmp_path / "merged.yaml"
    path.write_text(_MERGED.replace("x-defaults", "x_defaults").replace("x-file", "x_file")
                    .replace("cameras:", "qos: 2\ncameras:"))

    class _WithAnchors(_Config):
        x_defaults: dict
        x_file: dict

    config = load_config(path, _WithAnchors, {})
    assert [(c.id, c.fps, c.source.type) for c in config.cameras] == [("a", 15, "rtsp"), ("b", 30, "rtsp"),
                                                                      ("c", 15, "file")]  # the first source wins


def test_an_error_inside_a_merged_mapping_points_at_the_line_in_the_anchor(tmp_path: Path) -> None:
    text = ("cameras:\n  - &d\n    id: a\n    fps: 500\n    source: {type: rtsp, url: 'rtsp://h/1'}\n"
            "  - <<: *d\n    id: b\n")
    doc = parse_yaml(text, "F", {})
    assert doc.line_of(("cameras", 1, "fps")) == 4 and doc.line_of(("cameras", 1, "id")) == 7
    assert doc.line_of(("cameras", 1, "source", "url")) == 5
    assert _errors(tmp_path, text) == ["F:4: cameras.0.fps: Input should be less than or equal to 120 (got 500)",
                                       "F:4: cameras.1.fps: Input should be less than or equal to 120 (got 500)"]


@pytest.mark.parametrize("text, expected", [
    ("cameras: []\na: {<<: 5}\n", "F:2: a.<<: a merge key (<<) takes a mapping, an alias of one (<<: *defaults) "
                                  "or a list of them ([*a, *b])"),
    ("cameras: []\na: !foo 1\n", "F:2: a: cannot read this value: could not determine a constructor for the tag "
                                 "'!foo'"),
    ("cameras: []\na: !!python/name:os.system x\n", "F:2: a: cannot read this value: could not determine a "
                                                    "constructor for the tag "
                                                    "'tag:yaml.org,2002:python/name:os.system'"),
    ("cameras: []\na: !!set {x: null}\n", "F:2: a: YAML tag 'tag:yaml.org,2002:set' is not supported here "
                                         "(write a plain mapping or list)"),
    ("cameras: []\na: &x [*x]\n", "F:2: a.0: an alias refers to a mapping or list that contains it (a cycle)"),
    ("cameras: []\na: &x {<<: *x}\n", "F:2: a.<<: a merge key (<<) refers to the mapping it is in"),
    ("cameras: []\na: \x07\n", "F:2: <root>: invalid YAML: special characters are not allowed (character #x0007)"),
    ("cameras: []\na: " + "[" * 3000 + "\n", "F: <root>: invalid YAML: nested too deeply"),
])
def test_what_the_loader_cannot_take_is_a_config_error_with_its_line(tmp_path: Path, text: str,
                                                                      expected: str) -> None:
    assert _errors(tmp_path, text) == [expected]


def test_a_file_that_is_not_utf8_is_a_config_error_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("cameras: []\nname: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ConfigError) as info:
        load_config(path, _Config, {})
    assert [str(i) for i in info.value.issues] == [f"{path}:2: <root>: invalid YAML: not UTF-8 text (byte 0xe9)"]


def test_aliases_that_expand_without_bound_are_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 6)]
    errors = _errors(tmp_path, "cameras: []\n" + "\n".join(lines) + "\n")
    assert len(errors) == 1 and "aliases expand to more than 100000 values" in errors[0], errors
