"""The codec against Eclipse Tahu's JavaScript codec (npm sparkplug-payload, tests/support/tahu.py): the committed
generated module is the .proto beside it (as protobufjs parses that file), every datatype we write Tahu reads back
to the value written, and what Tahu writes (a host's commands) we read."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator

import pytest
from google.protobuf import descriptor_pb2
from support.tahu import TahuCodec

from appliance.sparkplug import sparkplug_b_pb2
from appliance.sparkplug.payload import DataType, Metric, decode_payload, encode_payload

PROTO = Path(sparkplug_b_pb2.__file__).with_name("sparkplug_b.proto")
F = descriptor_pb2.FieldDescriptorProto
EXTENSION_MAX = 536870911  # protobuf's "max" field number

CASES = [
    Metric("i8", DataType.Int8, -128, 5), Metric("i16", DataType.Int16, -2, 5), Metric("i32", DataType.Int32, -1, 5),
    Metric("i64", DataType.Int64, -(2**63), 5), Metric("u8", DataType.UInt8, 255, 5),
    Metric("u16", DataType.UInt16, 65535, 5), Metric("u64", DataType.UInt64, 2**64 - 1, 5),
    Metric("dt", DataType.DateTime, 1_700_000_000_123, 5), Metric("f", DataType.Float, 0.5, 5),
    Metric("d", DataType.Double, 12.345678901234, 5), Metric("b", DataType.Boolean, True, 5),
    Metric("b0", DataType.Boolean, False, 5), Metric("s", DataType.String, "héllo/wörld", 5),
    Metric("t", DataType.Text, "", 5), Metric("null latency", DataType.Double, None, 5),
]


@pytest.fixture(scope="module")
def tahu() -> Iterator[TahuCodec]:
    codec = TahuCodec()
    yield codec
    codec.close()


Shape = dict[str, Any]


def _from_protobufjs(nested: dict[str, Any], prefix: str, out: Shape) -> Shape:
    for name, node in nested.items():
        full = f"{prefix}.{name}" if prefix else name
        if "values" in node:
            out[full] = {"enum": dict(node["values"])}
            continue
        if "fields" in node:
            out[full] = {
                "fields": {f: (spec["id"], spec["type"].split(".")[-1], spec.get("rule", "optional"))
                           for f, spec in node["fields"].items()},
                "oneofs": {o: sorted(spec["oneof"]) for o, spec in node.get("oneofs", {}).items()},
                "extensions": [tuple(r) for r in node.get("extensions", [])]}
        _from_protobufjs(node.get("nested", {}), full, out)
    return out


def _scalar(field: Any) -> str:
    if field.type in (F.TYPE_MESSAGE, F.TYPE_ENUM):
        return str(field.type_name.split(".")[-1])
    return str(F.Type.Name(field.type)[len("TYPE_"):].lower())


def _message(message: Any, prefix: str, out: Shape) -> None:
    full = f"{prefix}.{message.name}"
    oneofs: dict[str, list[str]] = {o.name: [] for o in message.oneof_decl}
    for f in message.field:
        if f.HasField("oneof_index"):
            oneofs[message.oneof_decl[f.oneof_index].name].append(f.name)
    out[full] = {
        "fields": {f.name: (f.number, _scalar(f), "repeated" if f.label == F.LABEL_REPEATED else "optional")
                   for f in message.field},
        "oneofs": {o: sorted(names) for o, names in oneofs.items()},
        "extensions": [(r.start, min(r.end - 1, EXTENSION_MAX)) for r in message.extension_range]}
    for enum in message.enum_type:
        out[f"{full}.{enum.name}"] = {"enum": {v.name: v.number for v in enum.value}}
    for nested in message.nested_type:
        _message(nested, full, out)


def _from_generated() -> Shape:
    file = descriptor_pb2.FileDescriptorProto.FromString(sparkplug_b_pb2.DESCRIPTOR.serialized_pb)
    out: Shape = {}
    for enum in file.enum_type:
        out[f"{file.package}.{enum.name}"] = {"enum": {v.name: v.number for v in enum.value}}
    for message in file.message_type:
        _message(message, file.package, out)
    return out


def test_the_committed_generated_module_is_the_proto_beside_it(tahu: TahuCodec) -> None:
    parsed = _from_protobufjs(tahu.schema(PROTO)["nested"], "", {})
    generated = _from_generated()
    assert generated == parsed
    assert "org.eclipse.tahu.protobuf.Payload.Metric" in generated and len(generated) == 16  # DataType and 15 messages


def test_every_datatype_we_write_tahu_reads_back(tahu: TahuCodec) -> None:
    decoded = tahu.decode(encode_payload(1_700_000_000_000, CASES, seq=255))
    assert decoded["timestamp"] == 1_700_000_000_000 and decoded["seq"] == 255
    assert [m["name"] for m in decoded["metrics"]] == [m.name for m in CASES]
    for want, got in zip(CASES, decoded["metrics"]):
        assert got["type"] == want.datatype.name and got["timestamp"] == 5, want.name  # type: ignore[union-attr]
        if isinstance(want.value, float):
            assert math.isclose(got["value"], want.value, rel_tol=1e-7), want.name
        else:
            assert got["value"] == want.value, want.name


def test_aliases_and_a_data_message_without_datatypes_read_in_tahu(tahu: TahuCodec) -> None:
    data = encode_payload(7, [Metric(None, DataType.Int64, 41, 7, alias=3), Metric(None, DataType.Double, 2.5, 7,
                                                                                     alias=4)], seq=9, datatypes=False)
    decoded = tahu.decode(data, datatypes={3: DataType.Int64, 4: DataType.Double})
    assert [(m.get("name"), m["alias"], m["type"], m["value"]) for m in decoded["metrics"]] == [
        (None, 3, "Int64", 41), (None, 4, "Double", 2.5)]
    assert tahu.decode(data)["metrics"][0]["value"] is None  # without the births' datatypes Tahu reads no value


def test_what_tahu_writes_we_read(tahu: TahuCodec) -> None:
    metrics = [{"name": m.name, "type": m.datatype.name, "value": m.value,  # type: ignore[union-attr]
                "timestamp": 5} for m in CASES] + [{"name": "u32", "type": "UInt32", "value": 2**32 - 1}]
    payload = decode_payload(tahu.encode({"timestamp": 99, "seq": 12, "metrics": metrics}))
    assert payload.timestamp_ms == 99 and payload.seq == 12
    got = {m.name: (m.datatype, m.value) for m in payload.metrics}
    for want in CASES:
        datatype, value = got[want.name]  # type: ignore[index]
        assert datatype is want.datatype, want.name
        assert math.isclose(value, want.value, rel_tol=1e-7) if isinstance(want.value, float) else value == want.value
    assert got["u32"] == (DataType.UInt32, 2**32 - 1)  # Tahu's JavaScript puts UInt32 in long_value; read too
    command = decode_payload(tahu.encode({"timestamp": 1, "metrics": [{"alias": 7, "type": "Boolean", "value": True}]}))
    assert [(m.name, m.alias, m.value) for m in command.metrics] == [(None, 7, True)]
