"""What a reload changes: two validated configs in, a plan out (which cameras start, stop or restart alone, whose
zones and lines apply on the next frame, and what only a restart of the service can change). Pure: no process,
socket or file is touched here; ``appliance.supervisor.reloader`` carries the plan out.

A camera is compared by id, its settings as a whole: a change to anything but its ``analytics`` section restarts
that camera alone; an analytics change that ``Analytics.replace_layout`` can take (zones, lines, classes, scores,
anchor, counts interval) applies on the next frame; one it cannot (tracker, snapshots, a section added or
removed) restarts the camera alone. A camera's MQTT publish mode (``mqtt.publish``, ``mqtt.cameras``) applies
from its next frame. The MQTT session's own settings (brokers, credentials, TLS, client id, QoS...) reconnect
the publisher in place, and restart the Sparkplug node alone as a change of its own section does; ``health``
(enabled, host, port) and ``web`` restart the HTTP server alone; ``opcua``, or a camera, zone or line that its
address space lists, restarts the OPC UA server alone. Every other section is changed only by a restart of the
service, and so is a Sparkplug node or OPC UA server added or removed. The Sparkplug node follows the cameras by
itself: its births come from the health summary, so a camera added, removed or with other lines gets its DBIRTH or
DDEATH.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from appliance.appconfig.app import AppConfig
from appliance.capture.config import CameraConfig

# The analytics keys a running stage cannot take in place: its tracker and snapshot worker are built once.
_ANALYTICS_REBUILT = ("tracker", "snapshots")
# The mqtt keys the publisher takes by reconnecting in place (MqttPublisher.reconnect): the session's own.
MQTT_RECONNECT = ("host", "port", "hosts", "protocol", "transport", "websocket_path", "tls", "username", "password",
                   "password_file", "client_id", "clean_session", "session_expiry_s", "keepalive_s",
                   "connect_timeout_s", "inflight_window", "backoff", "qos", "health_interval_s")
# The keys the HTTP server (health endpoint and the operator's page) is built from: it restarts alone.
_HTTP_RESTART = (("health", "enabled"), ("health", "host"), ("health", "port"), ("web",))


@dataclass(frozen=True)
class ReloadPlan:
    """Camera ids by what happens to them (each list in the new config's order, removed ones in the old's), and
    the dotted keys whose change needs ``systemctl restart appliance`` (none of them is applied)."""

    start: tuple[str, ...] = ()
    stop: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()
    layouts: tuple[str, ...] = ()
    publish_modes: tuple[str, ...] = ()  # running cameras whose ``mqtt.publish``/``mqtt.cameras`` mode changed
    needs_restart: tuple[str, ...] = ()
    mqtt: tuple[str, ...] = ()  # changed connection keys: the MQTT session reconnects with them
    http: tuple[str, ...] = ()  # changed ``health``/``web`` keys: the HTTP server restarts alone
    sparkplug: tuple[str, ...] = ()  # changed ``mqtt.sparkplug`` or connection keys: the node restarts alone
    opcua: tuple[str, ...] = ()  # changed ``opcua`` keys, or "cameras" (its address space): it restarts alone

    @property
    def changes_cameras(self) -> bool:
        return bool(self.start or self.stop or self.restart or self.layouts)

    def applied(self) -> list[str]:
        """What the reload does, one phrase per change, for its log line and its reply."""
        return ([f"camera {c} started" for c in self.start] + [f"camera {c} stopped" for c in self.stop]
                + [f"camera {c} restarted" for c in self.restart]
                + [f"camera {c} zones and lines applied" for c in self.layouts]
                + [f"camera {c} publish mode applied" for c in self.publish_modes]
                + ([f"MQTT reconnected ({', '.join(self.mqtt)})"] if self.mqtt else [])
                + ([f"health endpoint restarted ({', '.join(self.http)})"] if self.http else [])
                + ([f"Sparkplug node restarted ({', '.join(self.sparkplug)})"] if self.sparkplug else [])
                + ([f"OPC UA server restarted ({', '.join(self.opcua)})"] if self.opcua else []))

    def describe(self) -> str:
        done = "; ".join(self.applied()) or "no change applied"
        return done + (f"; needs restart: {', '.join(self.needs_restart)}" if self.needs_restart else "")


def plan_reload(old: AppConfig, new: AppConfig) -> ReloadPlan:
    """The plan that takes a service running ``old`` to ``new`` without stopping what did not change."""
    before = {c.id: c for c in old.cameras}
    after = {c.id: c for c in new.cameras}
    restart, layouts = [], []
    for camera_id, camera in after.items():
        was = before.get(camera_id)
        if was is None or was == camera:
            continue
        if _restarts(was, camera):
            restart.append(camera_id)
        else:
            layouts.append(camera_id)
    start = tuple(c for c in after if c not in before)
    stop = tuple(c for c in before if c not in after)
    changed = [key for section in AppConfig.model_fields if section != "cameras"
               for key in changed_keys(getattr(old, section), getattr(new, section), section)
               if key.split(".")[:2] not in (["mqtt", "publish"], ["mqtt", "cameras"])]
    mqtt = [k for k in changed if k.split(".")[:2] in [["mqtt", n] for n in MQTT_RECONNECT]]
    http = [k for k in changed if any(k.split(".")[:len(p)] == list(p) for p in _HTTP_RESTART)]
    sparkplug, opcua = [], []
    if old.mqtt.sparkplug is not None and new.mqtt.sparkplug is not None:  # added or removed: needs restart
        sparkplug = [k for k in changed if k.startswith("mqtt.sparkplug.")] + mqtt  # the node connects with them
    if old.opcua is not None and new.opcua is not None:  # added or removed: needs restart (its feed is made at start)
        opcua = [k for k in changed if k.startswith("opcua.")] + (
            ["cameras"] if _opcua_layout(old) != _opcua_layout(new) else [])
    needs = [k for k in changed if k not in mqtt and k not in http and k not in sparkplug and k not in opcua]
    modes = tuple(c for c in after if c in before and c not in restart
                  and old.mqtt.publish_config(c) != new.mqtt.publish_config(c))
    return ReloadPlan(start, stop, tuple(restart), tuple(layouts), modes, tuple(needs), tuple(mqtt), tuple(http),
                      tuple(sparkplug), tuple(opcua))


def _opcua_layout(config: AppConfig) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """What the OPC UA address space is built from (opcuasetup.camera_layouts): each camera's zone and line names."""
    return {c.id: (tuple(z.name for z in c.analytics.zones), tuple(line.name for line in c.analytics.lines))
            if c.analytics else ((), ()) for c in config.cameras}


def with_running_sizes(running: AppConfig, new: AppConfig) -> AppConfig:
    """``new`` with the frame size each camera that has no configured size runs at (its source's, probed at
    start) wherever nothing else of that camera changed: a reload neither probes it again nor takes the probed
    size for a change."""
    before = {c.id: c for c in running.cameras}

    def sized(camera: CameraConfig) -> CameraConfig:
        was = before.get(camera.id)
        if camera.width is not None or was is None or was.width is None:
            return camera
        same = camera.model_copy(update={"width": was.width, "height": was.height})
        return was if same == was else camera

    return new.model_copy(update={"cameras": [sized(c) for c in new.cameras]})


def _restarts(was: CameraConfig, camera: CameraConfig) -> bool:
    """Whether the change needs the camera's capture (and its analytics stage) started again."""
    if was.model_copy(update={"analytics": None}) != camera.model_copy(update={"analytics": None}):
        return True
    if (was.analytics is None) != (camera.analytics is None):
        return True
    assert was.analytics is not None and camera.analytics is not None
    return any(getattr(was.analytics, key) != getattr(camera.analytics, key) for key in _ANALYTICS_REBUILT)


def changed_keys(old: Any, new: Any, prefix: str) -> list[str]:
    """The dotted keys under ``prefix`` whose values differ (names only: a changed password is named, never
    shown); a list or a section that appears or goes is one key."""
    return list(_walk(_plain(old), _plain(new), prefix))


def _plain(value: Any) -> Any:
    return value.model_dump() if hasattr(value, "model_dump") else value  # a SecretStr compares by its secret


def _walk(old: Any, new: Any, prefix: str) -> Iterator[str]:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in dict.fromkeys([*old, *new]):
            yield from _walk(old.get(key), new.get(key), f"{prefix}.{key}")
    elif old != new:
        yield prefix
