"""What Triton serves and how that changes: the router, the switcher, over-the-air updates and model recovery.

The appliance (``app.Appliance``) wires it in three steps:

1. at once, ``late`` is registered as the ``ota`` MQTT command (``LateHandler``, below): the publisher
   connects, and takes what the broker kept for the device, long before the OTA manager exists;
2. once Triton is up, ``start_ota`` builds the router and switcher, lets the OTA manager load what to serve (the
   active version, else the base model) and hands updates to it from the ``ota`` command, the inbox directory
   (``ota.inbox``) and the fleet group's desired state (``ota.group``, docs/fleet-rollout.md);
3. ``start_recovery`` then reloads the served route's models when they fail, through the switcher's
   ``model_control`` lock, so a reload and an OTA switch never interleave; each tick's ``check`` probes them
   (docs/supervisor.md, "Model failures").

``stop`` stops the ways in (the inbox watcher, the fleet follower); the switcher and manager need no stopping.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from appliance.appconfig.app import RecoveryConfig
from appliance.health.metrics import ApplianceMetrics
from appliance.modelrepo.materialize import RepositoryOptions
from appliance.mqtt.commands import Command, CommandHandler
from appliance.mqtt.errors import CommandError
from appliance.mqtt.publisher import MqttPublisher
from appliance.ota.config import OtaConfig
from appliance.ota.delivery import InboxWatcher, OtaCommandHandler
from appliance.ota.follower import DesiredStateFollower, follow_group
from appliance.ota.manager import OtaManager
from appliance.ota.signing import TrustedKeys
from appliance.ota.status import OtaStatus
from appliance.serving.probe import ModelProbe
from appliance.serving.recovery import PipelineRecovery, PipelineState
from appliance.serving.reload import TritonReloader
from appliance.serving.router import Route, Router
from appliance.serving.switcher import ModelSpec, TritonSwitcher
from appliance.serving.warmup import WarmupPlan
from appliance.triton.server import Server

log = logging.getLogger("appliance.supervisor")


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


class ServedModel:
    """The serving side's handles; each is None until the step that makes it ran."""

    def __init__(self, config: OtaConfig, state_dir: Path, on_status: Callable[[OtaStatus], None]) -> None:
        self.config = config
        self.state_dir = state_dir
        self._on_status = on_status
        self.late = LateHandler("the OTA manager", wait_s=60.0)  # the `ota` command until start_ota
        self.router: Router | None = None  # the route each frame takes
        self.switcher: TritonSwitcher | None = None  # its model_control lock serializes reloads and switches
        self.ota: OtaManager | None = None
        self.commands: OtaCommandHandler | None = None
        self.probe: ModelProbe | None = None
        self.recovery: PipelineRecovery | None = None  # the served pipeline's model failures and reloads
        self._published = PipelineState.SERVING  # the pipeline state MQTT health last said
        self._inbox: InboxWatcher | None = None  # when ota.inbox is set
        self._follower: DesiredStateFollower | None = None  # when ota.group is set

    def start_ota(self, server: Server, repository_dir: Path, publisher: MqttPublisher, *,
                  options: RepositoryOptions | None, drain_timeout_s: float, warmup: WarmupPlan,
                  base_spec: Callable[[], ModelSpec]) -> Route:
        """Load and route what to serve, then take updates; raises ``OtaRejected`` when nothing can be served."""
        ota, incoming = self.config, self.state_dir / "ota" / "incoming"
        self.router = Router()
        switcher = self.switcher = TritonSwitcher(server, repository_dir, self.router, options=options,
                                                  drain_timeout_s=drain_timeout_s, warmup=warmup)
        self.ota = OtaManager(self.state_dir, TrustedKeys.from_paths(ota.trusted_keys), switcher, config=ota,
                              status_cb=self._on_status, base_spec=base_spec)
        route = self.ota.start_serving()
        log.info("serving %s (ensemble %s)", route.label, route.ensemble)
        if not ota.trusted_keys:
            log.info("OTA updates are off: ota.trusted_keys is empty, every bundle will be refused")
        self.commands = OtaCommandHandler(self.ota, ota, incoming)
        self.late.set(self.commands)
        if ota.inbox is not None:
            self._inbox = InboxWatcher(self.ota, ota.inbox, ota.inbox_poll_s).start()
        self._follower = follow_group(publisher, self.ota, ota, incoming)
        return route

    def start_recovery(self, server: Server, recovery: RecoveryConfig, clock: Callable[[], float],
                       metrics: ApplianceMetrics) -> PipelineRecovery:
        """Model failures of whatever the router serves now (an OTA switch changes it) are found by the tick
        (``probe``) and reloaded with backoff."""
        assert self.router and self.switcher, "start_ota first"
        self.probe = ModelProbe(server)
        self.recovery = PipelineRecovery(
            TritonReloader(server, self.probe, self.router.current, self.switcher.model_control,
                           warm=self.switcher.warm),
            recovery.policy(),
            clock=clock, metrics=metrics)
        return self.recovery

    def check(self, publisher: MqttPublisher | None, last_error: str) -> str:
        """Probe the served route (a few cheap calls, once a tick), reload what broke, and tell MQTT at once when
        the pipeline's state changes; returns the appliance's last error, updated."""
        if self.recovery is None or self.probe is None or self.router is None:
            return last_error
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
            if publisher is not None:
                try:
                    publisher.publish_health_now()
                except Exception as exc:  # stopping: the next periodic health message says it
                    log.debug("could not publish health now: %s", exc)
        return last_error

    def expire_uploads(self) -> None:
        """An ``ota`` upload whose sender gave up frees its disk space (once a tick)."""
        if self.commands is not None:
            self.commands.chunks.expire()

    def close_commands(self) -> None:
        """The appliance stops: an ``ota`` command still waiting for the manager gets its reply now."""
        self.late.close()

    def stop(self) -> None:
        """Stop taking updates from the inbox and the fleet group."""
        self.late.close()
        if self._inbox is not None:
            self._inbox.stop()
        if self._follower is not None:
            self._follower.stop()
