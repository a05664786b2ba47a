"""``mqtt.sparkplug``: off by default, the edge node id defaults to the device id, ids that cannot be a Sparkplug
topic level are refused with the key named (the spec's id rules by their tck ids)."""

from __future__ import annotations

from typing import Callable

import pytest
from pydantic import ValidationError

from appliance.capture.config import CameraConfig
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


def camera(camera_id: str) -> CameraConfig:
    return CameraConfig.model_validate({"id": camera_id, "source": {"type": "file", "path": "/x.avi"},
                                        "width": 64, "height": 64})


def refused(make: Callable[[str], object], value: str) -> bool:
    try:
        make(value)
    except ValidationError:
        return True
    return False


def group(value: str) -> object:
    return MqttConfig.model_validate({"device_id": "dev1", "sparkplug": {"group_id": value}})


def edge_node(value: str) -> object:
    return MqttConfig.model_validate({"device_id": value, "sparkplug": {"group_id": "g"}})


def named_edge_node(value: str) -> object:
    return MqttConfig.model_validate({"device_id": "dev1", "sparkplug": {"group_id": "g", "edge_node_id": value}})


RESERVED = ["a/b", "a+", "#", "+", "a#b"]  # the spec's reserved characters in a topic level


@pytest.mark.parametrize("makers", [
    pytest.param([group], id="tck-id-intro-group-id-chars"),
    pytest.param([group], id="tck-id-topic-structure-namespace-valid-group-id"),
    pytest.param([edge_node, named_edge_node], id="tck-id-intro-edge-node-id-chars"),
    pytest.param([edge_node, named_edge_node], id="tck-id-topic-structure-namespace-valid-edge-node-id"),
    pytest.param([camera], id="tck-id-intro-device-id-chars"),
    pytest.param([camera], id="tck-id-topic-structure-namespace-valid-device-id"),
])
def test_ids_with_the_reserved_characters_are_refused(makers: list[Callable[[str], object]]) -> None:
    for make in makers:
        assert not refused(make, "cam-1.a_b" if make is not camera else "cam-1_b")
        assert all(refused(make, value) for value in RESERVED), make.__name__
