"""Carrying a reload plan out on the running appliance (docs/supervisor.md, "Reload"): cameras stopped, restarted
and started with the start step's own parts (``Capture.add``/``remove``, the child supervisor, the scheduler's
readers, the analytics stage as at start), zones and lines handed to the running stage, the publisher's publish
modes; nothing else is touched, so the cameras that did not change keep streaming. A refused reload changes
nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from appliance.appconfig.app import AppConfig
from appliance.appconfig.check import resolved_paths
from appliance.capture.config import CameraConfig
from appliance.mqtt.messages import reload_status_payload
from appliance.supervisor.children import ChildSupervisor
from appliance.supervisor.reloadplan import ReloadPlan, plan_reload
from appliance.supervisor.reloadstate import ReloadOutcome as ReloadOutcome  # the appliance names it from here
from appliance.supervisor.reloadstate import write_outcome
from appliance.supervisor.running import Running

log = logging.getLogger("appliance.supervisor")
RELOAD_STATUS = "reload/status"  # the retained device topic of the last reload's outcome (docs/mqtt.md)


def reload_running(running: Running, children: ChildSupervisor, config: AppConfig, new: AppConfig | None,
                   problems: Sequence[str], source: str, previous: ReloadOutcome | None,
                   last_error: str) -> tuple[ReloadOutcome, AppConfig, str]:
    """The outcome (reported), the config now in force (``config`` with the cameras and publish modes of ``new``:
    the sections that need a restart stay as they run) and the appliance's last error (the refusal until a reload
    is applied; a camera the reload could not set up). ``new`` None: refused for ``problems``, nothing changes."""
    seq = previous.seq + 1 if previous is not None else 1
    state_dir = resolved_paths(config)["state_dir"]  # the appliance's, as it started
    if new is None:
        outcome = ReloadOutcome(source, False, problems=list(problems), seq=seq)
        report(outcome, running, state_dir)
        return outcome, config, outcome.summary()
    plan, errors = plan_reload(config, new), list[str]()
    try:
        apply_cameras(plan, new, running, children, errors.append, config.pipeline.drain_timeout_s)
    except Exception as exc:  # half applied: the service exits and its restart runs the whole new file
        report(ReloadOutcome(source, False, problems=[f"applying it failed ({exc}); the appliance exits, and "
                                                      "systemd's restart applies the whole file"], seq=seq),
               running, state_dir)
        raise
    outcome = ReloadOutcome(source, True, problems=errors, applied=plan.applied(),
                            needs_restart=list(plan.needs_restart), seq=seq)
    report(outcome, running, state_dir)
    refused_before = previous is not None and last_error == previous.summary() and not previous.ok
    running_config = config.model_copy(update={"cameras": list(new.cameras), "mqtt": config.mqtt.model_copy(
        update={"publish": new.mqtt.publish, "cameras": new.mqtt.cameras})})
    return outcome, running_config, errors[-1] if errors else "" if refused_before else last_error


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
