"""check-config refuses what `run` refuses, every problem in one pass where the file parses: a trusted key that
is a private key, or missing, beside the frame's geometry; a schema fault beside another camera's geometry."""

from __future__ import annotations

from pathlib import Path

from appliance.appconfig.check import check_config
from appliance.ota.signing import generate_keypair


def test_a_private_key_among_the_trusted_keys_is_a_problem(tmp_path: Path) -> None:
    generate_keypair(tmp_path / "ota.key", tmp_path / "ota.pub")
    path = tmp_path / "a.yaml"
    path.write_text(f"""device: {{id: a}}
mqtt: {{host: localhost}}
paths: {{state_dir: {tmp_path / 'state'}}}
cameras:
  - id: door
    width: 640
    height: 480
    source: {{type: file, path: {tmp_path / 'video.mp4'}}}
    analytics:
      zones: [{{name: far, points: [[0, 0], [700, 0], [600, 100]]}}]
ota:
  trusted_keys:
    - {tmp_path / 'ota.pub'}
    - {tmp_path / 'ota.key'}
    - {tmp_path / 'gone.pub'}
""")
    report = check_config(path)
    found = {(i.line, i.key): i.message for i in report.issues}
    assert set(found) == {(10, "cameras.0.analytics.zones.0.points.1"), (14, "ota.trusted_keys.1"),
                          (15, "ota.trusted_keys.2")}, found
    assert "ota.key: not" in found[(14, "ota.trusted_keys.1")] and "public" in found[(14, "ota.trusted_keys.1")]
    assert "does not exist" in found[(15, "ota.trusted_keys.2")]


def test_a_schema_fault_and_a_cameras_geometry_come_in_one_pass(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("""device: {id: a}
mqtt: {host: localhost, prot: 1883}
cameras:
  - id: door
    width: 640
    height: 480
    source: {type: file, path: /tmp/video.mp4}
    analytics:
      zones: [{name: far, points: [[0, 0], [700, 0], [600, 100]]}]
""")
    report = check_config(path, machine=False)
    assert [(i.line, i.key) for i in report.issues] == [(2, "mqtt.prot"), (9, "cameras.0.analytics.zones.0.points.1")]


def test_the_starting_configs_placeholder_camera_is_named(tmp_path: Path) -> None:
    """The installer's starting config (docs/examples/appliance.yaml) passes, but not silently: its camera's
    address is one reserved for documentation."""
    starter = Path(__file__).resolve().parents[2] / "docs/examples/appliance.yaml"
    report = check_config(starter, machine=True, reach=True)
    camera = [w for w in report.warnings if w.key == "cameras.0.source"]
    assert len(camera) == 1 and "192.0.2.10:554: an address reserved for documentation" in camera[0].message, \
        report.warnings
