"""The appliance's MQTT face: its publisher, with the spool, the operators' keys that sign commands, and the
commands it answers (``status``, and ``ota`` registered before the OTA manager exists: ``servedmodel.LateHandler``).

Registered before the connect, so that what the broker kept for the device while it was away (a persistent
session) finds its handler. The Sparkplug B edge node, a second face on its own connection, is ``sparkplug``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from appliance.appconfig.app import AppConfig
from appliance.mqtt.commands import CommandHandler
from appliance.mqtt.publisher import MqttPublisher
from appliance.ota.commandsig import signature_check
from appliance.ota.delivery import is_read_only
from appliance.ota.signing import TrustedKeys

log = logging.getLogger("appliance.supervisor")


def make_publisher(config: AppConfig, state_dir: Path, *, health: Callable[[], Mapping[str, Any]],
                    status: Callable[[], Mapping[str, Any]], ota: CommandHandler) -> MqttPublisher:
    """The publisher, not started yet (the caller holds it first, so its stop() closes one that failed to start):
    periodic health from ``health()``, the ``status`` command answered by ``status()``
    and the ``ota`` command by ``ota`` (docs/mqtt.md, "Signed commands")."""
    spool = config.mqtt.spool_path(state_dir)
    spool.parent.mkdir(parents=True, exist_ok=True)
    commands = config.mqtt.commands
    operators = TrustedKeys.from_paths(commands.operator_keys or config.ota.trusted_keys)
    publisher = MqttPublisher(config.mqtt, spool, signature_check=signature_check(operators),
                              nonce_path=state_dir / "mqtt-command-nonces.log", group=config.ota.group)
    if not commands.require_signature:
        log.warning("mqtt.commands.require_signature is false: anyone who can publish to %s may roll back or "
                    "replace the model", publisher.topics.command_filter)
    publisher.set_health_provider(health)
    publisher.on_command("status", lambda _command: status(), read_only=True)
    publisher.on_command("ota", ota, read_only=is_read_only)
    return publisher
