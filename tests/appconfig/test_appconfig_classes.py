"""A class filter entry the served model does not know is a warning, never a refused config: check-config
names the entry, its line and the model, says it is inactive, and the config is OK. Which model is served on a
device (the active OTA version in the state directory) is tested with a real OTA bundle in
tests/models/test_models_own_model.py."""

from __future__ import annotations

from pathlib import Path

from appliance.appconfig.check import check_config, report_dict

CONFIG = """device: {id: a}
mqtt: {host: localhost}
cameras:
  - id: door
    width: 640
    height: 480
    source: {type: file, path: /tmp/video.mp4}
    analytics:
      classes: {person: 0.4, forklift: 0.5}
      zones:
        - {name: far, points: [[0, 0], [700, 0], [700, 100]]}
"""


def test_an_unknown_class_is_a_warning_and_the_other_problems_still_count(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(CONFIG)
    report = check_config(path, machine=False)
    assert [(i.line, i.key) for i in report.issues] == [(11, "cameras.0.analytics.zones.0.points.1"),
                                                        (11, "cameras.0.analytics.zones.0.points.2")]
    assert [(i.line, i.key) for i in report.warnings] == [(9, "cameras.0.analytics.classes.forklift")]
    warning = report.warnings[0].message
    assert "unknown class 'forklift'" in warning and "the base model yolov3-tiny" in warning
    assert "inactive" in warning and "person" in warning  # the model's classes are listed
    path.write_text(CONFIG.replace("700", "600"))
    good = check_config(path, machine=False)
    assert good.ok and len(good.warnings) == 1
    assert report_dict(good)["warnings"][0]["key"] == "cameras.0.analytics.classes.forklift"  # type: ignore[index]
