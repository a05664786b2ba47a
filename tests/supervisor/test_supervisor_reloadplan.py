"""The reload plan: two validated configs in, what starts, stops, restarts alone, takes new zones and lines, or
needs a restart of the service out. No daemon: the configs are built from dicts as a file would give them."""

from __future__ import annotations

import copy
from typing import Any

from appliance.appconfig.app import AppConfig
from appliance.supervisor.reloadplan import ReloadPlan, changed_keys, plan_reload, with_running_sizes

LINE = {"name": "door", "a": [0, 240], "b": [640, 240], "in_side": "left"}


def _camera(camera_id: str, path: str = "/v/a.mp4", **analytics: Any) -> dict[str, Any]:
    camera: dict[str, Any] = {"id": camera_id, "source": {"type": "file", "path": path}, "width": 640,
                              "height": 480, "fps": 10}
    if analytics:
        camera["analytics"] = analytics
    return camera


def _doc() -> dict[str, Any]:
    return {"device": {"id": "dev1"}, "mqtt": {"host": "localhost"},
            "cameras": [_camera("cam1"), _camera("cam2", lines=[LINE]), _camera("cam3")]}


def _plan(old: dict[str, Any], new: dict[str, Any]) -> ReloadPlan:
    return plan_reload(AppConfig.model_validate(old), AppConfig.model_validate(new))


def test_the_same_config_changes_nothing() -> None:
    plan = _plan(_doc(), _doc())
    assert plan == ReloadPlan() and not plan.changes_cameras
    assert plan.describe() == "no change applied"


def test_added_removed_and_changed_cameras_each_get_their_own_step() -> None:
    new = _doc()
    new["cameras"][1] = _camera("cam2", "/v/b.mp4", lines=[{**LINE, "a": [0, 100]}])  # source and line
    del new["cameras"][2]
    new["cameras"].append(_camera("cam4"))
    plan = _plan(_doc(), new)
    assert (plan.start, plan.stop, plan.restart, plan.layouts) == (("cam4",), ("cam3",), ("cam2",), ())
    assert plan.needs_restart == ()
    assert plan.applied() == ["camera cam4 started", "camera cam3 stopped", "camera cam2 restarted"]


def test_zones_lines_classes_and_hysteresis_apply_in_place() -> None:
    for change in ({"lines": [{**LINE, "b": [640, 200]}]}, {"lines": [LINE], "classes": {"person": 0.5}},
                   {"lines": [{**LINE, "hysteresis": {"margin": 0.5}}]}, {"lines": [LINE], "min_score": 0.6},
                   {"lines": [LINE], "zones": [{"name": "bay", "points": [[0, 0], [100, 0], [100, 100]]}]}):
        new = _doc()
        new["cameras"][1] = _camera("cam2", **change)
        plan = _plan(_doc(), new)
        assert (plan.layouts, plan.restart) == (("cam2",), ()), change


def test_a_change_the_running_stage_cannot_take_restarts_the_camera_alone() -> None:
    for change in ({"lines": [LINE], "tracker": {"lost_frames": 5}},
                   {"lines": [LINE], "snapshots": {"enabled": False}}, {}):  # {}: the section removed
        new = _doc()
        new["cameras"][1] = _camera("cam2", **change)
        plan = _plan(_doc(), new)
        assert (plan.restart, plan.layouts, plan.start, plan.stop) == (("cam2",), (), (), ()), change


def test_a_camera_setting_outside_analytics_restarts_that_camera() -> None:
    new = _doc()
    new["cameras"][0]["fps"] = 5
    assert _plan(_doc(), new).restart == ("cam1",)


def test_sections_that_need_a_restart_are_named_by_key_and_never_by_value() -> None:
    new = _doc()
    new["model"] = {"name": "other-model"}
    new["triton"] = {"log_verbose": 1}
    new["paths"] = {"state_dir": "/srv/state"}
    new["mqtt"] = {"host": "localhost", "topic_prefix": "plant", "username": "line", "password": "s3cret"}
    plan = _plan(_doc(), new)
    assert set(plan.needs_restart) == {"model.name", "triton.log_verbose", "paths.state_dir", "mqtt.topic_prefix"}
    assert plan.mqtt == ("mqtt.username", "mqtt.password") and not plan.changes_cameras
    assert "s3cret" not in plan.describe() and "needs restart: " in plan.describe()
    assert "MQTT reconnected (mqtt.username, mqtt.password)" in plan.applied()
    changed = copy.deepcopy(new)
    changed["mqtt"]["password"] = "other"
    assert (_plan(new, changed).mqtt, _plan(new, changed).needs_restart) == (("mqtt.password",), ())


def test_the_mqtt_session_settings_reconnect_and_its_topics_spool_and_commands_need_a_restart() -> None:
    new = _doc()
    new["mqtt"] = {"hosts": [{"host": "b1"}, {"host": "b2", "port": 8883}], "client_id": "line-7", "keepalive_s": 10,
                   "qos": {"detections": 0, "replies": 0}, "tls": {"check_hostname": False}, "inflight_window": 5,
                   "backoff": {"max_s": 5}, "health_interval_s": 10, "protocol": "5", "username": "u",
                   "password_file": "/p", "device_id": "other", "spool": {"max_bytes": 100000},
                   "commands": {"require_signature": False}}
    plan = _plan(_doc(), new)
    assert set(plan.mqtt) == {"mqtt.hosts", "mqtt.client_id", "mqtt.keepalive_s", "mqtt.qos.detections",
                              "mqtt.qos.replies", "mqtt.tls", "mqtt.inflight_window", "mqtt.backoff.max_s",
                              "mqtt.health_interval_s", "mqtt.protocol", "mqtt.username", "mqtt.password_file"}
    assert set(plan.needs_restart) == {"mqtt.device_id", "mqtt.spool.max_bytes", "mqtt.commands.require_signature"}
    # The Sparkplug node connects with the same settings: it restarts alone with them, as for its own section.
    old = _doc()
    old["mqtt"]["sparkplug"] = {"group_id": "plant"}
    new = copy.deepcopy(old)
    new["mqtt"]["keepalive_s"] = 10
    new["mqtt"]["sparkplug"]["interval_s"] = 5
    plan = _plan(old, new)
    assert (plan.mqtt, plan.sparkplug, plan.needs_restart) == (
        ("mqtt.keepalive_s",), ("mqtt.sparkplug.interval_s", "mqtt.keepalive_s"), ())
    assert "Sparkplug node restarted (mqtt.sparkplug.interval_s, mqtt.keepalive_s)" in plan.applied()
    del new["mqtt"]["sparkplug"]  # a node added or removed: a restart
    assert _plan(old, new).needs_restart == ("mqtt.sparkplug",)


def test_the_health_endpoint_and_page_restart_alone_on_their_own_keys() -> None:
    new = _doc()
    new["health"] = {"port": 9200, "host": "0.0.0.0", "interval_s": 2.0}
    new["web"] = {"hosts": ["line7.local"], "session_s": 600}
    plan = _plan(_doc(), new)
    assert set(plan.http) == {"health.port", "health.host", "web.hosts", "web.session_s"}
    assert plan.needs_restart == ("health.interval_s",)  # the readings' refresh, not the server's
    assert "health endpoint restarted (health.host, health.port, web.session_s, web.hosts)" in plan.applied()
    new = _doc()
    new["health"] = {"enabled": False}
    assert (_plan(_doc(), new).http, _plan(_doc(), new).needs_restart) == (("health.enabled",), ())


def test_the_camera_order_alone_is_no_change() -> None:
    new = _doc()
    new["cameras"].reverse()
    assert _plan(_doc(), new) == ReloadPlan()


def test_opcua_restarts_alone_when_its_section_or_its_address_space_changes() -> None:
    old = _doc()
    old["opcua"] = {"port": 4841}
    new = copy.deepcopy(old)
    new["cameras"].append(_camera("cam4"))
    plan = _plan(old, new)
    assert (plan.start, plan.opcua, plan.needs_restart) == (("cam4",), ("cameras",), ())
    assert "OPC UA server restarted (cameras)" in plan.applied()
    new = copy.deepcopy(old)
    new["cameras"][1]["analytics"]["lines"][0]["b"] = [640, 100]  # a line moved: the same names
    assert _plan(old, new).opcua == ()
    new["cameras"][1]["analytics"]["lines"][0]["name"] = "gate"  # renamed: another address space
    new["cameras"][0]["fps"] = 5  # a capture change alone lists nothing new
    assert _plan(old, new).opcua == ("cameras",)
    new = copy.deepcopy(old)
    new["opcua"]["port"] = 4842
    assert _plan(old, new).opcua == ("opcua.port",)
    del new["opcua"]
    assert (_plan(old, new).opcua, _plan(old, new).needs_restart) == ((), ("opcua",))  # the section itself


def test_changed_keys_walks_nested_sections() -> None:
    assert changed_keys({"a": {"b": 1, "c": [1]}}, {"a": {"b": 1, "c": [2], "d": 3}}, "x") == ["x.a.c", "x.a.d"]


def test_a_camera_sized_by_its_source_keeps_its_running_size_unless_it_changed() -> None:
    unsized = _doc()
    for camera in unsized["cameras"]:
        del camera["width"], camera["height"]
        camera.pop("analytics", None)  # pixel points need a configured size
    running_doc = copy.deepcopy(unsized)
    for camera in running_doc["cameras"]:
        camera.update(width=800, height=600)  # as `run` gave them their sources' sizes
    running = AppConfig.model_validate(running_doc)
    new = copy.deepcopy(unsized)
    new["cameras"][2]["source"]["path"] = "/v/other.mp4"
    sized = with_running_sizes(running, AppConfig.model_validate(new))
    assert [(c.width, c.height) for c in sized.cameras] == [(800, 600), (800, 600), (None, None)]  # cam3: probed
    probed = sized.model_copy(update={"cameras": [*sized.cameras[:2], sized.cameras[2].model_copy(
        update={"width": 800, "height": 600})]})
    assert plan_reload(running, probed) == ReloadPlan(restart=("cam3",))


def test_publish_modes_apply_from_the_next_frame_and_need_no_restart() -> None:
    old = _doc()
    old["mqtt"]["cameras"] = {"cam2": {"mode": "on_change"}}
    new = copy.deepcopy(old)
    new["mqtt"]["cameras"] = {"cam1": {"mode": "fixed_rate", "rate_hz": 1.0}, "cam4": {"mode": "on_change"}}
    new["cameras"].append(_camera("cam4"))
    plan = _plan(old, new)
    # cam1 gets a mode of its own, cam2 goes back to the default; cam4 starts with its own from its first frame
    assert (plan.publish_modes, plan.start, plan.needs_restart) == (("cam1", "cam2"), ("cam4",), ())
    assert "camera cam1 publish mode applied" in plan.applied()
    new = copy.deepcopy(old)
    new["mqtt"]["publish"] = {"mode": "on_change"}  # the default: every camera without its own mode
    assert _plan(old, new).publish_modes == ("cam1", "cam3")
