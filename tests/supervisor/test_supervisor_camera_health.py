"""A camera's capture counters reach the operator: a real capture process reads a folder where two of three images
are corrupt; its decode errors, reconnects and frames show up in /metrics (Prometheus) and in the health summary that
`appliance status` and the MQTT health message are built from. The appliance's capture step runs here without
Triton: the scheduler only holds the ring readers (the summary reads each camera through its slot) and is never
started, so no frame is inferred."""

from __future__ import annotations

import shutil
from pathlib import Path

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.wait import wait_until

from appliance.appconfig.app import AppConfig
from appliance.health.metrics import ApplianceMetrics
from appliance.mqtt.schema import load_schema
from appliance.pipeline.scheduler import Scheduler
from appliance.supervisor import reporting
from appliance.supervisor.cameras import set_up_capture
from appliance.supervisor.children import ChildSupervisor

IMAGE = Path("/usr/share/darknet/data/dog.jpg")


@pytest.mark.usefixtures("darknet_images")  # fails, not skips, without the images (tests/conftest.py)
def test_decode_errors_reconnects_and_frames_are_exported(tmp_path: Path, shm_root: Path) -> None:
    folder = tmp_path / "camera"
    folder.mkdir()
    shutil.copy(IMAGE, folder / "a.jpg")  # read in name order: one frame, then two bad reads in a row
    for name in ("b1.jpg", "b2.jpg"):
        (folder / name).write_bytes(b"\xff\xd8 not a jpeg at all")
    config = AppConfig.model_validate({
        "device": {"id": "camhealth"}, "mqtt": {"host": "127.0.0.1"}, "health": {"enabled": False},
        "paths": {"state_dir": str(tmp_path / "state"), "shm_root": str(shm_root)},
        "cameras": [{"id": "c1", "source": {"type": "images", "path": str(folder)}, "width": 768, "height": 576,
                     "resize": True, "fps": 20, "max_decode_errors": 2,
                     "backoff": {"initial_s": 0.1, "max_s": 0.2}}]})
    metrics, children, errors = ApplianceMetrics(), ChildSupervisor(), []
    capture = set_up_capture(config.cameras, shm_root, children, step=lambda what: None)
    scheduler = Scheduler(lambda *a: None, lambda *a: None)  # never started: it only reads the slots' counts
    try:
        children.start_all()
        capture.open_readers(config.cameras, scheduler, errors.append)
        assert errors == []

        def readings_after_a_reconnect() -> dict:
            for cam in capture.cameras.values():  # as each tick of the Appliance does
                cam.refresh(metrics, None)
            summary = reporting.health_summary(capture.cameras, scheduler, None, None, None, progressing=True,
                                               status="")
            readings = summary["cameras"].get("c1", {})
            return readings if readings.get("reconnects", 0) >= 1 and readings.get("frames", 0) >= 1 else {}

        readings = wait_until(readings_after_a_reconnect, 30, 0.1, "a frame and a reconnect of camera c1")
        assert readings["decode_errors"] >= 2
        samples = {s.name: s.value for family in text_string_to_metric_families(metrics.render().decode())
                   for s in family.samples if s.labels.get("camera") == "c1"}
        assert samples["appliance_camera_decode_errors_total"] >= 2
        assert samples["appliance_camera_reconnects_total"] >= 1
        assert samples["appliance_camera_frames_total"] >= 1
        assert "appliance_camera_stalls_total" in samples and "appliance_camera_ring_full_total" in samples
        # The MQTT health message carries the same readings: each is valid against its schema's camera readings.
        schema = load_schema("health")
        jsonschema.validate({"c1": readings}, {**schema["properties"]["cameras"], "$defs": schema["$defs"]})
    finally:
        children.stop_all(lambda child: child.process.stop())  # the Appliance's stop order: processes, then rings
        capture.close()
