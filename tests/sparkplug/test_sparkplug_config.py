"""``mqtt.sparkplug``: off by default, the edge node id defaults to the device id, ids that cannot be a Sparkplug
topic level are refused with the key named."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from appliance.mqtt.config import MqttConfig


def test_off_by_default_and_the_edge_node_id_defaults_to_the_device_id() -> None:
    assert MqttConfig(device_id="dev1").sparkplug is None
    config = MqttConfig.model_validate({"device_id": "dev1", "sparkplug": {"group_id": "plant1"}})
    assert config.sparkplug is not None and config.sparkplug.node_id("dev1") == "dev1"
    named = MqttConfig.model_validate({"device_id": "dev1", "sparkplug": {"group_id": "g", "edge_node_id": "cell-4"}})
    assert named.sparkplug is not None and named.sparkplug.node_id("dev1") == "cell-4"


@pytest.mark.parametrize("section, key", [
    ({"group_id": "plant/1"}, "group_id"), ({"group_id": "plant+"}, "group_id"), ({"group_id": "#"}, "group_id"),
    ({"group_id": ""}, "group_id"), ({"group_id": "g", "edge_node_id": "a b"}, "edge_node_id"),
    ({"group_id": "g", "interval_s": 0}, "interval_s"), ({"group_id": "g", "qos": 1}, "qos"), ({}, "group_id"),
])
def test_bad_sections_are_refused_naming_the_key(section: dict[str, object], key: str) -> None:
    with pytest.raises(ValidationError) as err:
        MqttConfig.model_validate({"device_id": "dev1", "sparkplug": section})
    assert [e["loc"] for e in err.value.errors()] == [("sparkplug", key)]
