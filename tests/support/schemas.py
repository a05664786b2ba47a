"""Validate an MQTT payload against the schema shipped in the package, for tests of any area (tests/mqtt has
its own copy in mqtt_helpers; this one needs nothing from that directory)."""

from __future__ import annotations

from typing import Any, Mapping

import jsonschema

from appliance.mqtt.schema import load_schema

_VALIDATORS: dict[str, jsonschema.Draft202012Validator] = {}


def validate_message(message_type: str, payload: Any) -> None:
    """Raise jsonschema.ValidationError unless ``payload`` is a valid ``message_type`` message."""
    if message_type not in _VALIDATORS:
        schema = load_schema(message_type)
        jsonschema.Draft202012Validator.check_schema(schema)
        _VALIDATORS[message_type] = jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    _VALIDATORS[message_type].validate(payload)


def validate_ota_status(status: Any, device_id: str = "dev1") -> dict[str, Any]:
    """Validate the ota/status payload the supervisor would publish for ``status`` (an OtaStatus, or its
    ``to_dict()`` as ``appliance ota install`` prints it); returns the payload."""
    from appliance.mqtt.messages import ota_status_payload

    fields: Mapping[str, Any] = status if isinstance(status, Mapping) else status.to_dict()
    payload = ota_status_payload(device_id, fields)
    validate_message("ota_status", payload)
    return payload
