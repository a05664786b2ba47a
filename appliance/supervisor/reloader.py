"""Carrying a reload plan out on the running appliance (docs/supervisor.md, "Reload"): cameras stopped, restarted
and started with the start step's own parts (``Capture.add``/``remove``, the child supervisor, the scheduler's
readers, the analytics stage as at start), zones and lines handed to the running stage, the publisher's publish
modes; nothing else is touched, so the cameras that did not change keep streaming. A refused reload changes
nothing."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from appliance.appconfig.app import AppConfig
from appliance.appconfig.check import resolved_paths
from appliance.capture.config import CameraConfig
from appliance.mqtt.errors import MqttConfigError
from appliance.mqtt.messages import reload_status_payload
from appliance.supervisor.children import ChildSupervisor
from appliance.supervisor.faces import RestartFaces
from appliance.supervisor.reloadplan import MQTT_RECONNECT, ReloadPlan, plan_reload
from appliance.supervisor.reloadstate import ReloadOutcome as ReloadOutcome  # the appliance names it from here
from appliance.supervisor.reloadstate import write_outcome
from appliance.supervisor.running import Running
from appliance.webserver.server import WebServer

log = logging.getLogger(__name__)
OpenHttp = Callable[[AppConfig, Running], "WebServer | None"]  # the HTTP server for a config (httpserver)
RELOAD_STATUS = "reload/status"  # the retained device topic of the last reload's outcome (docs/mqtt.md)


def reload_running(running: Running, children: ChildSupervisor, config: AppConfig, new: AppConfig | None,
                   problems: Sequence[str], source: str, previous: ReloadOutcome | None, last_error: str,
                   open_http: OpenHttp, restart_faces: RestartFaces) -> tuple[ReloadOutcome, AppConfig, str, Running]:
    """The outcome (reported), the config now in force (``config`` with what of ``new`` was applied: the sections
    that need a restart stay as they run), the appliance's last error (the refusal until a reload is applied; a
    camera or setting the reload could not apply) and the running record (its HTTP server may be a new one).
    ``new`` None: refused for ``problems``, nothing changes. ``open_http``: the start step's HTTP server;
    ``restart_faces``: the appliance's Sparkplug node and OPC UA server restarted (``faces``)."""
    seq = previous.seq + 1 if previous is not None else 1
    state_dir = resolved_paths(config)["state_dir"]  # the appliance's, as it started
    if new is None:
        outcome = ReloadOutcome(source, False, problems=list(problems), seq=seq)
        report(outcome, running, state_dir)
        return outcome, config, outcome.summary(), running
    plan, errors = plan_reload(config, new), list[str]()
    try:
        plan = reconnect_mqtt(plan, new, running, errors.append)
        apply_cameras(plan, new, running, children, errors.append, config.pipeline.drain_timeout_s)
        running, plan = restart_http(plan, config, new, running, open_http, errors.append)
        plan = restart_faces(plan, config, in_force(plan, config, new), errors.append)
    except Exception as exc:  # half applied: the service exits and its restart runs the whole new file
        report(ReloadOutcome(source, False, problems=[f"applying it failed ({exc}); the appliance exits, and "
                                                      "systemd's restart applies the whole file"], seq=seq),
               running, state_dir)
        raise
    outcome = ReloadOutcome(source, True, problems=errors, applied=plan.applied(),
                            needs_restart=list(plan.needs_restart), seq=seq)
    report(outcome, running, state_dir)
    refused_before = previous is not None and last_error == previous.summary() and not previous.ok
    return outcome, in_force(plan, config, new), errors[-1] if errors else "" if refused_before else last_error, running


def in_force(plan: ReloadPlan, config: AppConfig, new: AppConfig) -> AppConfig:
    """``config`` with what ``plan`` applied of ``new``: the next reload compares the file with it."""
    mqtt = {"publish": new.mqtt.publish, "cameras": new.mqtt.cameras}
    if plan.mqtt:
        mqtt.update({key: getattr(new.mqtt, key) for key in MQTT_RECONNECT})
    if plan.sparkplug:
        mqtt["sparkplug"] = new.mqtt.sparkplug
    update: dict[str, object] = {"cameras": list(new.cameras), "mqtt": config.mqtt.model_copy(update=mqtt)}
    if plan.opcua:
        update["opcua"] = new.opcua
    if plan.http:
        update.update(web=new.web, health=config.health.model_copy(update={
            key: getattr(new.health, key) for key in ("enabled", "host", "port")}))
    return config.model_copy(update=update)


def reconnect_mqtt(plan: ReloadPlan, new: AppConfig, running: Running, on_error: Callable[[str], None]) -> ReloadPlan:
    """The MQTT session reconnected with the new connection settings (``MqttPublisher.reconnect``: the spool and
    what it holds stay); settings it cannot use (TLS material, password file) are a problem, and nothing of them
    is applied."""
    if not plan.mqtt:
        return plan
    try:
        running.publisher.reconnect(new.mqtt)
    except MqttConfigError as exc:
        on_error(f"mqtt: {exc}; the MQTT session keeps its settings")
        return dataclasses.replace(plan, mqtt=(), sparkplug=tuple(k for k in plan.sparkplug if k not in plan.mqtt))
    return plan


def restart_http(plan: ReloadPlan, config: AppConfig, new: AppConfig, running: Running, open_http: OpenHttp,
                 on_error: Callable[[str], None]) -> tuple[Running, ReloadPlan]:
    """The HTTP server (health endpoint and page) closed and opened again with the new ``health``/``web`` keys;
    if the new one cannot be built (a users file, TLS material), the old settings' server again."""
    if not plan.http:
        return running, plan
    if running.health_server is not None:
        running.health_server.close()
    try:
        server = open_http(in_force(plan, config, new), running)
    except Exception as exc:  # the page's settings, whatever fails: the old server comes back
        on_error(f"health endpoint: cannot open it with the new settings ({exc}); it keeps its settings")
        return dataclasses.replace(running, health_server=open_http(config, running)), dataclasses.replace(
            plan, http=())
    return dataclasses.replace(running, health_server=server), plan


def start_camera(camera: CameraConfig, running: Running, children: ChildSupervisor, config: AppConfig,
                 on_error: Callable[[str], None]) -> AppConfig:
    """A camera that waited for its size (``appliance.supervisor.latecameras``), started as a reload that adds it
    would; returns the config in force, with it."""
    new = config.model_copy(update={"cameras": [*config.cameras, camera]})
    apply_cameras(ReloadPlan(start=(camera.id,)), new, running, children, on_error, config.pipeline.drain_timeout_s)
    return new


def report(outcome: ReloadOutcome, running: Running, state_dir: Path) -> None:
    """Logged once, kept for ``appliance reload`` (``<state_dir>/reload.json``), retained on MQTT
    (``<prefix>/<device>/reload/status``)."""
    if outcome.ok:
        log.info("reload of %s: %s", outcome.file, outcome.summary())
    else:
        log.error("%s: %s", outcome.summary(), "; ".join(outcome.problems))
    try:
        write_outcome(state_dir, outcome)
    except OSError as exc:
        log.error("reload: cannot write its outcome for `appliance reload`: %s", exc)
    publisher = running.publisher
    publisher.publish_device_event(RELOAD_STATUS, reload_status_payload(publisher.config.device_id,
                                                                        outcome.as_dict()), retain=True)


def apply_cameras(plan: ReloadPlan, new: AppConfig, running: Running, children: ChildSupervisor,
                  on_error: Callable[[str], None], drain_timeout_s: float) -> None:
    """The publish modes, stopped and restarted cameras (a restarted one reuses its id, ring name and topics), then
    the started ones, then zones and lines for the next frame."""
    configs = {c.id: c for c in new.cameras}
    running.publisher.set_publish_modes(new.mqtt.publish, new.mqtt.cameras)  # before a started camera's frames
    if running.inference.clips is not None:  # which cameras record, their pre/post seconds: from the next event
        running.inference.clips.apply({c.id: c.record for c in new.cameras if c.record.enabled})
    for camera_id in (*plan.stop, *plan.restart):
        _stop_camera(camera_id, running, children, drain_timeout_s)
        if camera_id in plan.stop:
            running.publisher.clear_camera(camera_id)
    for camera_id in (*plan.restart, *plan.start):
        _start_camera(configs[camera_id], running, children, on_error)
    inference = running.inference
    for camera_id in plan.layouts:
        camera = inference.layouts.set_camera(configs[camera_id])
        stage = inference.analytics.get(camera_id)
        if stage is not None and camera.analytics is not None:
            stage.apply_layout(camera.analytics)  # Analytics.replace_layout: from the next frame on


def _stop_camera(camera_id: str, running: Running, children: ChildSupervisor, drain_timeout_s: float) -> None:
    inference = running.inference
    if not inference.scheduler.remove_camera(camera_id, drain_timeout_s):
        log.warning("camera %s: frames still in flight after %.1f s; its ring stays mapped until they finish",
                    camera_id, drain_timeout_s)
    inference.analytics.pop(camera_id, None)
    inference.frames.analytics.pop(camera_id, None)
    inference.layouts.remove_camera(camera_id)
    running.capture.remove(camera_id, children)


def _start_camera(camera: CameraConfig, running: Running, children: ChildSupervisor,
                  on_error: Callable[[str], None]) -> None:
    """Its analytics stage before its first frame can reach the scheduler; a capture that cannot start now is
    retried by the child supervisor, as at start."""
    inference = running.inference
    with_layout = inference.layouts.set_camera(camera)
    if with_layout.analytics is not None:
        stage = inference.new_stage(with_layout)
        inference.analytics[camera.id] = stage
        inference.frames.analytics[camera.id] = stage
    running.capture.add(camera, children)
    children.start(f"camera:{camera.id}")
    running.capture.open_readers([camera], inference.scheduler, on_error)
