"""check-config warns when the state dir has less free space than the engine build and the spool need, on a
real small filesystem."""

from __future__ import annotations

from pathlib import Path

from support.smalldisk import small_tmpfs

from appliance.appconfig.check import check_config

MB = 1024 * 1024


def test_check_config_warns_when_the_state_dir_cannot_hold_the_engine_build_and_the_spool(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "state", 48 * MB) as state:
        config = tmp_path / "appliance.yaml"
        config.write_text(f"""
device: {{id: dev1}}
paths:
  state_dir: {state}
cameras:
  - {{id: line1, source: {{type: images, path: {tmp_path}}}, width: 640, height: 480, fps: 4}}
mqtt:
  host: 127.0.0.1
  spool: {{max_bytes: {16 * MB}}}
""")
        report = check_config(config)
        (warning,) = [w for w in report.warnings if w.key == "paths.state_dir"]
        # the demo detector's ONNX is 35 MB: twice that and 16 MB for the build, 16 MB for the spool
        assert warning.line == 4 and warning.message.startswith(f"{state} has 48 MB free; it needs about 1"), warning
        assert "the engine build about 8" in warning.message and "the spool (up to mqtt.spool.max_bytes), less " \
            "its 0 MB now about 16 MB" in warning.message, warning.message
        config.write_text(config.read_text().replace(f"max_bytes: {16 * MB}", f"max_bytes: {1 * MB}"))
        (state / "engines" / "yolov3-tiny" / "cached").mkdir(parents=True)  # an engine cached: no build needed
        assert not [w for w in check_config(config).warnings if w.key == "paths.state_dir"]
