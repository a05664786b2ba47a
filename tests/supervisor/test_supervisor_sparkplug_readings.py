"""The Sparkplug readings from the health summary (appliance.supervisor.sparkplugreadings): the node's metrics
are always there (null until known), a camera is a device while its capture lives, analytics counts become
per-zone and per-line metrics. Inputs come from the reporting functions that make the real summary."""

from __future__ import annotations

import re
from pathlib import Path

from appliance.detector.engines.manager import InstalledEngine
from appliance.sparkplug.payload import DataType as T
from appliance.supervisor import reporting
from appliance.supervisor.sparkplugreadings import readings_from_summary

ENGINE = InstalledEngine(model="yolov3-tiny", key="k" * 64, builder="onnxruntime", triton_kind="onnxruntime",
                         precision="fp32", engine_path=Path("e"), manifest_path=Path("m"), onnx_path=Path("o"),
                         cache_hit=True, build_seconds=None, verification="ok")


def summary(cameras: dict[str, dict[str, object]], analytics: dict[str, object] | None = None) -> dict[str, object]:
    service = reporting.service_readings(uptime_s=10.0, scheduler=None, recent_per_s=12.345,
                                         latencies_ms=[10.0, 20.0, 30.0], publisher=None, engine=ENGINE,
                                         engine_progress=None, ota={"active": "7", "last": {}})
    return {"ok": True, "triton_ready": True, "status": "...", "model": "yolov3-tiny:7",
            "served": {"model": "yolov3-tiny", "version": "7"}, "cameras": cameras,
            "pipeline": {"state": "serving"}, "analytics": analytics or {}, **service}


def test_node_metrics_from_the_summary() -> None:
    node = readings_from_summary(summary({})).node
    assert node["Model/Name"] == (T.String, "yolov3-tiny") and node["Model/Version"] == (T.String, "7")
    assert node["Model/OTA Active Version"] == (T.String, "7")
    assert node["Engine/State"] == (T.String, "cached") and node["Engine/Precision"] == (T.String, "fp32")
    assert node["Pipeline/State"] == (T.String, "serving") and node["Triton/Ready"] == (T.Boolean, True)
    assert node["Health/OK"] == (T.Boolean, True)
    assert node["Inference/Rate"] == (T.Double, 12.35)
    assert node["Inference/Latency p50 ms"] == (T.Double, 20.0)
    assert node["Inference/Latency p99 ms"] == (T.Double, 29.8)  # numpy's linear percentile of 10, 20, 30


def test_before_anything_started_the_node_metrics_are_the_same_names_with_null_values() -> None:
    early = reporting.service_readings(uptime_s=1.0, scheduler=None, recent_per_s=0.0, latencies_ms=[],
                                       publisher=None, engine=None, engine_progress=None, ota=None)
    summary_early = {"ok": False, "triton_ready": False, "served": None, "cameras": {}, "pipeline": None, **early}
    node = readings_from_summary(summary_early).node
    assert set(node) == set(readings_from_summary(summary({})).node)  # the NBIRTH keeps its shape
    assert node["Model/Name"] == (T.String, None) and node["Inference/Latency p50 ms"] == (T.Double, None)
    assert node["Engine/State"] == (T.String, None)


def test_cameras_are_devices_while_their_capture_lives() -> None:
    cams = {"door": {"state": "streaming", "inferred": 40, "skipped": 1, "dropped": 0, "errors": 2, "fps": 9.87,
                     "frames": 50, "reconnects": 3, "ring_drops": 0},
            "yard": {"state": None, "inferred": 0, "skipped": 0, "dropped": 0, "errors": 0},
            "dead": {"state": "error", "inferred": 5, "skipped": 0, "dropped": 0, "errors": 0},
            "off": {"state": "stopped", "inferred": 5, "skipped": 0, "dropped": 0, "errors": 0}}
    devices = readings_from_summary(summary(cams)).devices
    assert set(devices) == {"door", "yard"}
    assert devices["door"] == {"State": (T.String, "streaming"), "Capture/FPS": (T.Double, 9.87),
                               "Capture/Frames": (T.Int64, 50), "Capture/Reconnects": (T.Int64, 3),
                               "Inference/Frames": (T.Int64, 40), "Inference/Skipped": (T.Int64, 1),
                               "Inference/Dropped": (T.Int64, 0), "Inference/Errors": (T.Int64, 2)}
    assert devices["yard"]["State"] == (T.String, "starting") and devices["yard"]["Capture/FPS"] == (T.Double, None)


def test_analytics_counts_per_zone_and_line() -> None:
    cams = {"door": {"state": "streaming", "inferred": 1, "skipped": 0, "dropped": 0, "errors": 0}}
    analytics = {"door": {"active_tracks": 2, "events": 9, "events_by_type": {"enter": 9}, "last_event_seq": 9,
                          "snapshots_dropped": 0,
                          "zones": {"dock": {"current": 1, "entered": 5, "exited": 4}},
                          "lines": {"gate": {"in": 3, "out": 1}}}}
    door = readings_from_summary(summary(cams, analytics)).devices["door"]
    assert {k: v for k, v in door.items() if k.startswith("Analytics/")} == {
        "Analytics/Active Tracks": (T.Int64, 2), "Analytics/Events": (T.Int64, 9),
        "Analytics/Zones/dock/Current": (T.Int64, 1), "Analytics/Zones/dock/Entered": (T.Int64, 5),
        "Analytics/Zones/dock/Exited": (T.Int64, 4), "Analytics/Lines/gate/In": (T.Int64, 3),
        "Analytics/Lines/gate/Out": (T.Int64, 1)}


def test_docs_table_lists_every_metric_with_its_datatype() -> None:
    """docs/sparkplug.md's metrics tables say what the code sends: names (zones and lines as <zone>, <line>) and
    datatypes."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "sparkplug.md").read_text()
    rows = dict(re.findall(r"^\| `([^`]+)` \| (\w+) \|", doc, re.M))
    cams = {"door": {"state": "streaming", "inferred": 1, "skipped": 0, "dropped": 0, "errors": 0}}
    analytics = {"door": {"active_tracks": 0, "events": 0, "zones": {"<zone>": {"current": 0, "entered": 0,
                                                                              "exited": 0}},
                          "lines": {"<line>": {"in": 0, "out": 0}}}}
    readings = readings_from_summary(summary(cams, analytics))
    sent = {**readings.node, **readings.devices["door"], "bdSeq": (T.Int64, 0),
            "Node Control/Rebirth": (T.Boolean, False)}
    assert {name: datatype.name for name, (datatype, _) in sent.items()} == rows
