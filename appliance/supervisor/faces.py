"""The plant-facing servers beside the MQTT publisher that a reload restarts alone (docs/supervisor.md, "Reload"):
the Sparkplug edge node (a new session: NDEATH, then NBIRTH and DBIRTHs with the next bdSeq) and the OPC UA server
(its address space built again from the cameras, zones and lines in force). Each is stopped, then started with the
settings in force; one that cannot start with them is started again with those it ran with, and the reply names
the problem."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from appliance.appconfig.app import AppConfig
from appliance.mqtt.config import MqttConfig
from appliance.mqtt.errors import MqttConfigError
from appliance.opcua.errors import OpcUaStartError
from appliance.sparkplug.node import EdgeNode
from appliance.supervisor.reloadplan import ReloadPlan

if TYPE_CHECKING:  # asyncua is imported only when an opcua: section asks for the server
    from appliance.opcua.server import OpcUaServer

log = logging.getLogger(__name__)
# What the appliance restarts a face with: the settings a reload put in force.
RestartFaces = Callable[[ReloadPlan, AppConfig, AppConfig, Callable[[str], None]], ReloadPlan]


def restart_sparkplug(node: EdgeNode | None, plan: ReloadPlan, old: MqttConfig, now: MqttConfig,
                      make: Callable[[MqttConfig], EdgeNode],
                      on_error: Callable[[str], None]) -> tuple[EdgeNode | None, ReloadPlan]:
    """The node for ``now`` (the plan names its changed keys), or ``node`` itself when the plan names none."""
    if not plan.sparkplug or node is None:
        return node, plan
    node.stop()
    try:
        return make(now).start(), plan
    except MqttConfigError as exc:
        on_error(f"mqtt.sparkplug: {exc}; the node keeps its settings")
        return make(old).start(), dataclasses.replace(plan, sparkplug=())


def restart_opcua(server: OpcUaServer | None, plan: ReloadPlan, old: AppConfig, now: AppConfig,
                  make: Callable[[AppConfig], OpcUaServer],
                  on_error: Callable[[str], None]) -> tuple[OpcUaServer | None, ReloadPlan]:
    """The server for ``now`` (its ``opcua`` section and cameras), or ``server`` itself when the plan names no
    change of it. Clients see Halted for ``opcua.halt_grace_s``, then reconnect and browse the new address space."""
    if not plan.opcua or server is None:
        return server, plan
    server.stop()
    try:
        return make(now), plan
    except OpcUaStartError as exc:
        on_error(f"opcua: {exc}; the server runs with its settings and address space until a restart")
        return make(old), dataclasses.replace(plan, opcua=())
