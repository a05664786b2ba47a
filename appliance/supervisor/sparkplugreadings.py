"""The Sparkplug edge node's readings, taken from the health summary (``Appliance.health_summary``): nothing is
measured here. The metric names, datatypes and meanings are the table in docs/sparkplug.md.

The node's metrics are fixed (a missing reading is a null value, so the NBIRTH never changes shape); a camera is a
device while its capture is alive: a camera in ``error`` (its capture process died or failed) or ``stopped`` is
left out, which the edge node publishes as its DDEATH, and born again once it is back.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from appliance.sparkplug.payload import DataType, Scalar
from appliance.sparkplug.reports import Reading, Readings

DEAD_STATES = frozenset({"error", "stopped"})

# camera summary key -> (metric name, datatype)
_CAMERA: dict[str, tuple[str, DataType]] = {
    "fps": ("Capture/FPS", DataType.Double),
    "frames": ("Capture/Frames", DataType.Int64),
    "reconnects": ("Capture/Reconnects", DataType.Int64),
    "inferred": ("Inference/Frames", DataType.Int64),
    "skipped": ("Inference/Skipped", DataType.Int64),
    "dropped": ("Inference/Dropped", DataType.Int64),
    "errors": ("Inference/Errors", DataType.Int64),
}


def _get(section: Any, key: str) -> Any:
    return section.get(key) if isinstance(section, Mapping) else None


def _reading(datatype: DataType, value: Any) -> Reading:
    """A summary value as a metric; None stays null. Numbers are coerced to the datatype (the summary rounds)."""
    if value is None:
        return datatype, None
    converted: Optional[Scalar]
    if datatype is DataType.Double:
        converted = float(value)
    elif datatype is DataType.Int64:
        converted = int(value)
    elif datatype is DataType.Boolean:
        converted = bool(value)
    else:
        converted = str(value)
    return datatype, converted


def node_readings(summary: Mapping[str, Any]) -> dict[str, Reading]:
    served = summary.get("served")
    inference = summary.get("inference")
    latency = _get(inference, "latency_ms")
    return {
        "Properties/Software Version": _reading(DataType.String, summary.get("version")),
        "Health/OK": _reading(DataType.Boolean, summary.get("ok")),
        "Model/Name": _reading(DataType.String, _get(served, "model")),
        "Model/Version": _reading(DataType.String, _get(served, "version")),
        "Model/OTA Active Version": _reading(DataType.String, _get(summary.get("ota"), "active")),
        "Engine/State": _reading(DataType.String, _get(summary.get("engine"), "state")),
        "Engine/Precision": _reading(DataType.String, _get(summary.get("engine"), "precision")),
        "Pipeline/State": _reading(DataType.String, _get(summary.get("pipeline"), "state")),
        "Triton/Ready": _reading(DataType.Boolean, summary.get("triton_ready")),
        "Inference/Rate": _reading(DataType.Double, _get(inference, "per_s")),
        "Inference/Latency p50 ms": _reading(DataType.Double, _get(latency, "p50")),
        "Inference/Latency p99 ms": _reading(DataType.Double, _get(latency, "p99")),
    }


def camera_readings(camera: Mapping[str, Any], analytics: Optional[Mapping[str, Any]]) -> dict[str, Reading]:
    metrics: dict[str, Reading] = {"State": _reading(DataType.String, camera.get("state") or "starting")}
    for key, (name, datatype) in _CAMERA.items():
        metrics[name] = _reading(datatype, camera.get(key))
    if analytics is None:
        return metrics
    metrics["Analytics/Active Tracks"] = _reading(DataType.Int64, analytics.get("active_tracks"))
    metrics["Analytics/Events"] = _reading(DataType.Int64, analytics.get("events"))
    for kind, label in (("zones", "Zones"), ("lines", "Lines")):
        for name, counters in sorted((analytics.get(kind) or {}).items()):
            for counter, value in sorted(counters.items()):
                metrics[f"Analytics/{label}/{name}/{counter.capitalize()}"] = _reading(DataType.Int64, value)
    return metrics


def readings_from_summary(summary: Mapping[str, Any]) -> Readings:
    """The node's metrics and one device per live camera."""
    analytics = summary.get("analytics") or {}
    devices = {camera_id: camera_readings(camera, analytics.get(camera_id))
               for camera_id, camera in (summary.get("cameras") or {}).items()
               if camera.get("state") not in DEAD_STATES}
    return Readings(node=node_readings(summary), devices=devices)
