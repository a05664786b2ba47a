"""The address space: one VisionSystem object (appliance.opcua.machinevision's types, with the specification's
NodeIds) for the appliance, with a variable per reading and a method per counting line, and the appliance's
result event type, a ResultReadyEventType with the appliance's own fields. Variables have string NodeIds made of
their path (``Cameras.<camera>.Lines.<line>.In``) in the appliance's namespace, so a PLC can address them without
browsing and they survive restarts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, cast

from asyncua import Node, Server, ua

from appliance.opcua.machinevision import build_types
from appliance.opcua.values import PREOPERATIONAL, TRANSITIONS, CameraLayout, Value, camera_key, device_key

RESULT_TYPE = "ApplianceResultReadyEventType"  # in the appliance's namespace, a subtype of ResultReadyEventType
RESULT_FIELDS: tuple[tuple[str, ua.VariantType], ...] = (
    ("Camera", ua.VariantType.String), ("Result", ua.VariantType.String), ("Seq", ua.VariantType.UInt64),
    ("TrackId", ua.VariantType.UInt64), ("ClassName", ua.VariantType.String), ("Zone", ua.VariantType.String),
    ("Line", ua.VariantType.String), ("Direction", ua.VariantType.String))
DEVICE_VARIABLES: tuple[tuple[str, ua.VariantType], ...] = (
    ("SoftwareVersion", ua.VariantType.String), ("Model", ua.VariantType.String),
    ("ModelVersion", ua.VariantType.String), ("Engine", ua.VariantType.String),
    ("EnginePrecision", ua.VariantType.String), ("OtaState", ua.VariantType.String),
    ("Healthy", ua.VariantType.Boolean), ("InferenceRate", ua.VariantType.Double),
    ("LatencyP50Ms", ua.VariantType.Double), ("LatencyP99Ms", ua.VariantType.Double),
    ("BootId", ua.VariantType.String), ("CountsSince", ua.VariantType.DateTime))
LAST_EVENT: tuple[tuple[str, ua.VariantType], ...] = (
    ("Time", ua.VariantType.DateTime), ("Type", ua.VariantType.String), ("Seq", ua.VariantType.UInt64),
    ("TrackId", ua.VariantType.UInt64), ("ClassName", ua.VariantType.String), ("Zone", ua.VariantType.String),
    ("Line", ua.VariantType.String), ("Direction", ua.VariantType.String))

def _nid(key: str, namespace: int) -> ua.NodeId:
    """A string NodeId (asyncua's stubs name its own aliases, not str and int)."""
    return ua.NodeId(cast(Any, key), cast(Any, namespace))


NULL_TIME = datetime(1601, 1, 1, tzinfo=timezone.utc)  # OPC UA's "no time yet" (a DateTime of 0)
ResetLine = Callable[[str, str], Awaitable[bool]]  # (camera, line) -> whether it was reset


async def _refused(_parent: ua.NodeId) -> ua.StatusCode:
    """The state machine's Halt and Reset: the appliance runs until its service stops it and recovers from Error
    by itself, so neither is something it does on a client's call."""
    return ua.StatusCode(cast(Any, ua.StatusCodes.BadNotSupported))


@dataclass
class Space:
    namespace: int
    vision: Node
    result_type: Node  # the appliance's subtype of ResultReadyEventType: its fields
    spec_result_type: ua.NodeId  # ResultReadyEventType: what the events say they are
    state: Node         # VisionStateMachine.CurrentState (LocalizedText)
    state_id: Node      # its Id (the state's NodeId)
    state_ids: dict[str, ua.NodeId]
    last_transition: Node  # VisionStateMachine.LastTransition (LocalizedText), its Id the transition's NodeId
    transition_ids: dict[tuple[str, str], ua.NodeId]
    counter: ua.VariantType  # UInt64, or UInt32 (wrapping) for PLCs without 64-bit integers
    device_id: str
    variables: dict[str, ua.NodeId] = field(default_factory=dict)


async def _result_type(server: Server, idx: int, spec_type: Node) -> Node:
    """The appliance's result events: ResultReadyEventType's fields and the appliance's own, in its namespace."""
    result_type = await spec_type.add_object_type(_nid(RESULT_TYPE, idx), ua.QualifiedName(RESULT_TYPE, idx))
    for name, vtype in RESULT_FIELDS:
        prop = await result_type.add_property(_nid(f"{RESULT_TYPE}.{name}", idx), ua.QualifiedName(name, idx),
                                              ua.Variant(ua.get_default_value(vtype), vtype))
        await prop.set_modelling_rule(True)
    return result_type


def as_counter(value: Any, vtype: ua.VariantType, counter: ua.VariantType) -> tuple[Any, ua.VariantType]:
    """A UInt64 reading as the configured counter type: UInt32 wraps at 2**32 (``opcua.counter_type``)."""
    if vtype == ua.VariantType.UInt64 and counter == ua.VariantType.UInt32:
        return int(value) % 2 ** 32, counter
    return value, vtype


async def _variable(parent: Node, idx: int, key: str, name: str, vtype: ua.VariantType,
                    variables: dict[str, ua.NodeId], counter: ua.VariantType = ua.VariantType.UInt64) -> None:
    _, vtype = as_counter(0, vtype, counter)
    initial = {ua.VariantType.String: "", ua.VariantType.DateTime: NULL_TIME}.get(vtype, ua.get_default_value(vtype))
    node = await parent.add_variable(_nid(key, idx), ua.QualifiedName(name, idx), ua.Variant(initial, vtype))
    variables[key] = node.nodeid


async def _camera(cameras: Node, idx: int, layout: CameraLayout, variables: dict[str, ua.NodeId],
                  reset: ResetLine, counter: ua.VariantType) -> None:
    cam = layout.camera_id
    node = await cameras.add_object(_nid(camera_key(cam), idx), ua.QualifiedName(cam, idx))
    for name, vtype in (("State", ua.VariantType.String), ("Fps", ua.VariantType.Double),
                        ("ActiveTracks", ua.VariantType.UInt64), ("EventCount", ua.VariantType.UInt64)):
        await _variable(node, idx, camera_key(cam, name), name, vtype, variables, counter)
    last = await node.add_object(_nid(camera_key(cam, "LastEvent"), idx), ua.QualifiedName("LastEvent", idx))
    for name, vtype in LAST_EVENT:
        await _variable(last, idx, camera_key(cam, "LastEvent", name), name, vtype, variables, counter)
    zones = await node.add_folder(_nid(camera_key(cam, "Zones"), idx), ua.QualifiedName("Zones", idx))
    for zone in layout.zones:
        zone_node = await zones.add_object(_nid(camera_key(cam, "Zones", zone), idx), ua.QualifiedName(zone, idx))
        for name in ("Current", "Entered", "Exited"):
            await _variable(zone_node, idx, camera_key(cam, "Zones", zone, name), name, ua.VariantType.UInt64,
                            variables, counter)
    lines = await node.add_folder(_nid(camera_key(cam, "Lines"), idx), ua.QualifiedName("Lines", idx))
    for line in layout.lines:
        line_node = await lines.add_object(_nid(camera_key(cam, "Lines", line), idx), ua.QualifiedName(line, idx))
        for name in ("In", "Out"):
            await _variable(line_node, idx, camera_key(cam, "Lines", line, name), name, ua.VariantType.UInt64,
                            variables, counter)
        await line_node.add_method(_nid(camera_key(cam, "Lines", line, "ResetCounts"), idx),
                                   ua.QualifiedName("ResetCounts", idx), _resetter(reset, cam, line), [], [_RESET_DONE])


_RESET_DONE = ua.Argument(Name="Reset", DataType=ua.NodeId(cast(Any, ua.ObjectIds.Boolean)), ValueRank=-1,
                          Description=ua.LocalizedText("true: the line's In and Out are 0 now; false: no such line"))


def _resetter(reset: ResetLine, camera_id: str, line: str) -> Callable[..., Awaitable[list[ua.Variant]]]:
    async def call(_parent: ua.NodeId) -> list[ua.Variant]:
        return [ua.Variant(await reset(camera_id, line), ua.VariantType.Boolean)]
    return call


async def build(server: Server, app_namespace: str, device_id: str, cameras: Sequence[CameraLayout],
                reset: ResetLine, counter: ua.VariantType = ua.VariantType.UInt64) -> Space:
    """Objects/<device id> (a VisionSystemType) with VisionStateMachine, Device, and Cameras/<camera>."""
    types = await build_types(server, _refused, _refused)
    idx = await server.register_namespace(app_namespace)
    vision = await server.nodes.objects.add_object(_nid("VisionSystem", idx), ua.QualifiedName(device_id, idx),
                                                   objecttype=types.vision_system_type.nodeid)
    await server.nodes.server.add_reference(vision.nodeid, ua.ObjectIds.HasNotifier)  # its events reach Server's
    machine = await vision.get_child(f"{types.namespace}:VisionStateMachine")
    for method in ("Halt", "Reset"):  # instantiated from the type, which does not carry the callback over
        server.link_method(await machine.get_child(f"{types.namespace}:{method}"), _refused)
    state = await machine.get_child("0:CurrentState")
    state_id = await state.get_child("0:Id")
    await _write(server, await machine.get_child("0:AvailableStates"), list(types.state_ids.values()),
                 ua.VariantType.NodeId)
    await _write(server, await machine.get_child("0:AvailableTransitions"), list(types.transition_ids.values()),
                 ua.VariantType.NodeId)
    variables: dict[str, ua.NodeId] = {}
    device = await vision.add_object(_nid("Device", idx), ua.QualifiedName("Device", idx))
    for name, vtype in DEVICE_VARIABLES:
        await _variable(device, idx, device_key(name), name, vtype, variables)
    folder = await vision.add_folder(_nid("Cameras", idx), ua.QualifiedName("Cameras", idx))
    for layout in cameras:
        await _camera(folder, idx, layout, variables, reset, counter)
    space = Space(idx, vision, await _result_type(server, idx, types.result_ready_type),
                  types.result_ready_type.nodeid, state, state_id,
                  types.state_ids, await machine.get_child("0:LastTransition"), types.transition_ids, counter,
                  device_id, variables)
    await write_state(server, space, PREOPERATIONAL)
    return space


async def _write(server: Server, node: Node, value: Any, vtype: ua.VariantType) -> None:
    await server.write_attribute_value(node.nodeid, ua.DataValue(ua.Variant(value, vtype)))


async def write_state(server: Server, space: Space, state: str, before: str | None = None) -> None:
    """CurrentState and its Id; with ``before``, LastTransition (``before`` -> ``state``) and its Id too."""
    if before is not None:
        transition = space.transition_ids[(before, state)]
        await _write(server, space.last_transition, ua.LocalizedText(TRANSITIONS[(before, state)], "en"),
                     ua.VariantType.LocalizedText)
        await _write(server, await space.last_transition.get_child("0:Id"), transition, ua.VariantType.NodeId)
    await _write(server, space.state, ua.LocalizedText(state, "en"), ua.VariantType.LocalizedText)
    await _write(server, space.state_id, space.state_ids[state], ua.VariantType.NodeId)


async def write_values(server: Server, space: Space, values: dict[str, Value], written: dict[str, Any]) -> int:
    """Write the values that changed since ``written`` (updated); unknown keys (a zone not in the layout) are
    skipped. How many were written."""
    count = 0
    for key, (value, vtype) in values.items():
        node = space.variables.get(key)
        if node is None or written.get(key) == value:
            continue
        await server.write_attribute_value(node, ua.DataValue(ua.Variant(*as_counter(value, vtype, space.counter))))
        written[key] = value
        count += 1
    return count
