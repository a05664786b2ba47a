"""Typed messages and their JSON payloads (schemas in appliance/mqtt/schemas/, documented in docs/mqtt.md).

The dataclasses check their inputs on construction so that a bad value fails in the caller with a clear
message, not later as an unreadable payload on a PLC gateway.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal, Mapping, Optional, Sequence

from appliance.detections import Detections
from appliance.events import Event

if TYPE_CHECKING:
    from appliance.mqtt.numbering import MessageNumber
    from appliance.mqtt.shared import PublisherStats

SCHEMA_VERSION = 1
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

CameraState = Literal["starting", "streaming", "waiting", "stalled", "stopped", "error"]
CAMERA_STATES: tuple[str, ...] = ("starting", "streaming", "waiting", "stalled", "stopped", "error")
# What the frame path measures per frame, in ms: capture to submit (waiting in the ring and the scheduler),
# submit to result (the whole ensemble in Triton: its queue, preprocess, detector, postprocess), capture to result.
LATENCY_STAGES: tuple[str, ...] = ("queue", "inference", "total")
MODEL_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")


def _finite(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def epoch_ms(t: float) -> int:
    return int(round(_finite("time", t) * 1000))


def iso_utc_ms(ms: int) -> str:
    """ISO 8601 UTC with milliseconds, computed from integer ms so it always agrees with the epoch-ms field."""
    return (_EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def time_fields(t: float, name: str = "time") -> dict[str, Any]:
    ms = epoch_ms(t)
    return {name: iso_utc_ms(ms), f"{name}_ms": ms}


def encode(payload: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON; NaN/Infinity are refused (they are not JSON)."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


@dataclass(frozen=True)
class ModelInfo:
    """The served model; ``hash`` is ``sha256:<hex>`` of the detector engine file Triton loaded
    (``appliance.detector.serving.router.Route.model_hash``)."""

    name: str
    version: str
    hash: str

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("model name must not be empty")
        if not isinstance(self.version, str) or not self.version:
            raise ValueError(f"model version must be a non-empty string, got {self.version!r}")
        if not isinstance(self.hash, str) or not MODEL_HASH.match(self.hash):
            raise ValueError(f"model hash must be 'sha256:' and 64 lowercase hex digits, got {self.hash!r}")


@dataclass(frozen=True)
class DetectionsMessage:
    """Everything one frame produced. ``capture_time`` is epoch seconds (UTC) from the capture process;
    ``latency_ms`` has exactly the ``LATENCY_STAGES``. The publisher numbers it (``appliance.mqtt.numbering``)."""

    camera_id: str
    seq: int
    capture_time: float
    model: ModelInfo
    image_width: int
    image_height: int
    detections: Detections = field(default_factory=Detections.empty)
    latency_ms: Mapping[str, float] = field(default_factory=dict)
    message_id: Optional[str] = None

    def __post_init__(self) -> None:
        if isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 0:
            raise ValueError(f"seq must be an int >= 0, got {self.seq!r}")
        _finite("capture_time", self.capture_time)
        for name in ("image_width", "image_height"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be an int > 0, got {value!r}")
        if set(self.latency_ms) != set(LATENCY_STAGES):
            raise ValueError(f"latency_ms must have exactly the stages {', '.join(LATENCY_STAGES)}, "
                             f"got {sorted(self.latency_ms)}")
        for stage, ms in self.latency_ms.items():
            if _finite(f"latency_ms[{stage!r}]", ms) < 0:
                raise ValueError(f"latency_ms[{stage!r}] must be >= 0, got {ms!r}")
        if not isinstance(self.detections, Detections):
            raise ValueError(f"detections must be Detections, got {type(self.detections).__name__}")


def _clamp(v: float, hi: int) -> float:
    return 0.0 if v < 0.0 else (float(hi) if v > hi else float(v))


def _box_dicts(box: Sequence[float], width: int, height: int) -> tuple[dict[str, float], dict[str, float]]:
    # Detectors emit boxes slightly outside the frame; clamp so subscribers can trust the bounds.
    x1, y1, x2, y2 = _clamp(box[0], width), _clamp(box[1], height), _clamp(box[2], width), _clamp(box[3], height)
    pixels = {"x1": round(x1, 2), "y1": round(y1, 2), "x2": round(x2, 2), "y2": round(y2, 2)}
    norm = {"x1": round(x1 / width, 6), "y1": round(y1 / height, 6),
            "x2": round(x2 / width, 6), "y2": round(y2 / height, 6)}
    return pixels, norm


def new_message_id() -> str:
    return uuid.uuid4().hex


def detections_payload(msg: DetectionsMessage, device_id: str, message_id: str,
                       number: MessageNumber) -> dict[str, Any]:
    dets = []
    for d in msg.detections:
        pixels, norm = _box_dicts(d.box, msg.image_width, msg.image_height)
        dets.append({"class_id": d.class_id, "class_name": d.class_name, "score": round(d.score, 6),
                     "box": pixels, "box_norm": norm, "track_id": d.track_id})
    payload: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "type": "detections",
        "message_id": message_id,
        "device_id": device_id,
        "camera_id": msg.camera_id,
        "seq": msg.seq,
        "boot_id": number.boot_id,
        "message_seq": number.message_seq,
        "frames_skipped": number.frames_skipped,
    }
    payload.update(time_fields(msg.capture_time, "capture_time"))
    payload["model"] = {"name": msg.model.name, "version": msg.model.version, "hash": msg.model.hash}
    payload["image"] = {"width": msg.image_width, "height": msg.image_height}
    payload["latency_ms"] = {k: round(float(msg.latency_ms[k]), 3) for k in LATENCY_STAGES}
    payload["detections"] = dets
    return payload


def event_payload(msg: Event, device_id: str, boot_id: str) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "type": "event", "event_id": msg.event_id, "device_id": device_id,
        "camera_id": msg.camera_id, "boot_id": boot_id, "seq": msg.seq, "event": msg.event,
        "track_id": msg.track_id, "class_id": msg.class_id, "class_name": msg.class_name,
        "score": round(min(1.0, max(0.0, float(msg.score))), 6), "zone": msg.zone, "line": msg.line,
        "direction": msg.direction,
    }
    if msg.dwell_s is not None:
        payload["dwell_s"] = round(float(msg.dwell_s), 3)
    if msg.event == "exit":
        payload["track_lost"] = msg.track_lost
    payload.update(time_fields(msg.capture_time, "capture_time"))
    payload["frame_seq"] = msg.frame_seq
    payload["box"] = None if msg.box is None else _box_dicts(msg.box, msg.image_width, msg.image_height)[0]
    payload["snapshot_id"] = msg.snapshot_id
    if msg.clip is not None:
        payload["clip"] = {"url": msg.clip.url, **time_fields(msg.clip.start, "start"),
                           **time_fields(msg.clip.end, "end")}
    return payload


@dataclass(frozen=True)
class ClipMessage:
    """An event's clip once its footage is written (``complete``), or why it never will be (``failed``)."""

    event_id: str
    camera_id: str
    url: str
    status: Literal["complete", "failed"]
    start: float          # complete: the first frame's time (a keyframe); failed: the planned start
    end: float
    frames: int = 0
    reason: str = ""


def clip_payload(msg: ClipMessage, device_id: str, boot_id: str) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "type": "clip", "event_id": msg.event_id, "device_id": device_id,
            "camera_id": msg.camera_id, "boot_id": boot_id, "status": msg.status, "url": msg.url,
            **time_fields(msg.start, "start"), **time_fields(msg.end, "end"), "frames": msg.frames,
            "reason": msg.reason or None}


def snapshot_properties(snapshot_id: str, event_ids: Sequence[str], capture_time: float,
                        frame_seq: int) -> list[tuple[str, str]]:
    """MQTT 5 user properties of a retained ``<camera>/snapshot`` publish, so a subscriber can tie the JPEG to
    its events: ``snapshot_id``, one ``event_id`` per event it proves (a key may repeat), and its frame's
    ``capture_time`` / ``capture_time_ms`` (as in the event) and ``frame_seq``."""
    times = time_fields(capture_time, "capture_time")
    return [("snapshot_id", snapshot_id), *(("event_id", e) for e in event_ids),
            ("capture_time", times["capture_time"]), ("capture_time_ms", str(times["capture_time_ms"])),
            ("frame_seq", str(int(frame_seq)))]


def counts_payload(device_id: str, camera_id: str, boot_id: str, now: float, last_event_seq: int,
                   active_tracks: int, counts: Mapping[str, Mapping[str, Mapping[str, int]]]) -> dict[str, Any]:
    """``counts`` is ``appliance.analytics.events.Counts.as_dict()``: {"zones": {...}, "lines": {...}}."""
    payload: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "type": "counts", "device_id": device_id,
                               "camera_id": camera_id, "boot_id": boot_id}
    payload.update(time_fields(now))
    payload.update({"last_event_seq": last_event_seq, "active_tracks": active_tracks,
                    "zones": {k: dict(v) for k, v in counts.get("zones", {}).items()},
                    "lines": {k: dict(v) for k, v in counts.get("lines", {}).items()}})
    return payload


def device_status_payload(device_id: str, state: Literal["online", "offline"], now: Optional[float],
                          versions: Mapping[str, str], reason: Optional[str] = None,
                          group: Optional[str] = None) -> dict[str, Any]:
    """``now`` is None for the last will: it is registered at connect time, so any time in it would be wrong.
    ``group``: the device's fleet group (``ota.group``), which ``appliance ota rollout`` discovers devices by."""
    payload: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "type": "device_status", "device_id": device_id,
                               "state": state, "versions": dict(versions)}
    if group is not None:
        payload["group"] = group
    if now is not None:
        payload.update(time_fields(now))
    if reason is not None:
        payload["reason"] = reason
    return payload


@dataclass(frozen=True)
class CameraStatus:
    camera_id: str
    state: CameraState
    fps: Optional[float] = None
    detail: Optional[str] = None
    since: Optional[float] = None  # epoch seconds the camera entered this state (sent for ``waiting``)
    last_error: Optional[tuple[str, float]] = None  # this run's last capture error, epoch s first seen; kept

    def __post_init__(self) -> None:
        if self.state not in CAMERA_STATES:
            raise ValueError(f"camera state must be one of {CAMERA_STATES}, got {self.state!r}")
        if self.fps is not None and _finite("fps", self.fps) < 0:
            raise ValueError(f"fps must be >= 0, got {self.fps!r}")


def camera_status_payload(status: CameraStatus, device_id: str, now: float) -> dict[str, Any]:
    payload: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "type": "camera_status", "device_id": device_id,
                               "camera_id": status.camera_id, "state": status.state}
    payload.update(time_fields(now))
    if status.fps is not None:
        payload["fps"] = round(float(status.fps), 3)
    if status.detail is not None:
        payload["detail"] = status.detail
    if status.since is not None:
        payload.update(time_fields(status.since, "since"))
    if status.last_error:
        payload.update(last_error=status.last_error[0], **time_fields(status.last_error[1], "last_error_time"))
    return payload


def ota_status_payload(device_id: str, status: Mapping[str, Any]) -> dict[str, Any]:
    """The retained ota/status payload from ``OtaStatus.to_dict()`` (a mapping, so mqtt needs nothing from ota).
    Its ``time`` is epoch seconds; like every payload here it goes out as ISO ``time`` plus ``time_ms``."""
    fields = {k: v for k, v in status.items() if v is not None and k != "time"}
    payload: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "type": "ota_status", "device_id": device_id,
                               **fields}
    payload.update(time_fields(status["time"]))
    return payload


def engine_status_payload(device_id: str, event: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The retained engines/status payload from ``ProgressEvent.to_dict()`` (a mapping, so mqtt needs nothing from
    engines): model, phase, percent, message, elapsed_s, and ``gate`` (the detection gate's numbers) when the event
    has them."""
    fields = {k: event[k] for k in ("model", "phase", "percent", "message", "elapsed_s")}
    payload: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "type": "engine_status", "device_id": device_id,
                               **fields}
    gate = event.get("gate")
    if gate is not None:
        payload["gate"] = {k: gate[k] for k in GATE_FIELDS}
    payload.update(time_fields(now))
    return payload


def reload_status_payload(device_id: str, outcome: Mapping[str, Any]) -> dict[str, Any]:
    """The retained reload/status payload from a reload's outcome (``ReloadOutcome.as_dict()``: a mapping, so mqtt
    needs nothing from the supervisor); its time is the reload's."""
    fields = {k: outcome[k] for k in ("file", "ok", "seq", "problems", "applied", "needs_restart")}
    return {"schema_version": SCHEMA_VERSION, "type": "reload_status", "device_id": device_id, **fields,
            **time_fields(outcome["at"])}


# The detection gate's numbers on engines/status (appliance.detector.engines.gate.GateReport; schema engine_status).
GATE_FIELDS = ("passed", "recall", "precision", "mean_score_diff", "reference_detections", "candidate_detections",
               "matched", "frames", "min_recall", "min_precision", "max_score_diff")


def health_payload(device_id: str, now: float, uptime_s: float, stats: PublisherStats,
                   extra: Mapping[str, Any]) -> dict[str, Any]:
    """The health payload: the publisher's own MQTT and spool state from ``stats``, and the health provider's
    ``extra`` readings ({"cameras": {id: {name: value}}, "system": {name: value}})."""
    payload: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "type": "health", "device_id": device_id}
    payload.update(time_fields(now))
    payload["uptime_s"] = round(max(0.0, uptime_s), 3)
    mqtt: dict[str, Any] = {"state": stats.state.value, "connects": stats.connects,
                            "connect_failures": stats.connect_failures, "published": stats.published,
                            "acked": stats.acked, "rejected": stats.rejected, "inflight": stats.inflight,
                            "suppressed": stats.suppressed, "commands_refused": dict(stats.commands_refused)}
    if stats.broker:
        mqtt["broker"] = stats.broker
    if stats.last_error:
        mqtt["last_error"] = stats.last_error
    payload["mqtt"] = mqtt
    s = stats.spool
    payload["spool"] = {"backlog": s.backlog, "bytes": s.bytes, "max_bytes": s.max_bytes, "spooled": s.spooled,
                        "dropped_oldest": s.dropped_oldest, "dropped_newest": s.dropped_newest,
                        "dropped_expired": s.dropped_expired, "set_aside": s.set_aside,
                        **stats.held_readings()}
    payload["cameras"] = dict(extra.get("cameras", {}))
    payload["system"] = dict(extra.get("system", {}))
    return payload


@dataclass(frozen=True)
class Command:
    """A command received on <prefix>/<device>/command/<name>."""

    name: str
    request_id: Optional[str]
    args: Mapping[str, Any]
    topic: str


def command_reply_payload(device_id: str, command: str, request_id: Optional[str], now: float, *,
                          result: Optional[Mapping[str, Any]] = None,
                          error: Optional[tuple[str, str]] = None) -> dict[str, Any]:
    payload: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "type": "command_reply", "device_id": device_id,
                               "command": command, "request_id": request_id, "ok": error is None}
    payload.update(time_fields(now))
    if error is None:
        payload["result"] = dict(result or {})
    else:
        payload["error"] = {"code": error[0], "message": error[1]}
    return payload
