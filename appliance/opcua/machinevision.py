"""The OPC 40100 (Machine Vision) types this server uses, built from the specification with the NodeIds of its
published NodeSet (Opc.Ua.MachineVision.NodeSet2.xml, 1.0) in its namespace, so a client that reads by the
specification's NodeIds finds them: VisionSystemType, VisionStateMachineType (the four top-level states, their
automatic transitions, the mandatory Halt and Reset methods), ResultReadyEventType with its mandatory fields,
and the data types those fields use. The rest of the NodeSet (recipe, configuration and result management, the
sub-state machines) is not built: the appliance does not do those things.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, cast

from asyncua import Node, Server, ua
from asyncua.common.manage_nodes import create_data_type, create_encoding
from asyncua.common.structures104 import new_struct_field

from appliance.opcua.values import ERROR, HALTED, OPERATIONAL, PREOPERATIONAL, STATE_NUMBERS, TRANSITIONS

MV_NAMESPACE = "http://opcfoundation.org/UA/MachineVision"
VISION_SYSTEM_TYPE, VISION_STATE_MACHINE_TYPE, RESULT_READY_EVENT_TYPE = 1003, 1017, 1024
VISION_STATE_MACHINE = 5053  # VisionSystemType's VisionStateMachine (mandatory)
STATE_IDS = {PREOPERATIONAL: 5028, HALTED: 5029, ERROR: 5030, OPERATIONAL: 5031}
TRANSITION_IDS = {"PreoperationalToOperationalAuto": 5254, "PreoperationalToErrorAuto": 5034,
                  "PreoperationalToHaltedAuto": 5033, "OperationalToPreoperationalAuto": 5048,
                  "OperationalToErrorAuto": 5051, "OperationalToHaltedAuto": 5050, "ErrorToPreoperationalAuto": 5040,
                  "ErrorToHaltedAuto": 5042, "ErrorToOperationalAuto": 5255, "HaltedToPreoperationalAuto": 5038}
RESET_METHOD, HALT_METHOD = 7093, 7094
TRIMMED_STRING, RESULT_STATE = 3017, 3009
RESULT_ID, JOB_ID, CONFIGURATION_ID, RECIPE_ID_INTERNAL = 3021, 3016, 3008, 3013
# Each id structure's "Default Binary" encoding, as the NodeSet numbers it: the type id of the value on the wire,
# by which a client that knows 40100 (open62541's o6) decodes it.
BINARY_ENCODINGS = {RESULT_ID: 5274, JOB_ID: 5008, CONFIGURATION_ID: 5090, RECIPE_ID_INTERNAL: 5268}
# ResultReadyEventType's mandatory fields: (name, property NodeId, data type NodeId in the MV namespace or None
# for namespace 0's).
RESULT_FIELDS: tuple[tuple[str, int, int, int], ...] = (  # name, property, data type, its namespace (0 or MV)
    ("CreationTime", 6303, ua.ObjectIds.UtcTime, 0), ("InternalConfigurationId", 6142, CONFIGURATION_ID, 1),
    ("InternalRecipeId", 6302, RECIPE_ID_INTERNAL, 1), ("IsPartial", 6296, ua.ObjectIds.Boolean, 0),
    ("JobId", 6300, JOB_ID, 1), ("ResultId", 6295, RESULT_ID, 1), ("ResultState", 6298, RESULT_STATE, 1))
RESULT_CONTENT = 6306  # optional: BaseDataType array; here the appliance's event as one JSON string


def mv_id(number: int, mv: int) -> ua.NodeId:
    return ua.NodeId(cast(Any, number), cast(Any, mv))


@dataclass(frozen=True)
class MachineVisionTypes:
    namespace: int
    vision_system_type: Node
    state_machine_type: Node
    result_ready_type: Node
    state_ids: dict[str, ua.NodeId]
    transition_ids: dict[tuple[str, str], ua.NodeId]


async def _data_types(server: Server, mv: int) -> None:
    """TrimmedString, ResultStateDataType (subtypes of String and Int32) and the id structures."""
    await server.get_node(ua.ObjectIds.String).add_data_type(mv_id(TRIMMED_STRING, mv),
                                                             ua.QualifiedName("TrimmedString", mv))
    await server.get_node(ua.ObjectIds.Int32).add_data_type(mv_id(RESULT_STATE, mv),
                                                            ua.QualifiedName("ResultStateDataType", mv))
    trimmed = ua.VariantType.String  # TrimmedString on the wire; asyncua's structure codec knows only built-in types
    for number, name in ((RESULT_ID, "ResultIdDataType"), (JOB_ID, "JobIdDataType")):
        await _structure(server, mv, number, name, [new_struct_field("Id", trimmed)])
    binary_id = [new_struct_field("Id", trimmed), new_struct_field("Version", trimmed, optional=True),
                 new_struct_field("Hash", ua.VariantType.ByteString, optional=True),
                 new_struct_field("HashAlgorithm", ua.VariantType.String, optional=True),
                 new_struct_field("Description", ua.VariantType.LocalizedText, optional=True)]
    for number, name in ((CONFIGURATION_ID, "ConfigurationIdDataType"),
                         (RECIPE_ID_INTERNAL, "RecipeIdInternalDataType")):
        await _structure(server, mv, number, name, binary_id)


async def _structure(server: Server, mv: int, number: int, name: str, fields: list[ua.StructureField]) -> None:
    """A structure with the NodeSet's NodeIds for the type and its binary encoding (asyncua's ``new_struct``
    would choose the encoding's)."""
    dtype = await create_data_type(server.nodes.base_structure_type, mv_id(number, mv), ua.QualifiedName(name, mv))
    encoding = await create_encoding(dtype, mv_id(BINARY_ENCODINGS[number], mv), ua.QualifiedName("Default Binary", 0))
    definition = ua.StructureDefinition()
    definition.BaseDataType = server.nodes.base_structure_type.nodeid
    definition.StructureType = (ua.StructureType.StructureWithOptionalFields if any(f.IsOptional for f in fields)
                                else ua.StructureType.Structure)
    definition.Fields = fields
    definition.DefaultEncodingId = encoding.nodeid
    await dtype.write_data_type_definition(definition)


async def _state_machine_type(server: Server, mv: int, reset: Any,
                              halt: Any) -> tuple[Node, dict[str, ua.NodeId], dict[tuple[str, str], ua.NodeId]]:
    machine_type = await server.get_node(ua.ObjectIds.FiniteStateMachineType).add_object_type(
        mv_id(VISION_STATE_MACHINE_TYPE, mv), ua.QualifiedName("VisionStateMachineType", mv))
    states: dict[str, Node] = {}
    for name, number in STATE_NUMBERS.items():
        state = await machine_type.add_object(mv_id(STATE_IDS[name], mv), ua.QualifiedName(name, mv),
                                              objecttype=ua.ObjectIds.StateType)
        await (await state.get_child("0:StateNumber")).write_value(ua.Variant(number, ua.VariantType.UInt32))
        states[name] = state
    transitions = {}
    for (before, after), name in TRANSITIONS.items():
        transition = await machine_type.add_object(mv_id(TRANSITION_IDS[name], mv), ua.QualifiedName(name, mv),
                                                   objecttype=ua.ObjectIds.TransitionType)
        await transition.add_reference(states[before].nodeid, ua.ObjectIds.FromState)
        await transition.add_reference(states[after].nodeid, ua.ObjectIds.ToState)
        transitions[(before, after)] = transition.nodeid
    for number, name, call in ((RESET_METHOD, "Reset", reset), (HALT_METHOD, "Halt", halt)):
        method = await machine_type.add_method(mv_id(number, mv), ua.QualifiedName(name, mv), call, [], [])
        await method.set_modelling_rule(True)
    return machine_type, {name: state.nodeid for name, state in states.items()}, transitions


async def _result_ready_type(server: Server, mv: int) -> Node:
    event_type = await server.get_node(ua.ObjectIds.BaseEventType).add_object_type(
        mv_id(RESULT_READY_EVENT_TYPE, mv), ua.QualifiedName("ResultReadyEventType", mv))
    for name, number, data_type, namespace in RESULT_FIELDS:
        type_id = ua.NodeId(cast(Any, data_type), cast(Any, mv if namespace else 0))
        prop = await event_type.add_property(mv_id(number, mv), ua.QualifiedName(name, mv), None, datatype=type_id)
        await prop.set_modelling_rule(True)
    content = await event_type.add_property(mv_id(RESULT_CONTENT, mv), ua.QualifiedName("ResultContent", mv), [],
                                            varianttype=ua.VariantType.String)
    await content.set_modelling_rule(False)
    return event_type


async def _mandatory(node: Node) -> None:
    """``node`` and everything under it Mandatory, so each VisionSystem instance gets the whole state machine."""
    await node.set_modelling_rule(True)
    for child in await node.get_children():
        if not await child.get_references(ua.ObjectIds.HasModellingRule):
            await _mandatory(child)


async def build_types(server: Server, reset: Any, halt: Any) -> MachineVisionTypes:
    """The types, in the MV namespace (registered here); ``reset``/``halt`` answer the state machine's methods."""
    mv = await server.register_namespace(MV_NAMESPACE)
    await _data_types(server, mv)
    await server.load_data_type_definitions()
    machine_type, states, transitions = await _state_machine_type(server, mv, reset, halt)
    system_type = await server.get_node(ua.ObjectIds.BaseObjectType).add_object_type(
        mv_id(VISION_SYSTEM_TYPE, mv), ua.QualifiedName("VisionSystemType", mv))
    declaration = await system_type.add_object(mv_id(VISION_STATE_MACHINE, mv),
                                               ua.QualifiedName("VisionStateMachine", mv),
                                               objecttype=machine_type.nodeid)
    await _mandatory(declaration)
    return MachineVisionTypes(mv, system_type, machine_type, await _result_ready_type(server, mv), states, transitions)


def result_fields(event: Any, device_id: str, boot_id: str, served: Mapping[str, Any]) -> dict[str, Any]:
    """ResultReadyEventType's mandatory fields (and ResultContent) for one of the appliance's events: the result
    is the event (its id), the job this run of the appliance (its boot id), the recipe the served model
    (``served``: the health summary's), the configuration the device's; never partial; ResultState 1 (a result
    was produced)."""
    types = cast(Any, ua)  # the structures' classes: build_types made them
    content = {"camera": event.camera_id, "event": event.event, "seq": event.seq, "track_id": event.track_id,
               "class_name": event.class_name, "zone": event.zone, "line": event.line, "direction": event.direction}
    structure = ua.VariantType.ExtensionObject
    return {"CreationTime": ua.Variant(datetime.now(timezone.utc), ua.VariantType.DateTime),
            "ResultId": ua.Variant(types.ResultIdDataType(Id=event.event_id), structure),
            "JobId": ua.Variant(types.JobIdDataType(Id=boot_id), structure),
            "IsPartial": ua.Variant(False, ua.VariantType.Boolean), "ResultState": ua.Variant(1, ua.VariantType.Int32),
            "InternalRecipeId": ua.Variant(types.RecipeIdInternalDataType(
                Id=str(served.get("model") or ""), Version=str(served.get("version") or "base")), structure),
            "InternalConfigurationId": ua.Variant(types.ConfigurationIdDataType(Id=device_id), structure),
            "ResultContent": ua.Variant([json.dumps(content, sort_keys=True)], ua.VariantType.String)}
