"""What Triton serves and how that changes: the router, the switcher, over-the-air updates and model recovery.

The ``ota`` MQTT command is a ``LateHandler`` from the start: the publisher connects, and takes what the broker
kept for the device, long before the OTA manager exists. Once Triton is up, ``start_serving`` lets the OTA manager
load what to serve (the active version, else the base model), hands updates to it from the ``ota`` command, the
inbox directory (``ota.inbox``) and the fleet group's desired state (``ota.group``, docs/fleet-rollout.md), and
reloads the served route's models when they fail, through the switcher's ``model_control`` lock, so a reload and an
OTA switch never interleave; each tick's ``Served.check`` probes them (docs/supervisor.md, "Model failures").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from appliance.appconfig.app import AppConfig
from appliance.detector.serving.probe import ModelProbe
from appliance.detector.serving.recovery import PipelineRecovery, PipelineState
from appliance.detector.serving.reload import TritonReloader
from appliance.detector.serving.router import Router
from appliance.detector.serving.switcher import TritonSwitcher
from appliance.health.metrics import ApplianceMetrics
from appliance.mqtt.commands import Command, CommandHandler
from appliance.mqtt.errors import CommandError
from appliance.mqtt.publisher import MqttPublisher
from appliance.ota.delivery import InboxWatcher, OtaCommandHandler
from appliance.ota.follower import DesiredStateFollower, follow_group
from appliance.ota.manager import OtaManager
from appliance.ota.signing import TrustedKeys
from appliance.ota.status import OtaStatus
from appliance.supervisor.detectorsetup import DetectorSetup
from appliance.triton.server import Server

log = logging.getLogger(__name__)


class LateHandler:
    """A command handler registered before the part that serves it exists: ``publisher.on_command(name, late)``
    now, ``late.set(handler)`` when ``what`` runs, ``close()`` at stop.

    A first boot builds the engine and starts Triton between the publisher's connect and the OTA manager's start:
    a command registered only then would answer ``unknown_command`` to a rollback an operator sent while the device
    was away, and the command is gone. Registered at once through this stand-in, such a command waits for the real
    handler (up to ``wait_s``) and then runs, or gets a ``failed`` reply that says why and what to do."""

    def __init__(self, what: str, wait_s: float) -> None:
        self.what = what
        self.wait_s = wait_s
        self._handler: CommandHandler | None = None
        self._closed = False
        self._changed = threading.Condition()

    def set(self, handler: CommandHandler) -> None:
        with self._changed:
            self._handler = handler
            self._changed.notify_all()

    def close(self) -> None:
        """The appliance stops: a command still waiting gets its reply now."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def __call__(self, command: Command) -> Mapping[str, Any] | None:
        with self._changed:
            self._changed.wait_for(lambda: self._handler is not None or self._closed, self.wait_s)
            handler = self._handler
        if handler is None:
            state = "is stopping" if self._closed else f"is not running after {self.wait_s:g} s"
            raise CommandError(f"{self.what} {state} (the appliance is starting or stopping: an engine build or "
                               f"Triton's start comes first); send the command again when its status is online")
        return handler(command)


class Served:
    """What serves now and the ways it changes, once all of it runs (``start_serving``)."""

    def __init__(self, router: Router, switcher: TritonSwitcher, ota: OtaManager, commands: OtaCommandHandler,
                 probe: ModelProbe, recovery: PipelineRecovery, inbox: InboxWatcher | None,
                 follower: DesiredStateFollower | None) -> None:
        self.router = router  # the route each frame takes
        self.switcher = switcher  # its model_control lock serializes reloads and switches
        self.ota = ota
        self.commands = commands
        self.probe = probe
        self.recovery = recovery  # the served pipeline's model failures and reloads
        self._inbox = inbox  # when ota.inbox is set
        self._follower = follower  # when ota.group is set
        self._published = PipelineState.SERVING  # the pipeline state MQTT health last said

    def check(self, publisher: MqttPublisher, last_error: str) -> str:
        """Probe the served route (a few cheap calls, once a tick), reload what broke, and tell MQTT at once when
        the pipeline's state changes; returns the appliance's last error, updated."""
        route = self.router.current()
        if route is None:
            return last_error
        self.recovery.step(route, self.probe.faults(route))
        status = self.recovery.status()
        if status.state is not PipelineState.SERVING:
            last_error = status.line()
        elif self._published is not PipelineState.SERVING:
            last_error = f"recovered: {last_error}"
        if status.state is not self._published:
            self._published = status.state
            try:
                publisher.publish_health_now()
            except Exception as exc:  # stopping: the next periodic health message says it
                log.debug("could not publish health now: %s", exc)
        return last_error

    def expire_uploads(self) -> None:
        """An ``ota`` upload whose sender gave up frees its disk space (once a tick)."""
        self.commands.chunks.expire()

    def stop(self) -> None:
        """Stop taking updates from the inbox and the fleet group; the switcher and manager need no stopping."""
        if self._inbox is not None:
            self._inbox.stop()
        if self._follower is not None:
            self._follower.stop()


def start_serving(server: Server, detector: DetectorSetup, publisher: MqttPublisher, late: LateHandler, *,
                  config: AppConfig, state_dir: Path, on_status: Callable[[OtaStatus], None],
                  clock: Callable[[], float], metrics: ApplianceMetrics) -> Served:
    """Load and route what to serve, take updates, watch for model failures; raises ``OtaRejected`` when nothing
    can be served. Model failures of whatever the router serves now (an OTA switch changes it) are found by the
    tick's ``check`` and reloaded with backoff."""
    ota, incoming = config.ota, state_dir / "ota" / "incoming"
    router = Router()
    switcher = TritonSwitcher(server, detector.repository, router, options=detector.options,
                              drain_timeout_s=config.pipeline.drain_timeout_s, warmup=detector.warmup)
    manager = OtaManager(state_dir, TrustedKeys.from_paths(ota.trusted_keys), switcher, config=ota,
                         status_cb=on_status, base_spec=lambda: detector.base, filter_classes=config.filter_classes())
    route = manager.start_serving()
    log.info("serving %s (ensemble %s)", route.label, route.ensemble)
    if not ota.trusted_keys:
        log.info("OTA updates are off: ota.trusted_keys is empty, every bundle will be refused")
    commands = OtaCommandHandler(manager, ota, incoming)
    late.set(commands)
    inbox = InboxWatcher(manager, ota.inbox, ota.inbox_poll_s).start() if ota.inbox is not None else None
    try:
        follower = follow_group(publisher, manager, ota, incoming)
    except BaseException:
        if inbox is not None:  # what this step started, before the appliance stops what the steps before it did
            inbox.stop()
        raise
    probe = ModelProbe(server)
    recovery = PipelineRecovery(
        TritonReloader(server, probe, router.current, switcher.model_control, warm=switcher.warm),
        config.pipeline.recovery.policy(), clock=clock, metrics=metrics)
    return Served(router, switcher, manager, commands, probe, recovery, inbox, follower)
