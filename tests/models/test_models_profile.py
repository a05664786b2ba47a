"""Model profiles: the shipped one loads; every mistake is reported with its field (and line)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from appliance.config.yamlsource import ConfigError
from appliance.detector.profile import load_profile


def test_shipped_profile_loads(profile) -> None:
    assert profile.name == "yolov3-tiny" and len(profile.classes) == 80
    assert profile.head.layout == "rows_with_objectness"
    assert profile.class_thresholds()[0] == profile.thresholds.score
    assert profile.allowed_ids() is None


def _write(tmp_path: Path, profile_path: Path, edit) -> Path:
    data = yaml.safe_load(profile_path.read_text())
    edit(data)
    out = tmp_path / "p.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


@pytest.mark.parametrize("edit,key,words", [
    (lambda d: d["input"].update(widht=416), "input.widht", "unknown key"),
    (lambda d: d["input"].update(layout="CHWN"), "input.layout", "'NCHW' or 'NHWC'"),
    (lambda d: d["input"].update(width=415), "input", "multiples of stride 32"),
    (lambda d: d["input"].update(pad_value=300), "input.pad_value", "less than or equal to 255"),
    (lambda d: d["input"].update(std=[1, 0, 1]), "input", "std values must be > 0"),
    (lambda d: d["head"].update(layout="v8"), "head.layout", "rows_with_objectness"),
    (lambda d: d["head"].pop("layout"), "head.layout", "required key is missing"),
    (lambda d: d["thresholds"].update(score=1.5), "thresholds.score", "less than or equal to 1"),
    (lambda d: d["thresholds"].update(per_class={"unicorn": 0.5}), "<root>", "unknown classes ['unicorn']"),
    (lambda d: d["thresholds"].update(per_class={"dog": 2.0}), "<root>", "within 0..1"),
    (lambda d: d["thresholds"].update(allow=["dog", "dragon"]), "<root>", "allow names unknown classes ['dragon']"),
    (lambda d: d.update(classes=[]), "classes", "at least 1 item"),
    (lambda d: d["limits"].update(max_width=0), "limits.max_width", "greater than 0"),
])
def test_mistakes_name_the_field(tmp_path, profile_path, edit, key, words) -> None:
    with pytest.raises(ConfigError) as info:
        load_profile(_write(tmp_path, profile_path, edit))
    issues = info.value.issues
    assert any(i.key == key and words in i.message for i in issues), [str(i) for i in issues]
    assert all(i.line for i in issues if i.key != "<root>")


def test_per_class_thresholds_and_allow_list(tmp_path, profile_path) -> None:
    def edit(d):
        d["thresholds"].update(per_class={"dog": 0.6}, allow=["dog", "person"])
    p = load_profile(_write(tmp_path, profile_path, edit))
    thr = p.class_thresholds()
    assert thr[p.classes.index("dog")] == 0.6 and thr[p.classes.index("cat")] == 0.25
    assert p.allowed_ids() == [0, 16]
