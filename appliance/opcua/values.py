"""What each variable of the address space shows, as plain functions of the appliance's readings: the health
summary (``Appliance.health_summary``), a camera's counts and its events. The keys are the variables' NodeId
strings (docs/opcua.md has the table); nothing here touches a socket, so tests drive it directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from asyncua import ua

from appliance.events import Event

# OPC 40100 VisionStateMachineType's top-level states, and their numbers in the type's state machine.
PREOPERATIONAL, HALTED, ERROR, OPERATIONAL = "Preoperational", "Halted", "Error", "Operational"
STATE_NUMBERS = {PREOPERATIONAL: 1, HALTED: 2, ERROR: 3, OPERATIONAL: 4}
# The specification's automatic transitions between them (there is none from Halted to Operational: the machine
# passes through Preoperational).
TRANSITIONS = {(PREOPERATIONAL, OPERATIONAL): "PreoperationalToOperationalAuto",
               (PREOPERATIONAL, ERROR): "PreoperationalToErrorAuto",
               (PREOPERATIONAL, HALTED): "PreoperationalToHaltedAuto",
               (OPERATIONAL, PREOPERATIONAL): "OperationalToPreoperationalAuto",
               (OPERATIONAL, ERROR): "OperationalToErrorAuto", (OPERATIONAL, HALTED): "OperationalToHaltedAuto",
               (ERROR, PREOPERATIONAL): "ErrorToPreoperationalAuto", (ERROR, HALTED): "ErrorToHaltedAuto",
               (ERROR, OPERATIONAL): "ErrorToOperationalAuto",
               (HALTED, PREOPERATIONAL): "HaltedToPreoperationalAuto"}


def state_path(current: str, target: str) -> list[str]:
    """The states to pass through from ``current`` to ``target`` along the specification's transitions."""
    if current == target:
        return []
    if (current, target) in TRANSITIONS:
        return [target]
    return [PREOPERATIONAL, target]

Value = tuple[Any, ua.VariantType]


@dataclass(frozen=True)
class CameraLayout:
    camera_id: str
    zones: tuple[str, ...]
    lines: tuple[str, ...]


def device_key(name: str) -> str:
    return f"Device.{name}"


def camera_key(camera_id: str, *names: str) -> str:
    return ".".join(("Cameras", camera_id, *names))


def vision_state(summary: Mapping[str, Any], *, started: bool, stopping: bool) -> str:
    """Halted while stopping; Preoperational until the frame path runs; Error when the pipeline is in a crash loop
    or not progressing; Operational while frames flow."""
    if stopping:
        return HALTED
    if not started:
        return PREOPERATIONAL
    pipeline = summary.get("pipeline") or {}
    if pipeline.get("state") == "crash_loop" or not summary.get("ok"):
        return ERROR
    return OPERATIONAL


def _text(value: Any) -> Value:
    return ("" if value is None else str(value)), ua.VariantType.String


def _double(value: Any) -> Value:
    return (0.0 if value is None else float(value)), ua.VariantType.Double


def _get(section: Any, key: str) -> Any:
    return section.get(key) if isinstance(section, Mapping) else None


def device_values(summary: Mapping[str, Any]) -> dict[str, Value]:
    served, engine, ota = summary.get("served"), summary.get("engine"), summary.get("ota")
    inference = summary.get("inference")
    latency = _get(inference, "latency_ms")
    ota_state = _get(ota, "state") or ("active" if _get(ota, "active") else "base")
    return {
        device_key("SoftwareVersion"): _text(summary.get("version")),
        device_key("Model"): _text(_get(served, "model")),
        device_key("ModelVersion"): _text(_get(served, "version")),
        device_key("Engine"): _text(_get(engine, "builder")),
        device_key("EnginePrecision"): _text(_get(engine, "precision")),
        device_key("OtaState"): _text(ota_state),
        device_key("Healthy"): (bool(summary.get("ok")), ua.VariantType.Boolean),
        device_key("InferenceRate"): _double(_get(inference, "per_s")),
        device_key("LatencyP50Ms"): _double(_get(latency, "p50")),
        device_key("LatencyP99Ms"): _double(_get(latency, "p99")),
    }


def camera_values(camera_id: str, camera: Mapping[str, Any] | None) -> dict[str, Value]:
    camera = camera or {}
    return {camera_key(camera_id, "State"): _text(camera.get("state") or "starting"),
            camera_key(camera_id, "Fps"): _double(camera.get("fps"))}


def count_values(camera: CameraLayout, active_tracks: int,
                 counts: Mapping[str, Mapping[str, Mapping[str, int]]]) -> dict[str, Value]:
    """The camera's counters as UInt64 (only the zones and lines of the layout: the address space is fixed)."""
    out: dict[str, Value] = {camera_key(camera.camera_id, "ActiveTracks"): (active_tracks, ua.VariantType.UInt64)}
    for zone in camera.zones:
        zone_counts = (counts.get("zones") or {}).get(zone) or {}
        for name in ("current", "entered", "exited"):
            key = camera_key(camera.camera_id, "Zones", zone, name.capitalize())
            out[key] = (max(0, int(zone_counts.get(name, 0))), ua.VariantType.UInt64)
    for line in camera.lines:
        line_counts = (counts.get("lines") or {}).get(line) or {}
        for name in ("in", "out"):
            key = camera_key(camera.camera_id, "Lines", line, name.capitalize())
            out[key] = (max(0, int(line_counts.get(name, 0))), ua.VariantType.UInt64)
    return out


def last_event_values(event: Event, events_total: int) -> dict[str, Value]:
    def key(name: str) -> str:
        return camera_key(event.camera_id, "LastEvent", name)

    return {key("Time"): (utc(event.capture_time), ua.VariantType.DateTime),
            key("Type"): _text(event.event), key("Seq"): (event.seq, ua.VariantType.UInt64),
            key("TrackId"): (event.track_id, ua.VariantType.UInt64), key("ClassName"): _text(event.class_name),
            key("Zone"): _text(event.zone), key("Line"): _text(event.line), key("Direction"): _text(event.direction),
            camera_key(event.camera_id, "EventCount"): (events_total, ua.VariantType.UInt64)}


def utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, timezone.utc)


def latest_per_camera(events: Sequence[Event]) -> dict[str, Event]:
    latest: dict[str, Event] = {}
    for event in events:
        latest[event.camera_id] = event
    return latest
