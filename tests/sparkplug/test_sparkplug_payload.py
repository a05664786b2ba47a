"""The appliance's Sparkplug B codec (generated from the spec's .proto) against a schema the tests build on their own
(tests/support/sparkplug_b.py): what we write decodes there to the same values and is byte for byte what that
schema writes; what it writes (a host's NCMD) decodes here; malformed bytes raise PayloadError. The codec against
Eclipse Tahu's own JavaScript codec: tests/sparkplug/test_sparkplug_interop.py."""

from __future__ import annotations

import math

import pytest
from support.sparkplug_b import DATATYPES, Payload, metric_value, parse, rebirth_command

from appliance.sparkplug.payload import DataType, Metric, PayloadError, decode_payload, encode_payload

CASES = [
    Metric("i8", DataType.Int8, -128, 5), Metric("i16", DataType.Int16, -2, 5), Metric("i32", DataType.Int32, -1, 5),
    Metric("i64", DataType.Int64, -(2**63), 5), Metric("u8", DataType.UInt8, 255, 5),
    Metric("u16", DataType.UInt16, 65535, 5), Metric("u32", DataType.UInt32, 2**32 - 1, 5),
    Metric("u64", DataType.UInt64, 2**64 - 1, 5), Metric("dt", DataType.DateTime, 1_700_000_000_123, 5),
    Metric("f", DataType.Float, 0.5, 5), Metric("d", DataType.Double, 12.345678901234, 5),
    Metric("b", DataType.Boolean, True, 5), Metric("b0", DataType.Boolean, False, None),
    Metric("s", DataType.String, "héllo/wörld", 5), Metric("t", DataType.Text, "", 5),
    Metric("null latency", DataType.Double, None, 5),
]


BITS = {DataType.Int8: 8, DataType.Int16: 16, DataType.Int32: 32, DataType.UInt8: 8, DataType.UInt16: 16,
        DataType.UInt32: 32, DataType.Int64: 64, DataType.UInt64: 64, DataType.DateTime: 64}


def _reference(timestamp: int, metrics: list[Metric], seq: int | None) -> bytes:
    """The same payload serialized by google.protobuf from the spec's schema."""
    message = Payload()
    message.timestamp = timestamp
    for m in metrics:
        pm = message.metrics.add()
        pm.name, pm.datatype = m.name, int(m.datatype)
        if m.timestamp_ms is not None:
            pm.timestamp = m.timestamp_ms
        if m.value is None:
            pm.is_null = True
        elif m.datatype in BITS:  # two's complement in the field's width: Int8 -1 as 0xFFFFFFFF
            field = "long_value" if BITS[m.datatype] == 64 else "int_value"
            setattr(pm, field, int(m.value) & ((1 << (64 if BITS[m.datatype] == 64 else 32)) - 1))
        elif m.datatype is DataType.Float:
            pm.float_value = float(m.value)
        elif m.datatype is DataType.Double:
            pm.double_value = float(m.value)
        elif m.datatype is DataType.Boolean:
            pm.boolean_value = bool(m.value)
        else:
            pm.string_value = str(m.value)
    if seq is not None:
        message.seq = seq
    return bytes(message.SerializeToString())


def test_every_datatype_decodes_with_the_spec_schema_to_the_value_written() -> None:
    data = encode_payload(1_700_000_000_000, CASES, seq=255)
    decoded = parse(data)
    assert decoded.timestamp == 1_700_000_000_000 and decoded.seq == 255
    assert [m.name for m in decoded.metrics] == [m.name for m in CASES]
    for want, got in zip(CASES, decoded.metrics):
        assert got.datatype == DATATYPES[want.datatype.name], want.name
        assert (got.timestamp if got.HasField("timestamp") else None) == want.timestamp_ms, want.name
        value = metric_value(got)
        if isinstance(want.value, float):
            assert value is not None and math.isclose(value, want.value, rel_tol=1e-7), want.name
        else:
            assert value == want.value and type(value) is type(want.value), want.name


def test_bytes_are_what_google_protobuf_writes() -> None:
    assert encode_payload(42, CASES, seq=7) == _reference(42, CASES, 7)
    assert encode_payload(42, [Metric("bdSeq", DataType.Int64, 3)], seq=None) == \
        _reference(42, [Metric("bdSeq", DataType.Int64, 3)], None)


def test_our_reader_decodes_what_google_protobuf_writes() -> None:
    payload = decode_payload(_reference(99, CASES, 12))
    assert payload.timestamp_ms == 99 and payload.seq == 12
    for want, got in zip(CASES, payload.metrics):
        assert (got.name, got.datatype, got.timestamp_ms) == (want.name, want.datatype, want.timestamp_ms)
        if isinstance(want.value, float):
            assert isinstance(got.value, float) and math.isclose(got.value, want.value, rel_tol=1e-7)
        else:
            assert got.value == want.value
    own_width = Payload()
    own_width.metrics.add(name="i8", datatype=1, int_value=0x80)  # -128 in 8 bits, not sign-extended: read too
    assert decode_payload(own_width.SerializeToString()).metrics[0].value == -128
    (rebirth,) = decode_payload(rebirth_command()).metrics
    assert (rebirth.name, rebirth.datatype, rebirth.value) == ("Node Control/Rebirth", DataType.Boolean, True)


def test_fields_an_edge_node_does_not_use_are_ignored() -> None:
    message = Payload()
    message.uuid, message.body = "abc", b"\x00\x01"
    metric = message.metrics.add()
    metric.name, metric.alias, metric.datatype, metric.boolean_value, metric.is_transient = "x", 9, 11, True, True
    (got,) = decode_payload(message.SerializeToString()).metrics
    assert (got.name, got.value) == ("x", True)


@pytest.mark.parametrize("metric", [
    Metric("too big", DataType.UInt8, 256), Metric("negative", DataType.UInt64, -1),
    Metric("too small", DataType.Int16, -32769), Metric("bool as int", DataType.Int32, True),
    Metric("str as int", DataType.Int64, "1"), Metric("int as bool", DataType.Boolean, 1),
    Metric("str as double", DataType.Double, "1.0"), Metric("int as string", DataType.String, 5),
])
def test_a_value_its_datatype_cannot_hold_is_refused(metric: Metric) -> None:
    with pytest.raises(ValueError, match=repr(metric.name)):
        encode_payload(1, [metric], seq=0)


@pytest.mark.parametrize("data, why", [
    (rebirth_command()[:-1], "not a Sparkplug B payload"),         # truncated
    (b"\x08", "not a Sparkplug B payload"),                         # truncated varint
    (b"\x08" + b"\xff" * 11, "not a Sparkplug B payload"),         # a varint over 10 bytes
    (b"\x00\x01", "not a Sparkplug B payload"),                     # field number 0
    (b"\x12\x02\x20\x63", "datatype 99"),                          # a metric with datatype 99
    (b"\x12\x02\x20\x0b", "neither a value nor is_null"),          # a Boolean metric with no value
    (b"\x12\x04\x20\x0b\x50\x01", "Boolean in int_value"),        # a Boolean in the integer field
    (b"\x12\x06\x20\x0a\x69\x00\x00\x00", "not a Sparkplug B payload"),  # truncated fixed64
])
def test_malformed_bytes_raise_payload_error(data: bytes, why: str) -> None:
    with pytest.raises(PayloadError, match=why):
        decode_payload(data)
