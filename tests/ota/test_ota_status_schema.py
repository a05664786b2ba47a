"""The ota/status payload and its JSON Schema: a real OtaManager (tiny real ONNX model, ONNX Runtime builder)
goes through every state (install, health rollback, install, manual rollback, rejections), and the payload the
supervisor publishes for each status must validate; malformed payloads must not."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import jsonschema
import pytest
from ota_helpers import Traffic  # noqa: E402
from support.schemas import validate_message, validate_ota_status

from appliance.mqtt.messages import ota_status_payload
from appliance.mqtt.schema import load_schema
from appliance.ota.config import HealthPolicy, OtaConfig
from appliance.ota.errors import REJECT_CODES, OtaRejected
from appliance.ota.manager import OtaManager
from appliance.ota.status import STATES, OtaStatus


@pytest.fixture
def every_state(tmp_path: Path, keys: Any, sign: Callable[..., Path], tiny_source: Callable[..., Path]
                ) -> list[OtaStatus]:
    """The statuses of: install 1, install 2 (rolled back: failing requests), install 3, manual rollback to 1,
    a garbage bundle, and 1 again (duplicate)."""
    events: list[OtaStatus] = []
    traffic = Traffic()
    health = HealthPolicy(period_s=5, check_interval_s=0.5, min_requests=3, max_error_rate=0.2,
                          min_detection_ratio=0)
    m = OtaManager(tmp_path / "state", keys.trusted(), traffic.switcher, config=OtaConfig(health=health),
                   status_cb=events.append, monotonic=traffic.monotonic, sleep=traffic.sleep)
    b1 = sign(tiny_source("1"), "1.bundle")
    assert m.install(b1, request_id="req-1")["state"] == "active"
    traffic.fail = True
    assert m.install(sign(tiny_source("2"), "2.bundle"))["state"] == "rolled_back"
    traffic.fail = False
    assert m.install(sign(tiny_source("3"), "3.bundle"), request_id="req-3")["state"] == "active"
    assert m.rollback(request_id="req-rb")["to"] == "1"
    garbage = tmp_path / "garbage.bundle"
    garbage.write_bytes(b"not a tar" * 100)
    for bundle, code in ((garbage, "corrupt"), (b1, "duplicate")):
        with pytest.raises(OtaRejected) as info:
            m.install(bundle)
        assert info.value.code == code
    return events


def test_every_state_the_manager_emits_validates(every_state: list[OtaStatus]) -> None:
    assert {e.state for e in every_state} == set(STATES)
    payloads = [validate_ota_status(e, "line1-box07") for e in every_state]
    assert all(p["type"] == "ota_status" and p["device_id"] == "line1-box07" for p in payloads)
    building = [p for p in payloads if p["state"] == "building"]
    assert len(building) > 1 and all(0 <= p["percent"] <= 100 for p in building)
    outcomes = [(p["state"], p.get("version"), p.get("code"), p.get("request_id")) for p in payloads
                if p["state"] in ("active", "rolled_back", "rejected")]
    assert outcomes == [("active", "1", None, "req-1"), ("rolled_back", "2", "health", None),
                        ("active", "3", None, "req-3"), ("rolled_back", "1", "manual", "req-rb"),
                        ("rejected", None, "corrupt", None), ("rejected", "1", "duplicate", None)]


def test_payload_times_are_iso_and_epoch_ms() -> None:
    status = OtaStatus("active", "tiny@2 is serving", "2", "tiny", time=1714564800.1234)
    payload = ota_status_payload("dev1", status.to_dict())
    assert payload["time"] == "2024-05-01T12:00:00.123Z" and payload["time_ms"] == 1714564800123
    assert "percent" not in payload and "code" not in payload  # None fields are left out
    validate_message("ota_status", payload)


def test_schema_enums_are_the_codes_states() -> None:
    schema = load_schema("ota_status")
    assert tuple(schema["properties"]["state"]["enum"]) == STATES
    rejected = next(rule for rule in schema["allOf"] if rule["if"]["properties"]["state"] == {"const": "rejected"})
    assert tuple(rejected["then"]["properties"]["code"]["enum"]) == REJECT_CODES


BUILDING = ota_status_payload("dev1", OtaStatus("building", "build: engine", "2", "tiny", percent=40.0,
                                                request_id="r1", time=1714564800.0).to_dict())
REJECTED = ota_status_payload("dev1", OtaStatus("rejected", "bad", code="corrupt", time=1714564800.0).to_dict())


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


MALFORMED = {
    "unknown state": _with(BUILDING, state="done"),
    "building without percent": _with(BUILDING, percent=None),
    "percent over 100": _with(BUILDING, percent=140.0),
    "percent as a string": _with(BUILDING, percent="40"),
    "percent outside building": _with(BUILDING, state="active"),
    "code outside rejected/rolled_back": _with(BUILDING, code="corrupt"),
    "no version after verify": _with(BUILDING, version=None),
    "unsafe version": _with(BUILDING, version="../2"),
    "no time_ms": _with(BUILDING, time_ms=None),
    "time as epoch seconds": _with(BUILDING, time=1714564800.0),
    "schema_version 2": _with(BUILDING, schema_version=2),
    "wrong type": _with(BUILDING, type="camera_status"),
    "device id with a slash": _with(BUILDING, device_id="dev/1"),
    "unknown key": _with(BUILDING, extra="x"),
    "no message": _with(BUILDING, message=None),
    "rejected without code": _with(REJECTED, code=None),
    "rejected with a rollback code": _with(REJECTED, code="health"),
    "rolled_back with a reject code": _with(REJECTED, state="rolled_back"),
    "empty request_id": _with(REJECTED, request_id=""),
}


@pytest.mark.parametrize("payload", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_payloads_are_rejected(payload: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        validate_message("ota_status", payload)


def test_a_model_without_a_filtered_class_is_named_on_status_or_refused(
        tmp_path: Path, keys: Any, sign: Callable[..., Path], tiny_source: Callable[..., Path]) -> None:
    """The tiny model's classes are a and b; the config filters on a and forklift."""
    events: list[OtaStatus] = []
    traffic = Traffic()
    health = HealthPolicy(period_s=1, check_interval_s=0.5, min_requests=1, min_detection_ratio=0)
    strict = OtaManager(tmp_path / "strict", keys.trusted(), traffic.switcher,
                        config=OtaConfig(health=health, require_classes=True), status_cb=events.append,
                        monotonic=traffic.monotonic, sleep=traffic.sleep, filter_classes={"a", "forklift"})
    with pytest.raises(OtaRejected) as info:
        strict.install(sign(tiny_source("1"), "1.bundle"))
    assert info.value.code == "missing_classes" and "forklift" in info.value.reason
    assert strict.store.serving() is None  # nothing changed
    lenient = OtaManager(tmp_path / "lenient", keys.trusted(), traffic.switcher, config=OtaConfig(health=health),
                         status_cb=events.append, monotonic=traffic.monotonic, sleep=traffic.sleep,
                         filter_classes={"a", "forklift"})
    assert lenient.install(sign(tiny_source("2"), "2.bundle"))["missing_classes"] == ["forklift"]
    active = validate_ota_status(events[-1], "dev1")
    assert active["state"] == "active" and active["missing_classes"] == ["forklift"], active
    assert "forklift" in active["message"]
    with pytest.raises(jsonschema.ValidationError):
        validate_message("ota_status", _with(active, missing_classes=[]))
