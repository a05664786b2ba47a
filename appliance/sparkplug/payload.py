"""The Sparkplug B payload (``org.eclipse.tahu.protobuf.Payload``) through google.protobuf and the specification's
schema, ``sparkplug_b.proto`` beside this module, compiled into ``sparkplug_b_pb2`` (committed; how to
regenerate it: docs/sparkplug.md, "Payload"). This module maps the scalar metrics an edge node uses to and from
that message; malformed bytes raise ``PayloadError``."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Optional, Sequence, Union

from google.protobuf.message import DecodeError

from appliance.errors import ApplianceError
from appliance.sparkplug import sparkplug_b_pb2 as pb

Scalar = Union[bool, int, float, str]


class PayloadError(ApplianceError, ValueError):
    """Bytes that are not a Sparkplug B payload (truncated, a bad wire type, a value its datatype cannot hold)."""


class DataType(IntEnum):
    """The scalar types of the schema's ``DataType`` enum (the same numbers; datasets, templates and arrays are
    not used here)."""

    Int8 = pb.Int8
    Int16 = pb.Int16
    Int32 = pb.Int32
    Int64 = pb.Int64
    UInt8 = pb.UInt8
    UInt16 = pb.UInt16
    UInt32 = pb.UInt32
    UInt64 = pb.UInt64
    Float = pb.Float
    Double = pb.Double
    Boolean = pb.Boolean
    String = pb.String
    DateTime = pb.DateTime
    Text = pb.Text


# datatype -> (value field, bits, signed) for the integer types. Signed values travel as two's complement of the
# field's width (Int8 -1 as 0xFFFFFFFF), as Eclipse Tahu's Java and JavaScript codecs write them.
_INTEGER: dict[DataType, tuple[str, int, bool]] = {
    DataType.Int8: ("int_value", 8, True), DataType.Int16: ("int_value", 16, True),
    DataType.Int32: ("int_value", 32, True), DataType.UInt8: ("int_value", 8, False),
    DataType.UInt16: ("int_value", 16, False), DataType.UInt32: ("int_value", 32, False),
    DataType.Int64: ("long_value", 64, True), DataType.UInt64: ("long_value", 64, False),
    DataType.DateTime: ("long_value", 64, False),
}
_FLOATING = {DataType.Float: "float_value", DataType.Double: "double_value"}


@dataclass(frozen=True)
class Metric:
    """One metric. ``value`` None is sent as ``is_null``. In births a metric has its name, datatype and alias; in
    DATA only its alias (``name`` None). A decoded metric's ``datatype`` is None when the sender left it out."""

    name: Optional[str]
    datatype: Optional[DataType]
    value: Optional[Scalar]
    timestamp_ms: Optional[int] = None
    alias: Optional[int] = None


@dataclass(frozen=True)
class Payload:
    timestamp_ms: Optional[int]
    seq: Optional[int]
    metrics: list[Metric] = field(default_factory=list)


# -- writing -----------------------------------------------------------------------------------------------------

def _set_value(target: Any, metric: Metric) -> None:
    datatype, value = metric.datatype, metric.value
    if datatype in _INTEGER:
        number, bits, signed = _INTEGER[datatype]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"metric {metric.name!r}: {datatype.name} needs an int, not {value!r}")
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        if not low <= value <= high:
            raise ValueError(f"metric {metric.name!r}: {value} does not fit {datatype.name}")
        setattr(target, number, value & ((1 << (32 if number == "int_value" else 64)) - 1))
    elif datatype in _FLOATING:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"metric {metric.name!r}: {datatype.name} needs a number, not {value!r}")
        setattr(target, _FLOATING[datatype], float(value))
    elif datatype is DataType.Boolean:
        if not isinstance(value, bool):
            raise ValueError(f"metric {metric.name!r}: Boolean needs a bool, not {value!r}")
        target.boolean_value = value
    elif datatype in (DataType.String, DataType.Text):
        if not isinstance(value, str):
            raise ValueError(f"metric {metric.name!r}: {datatype.name} needs a str, not {value!r}")
        target.string_value = value
    else:
        raise ValueError(f"metric {metric.name!r}: no datatype to write its value with")


def encode_payload(timestamp_ms: int, metrics: Sequence[Metric], seq: Optional[int], *,
                   datatypes: bool = True) -> bytes:
    """A ``Payload``; ``seq`` None leaves it out (NDEATH carries none). ``datatypes`` False leaves each metric's
    datatype out (the spec's advice for DATA messages: the host knows it from the birth)."""
    message = pb.Payload(timestamp=timestamp_ms)
    for metric in metrics:
        out = message.metrics.add()
        if metric.name is not None:
            out.name = metric.name
        if metric.alias is not None:
            out.alias = metric.alias
        if metric.timestamp_ms is not None:
            out.timestamp = metric.timestamp_ms
        if datatypes and metric.datatype is not None:
            out.datatype = int(metric.datatype)
        if metric.value is None:
            out.is_null = True
        else:
            _set_value(out, metric)
    if seq is not None:
        message.seq = seq
    return bytes(message.SerializeToString())


# -- reading -----------------------------------------------------------------------------------------------------

def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _value(name: str, datatype: Optional[DataType], metric: Any) -> Scalar:
    which = metric.WhichOneof("value")
    if which is None:
        raise PayloadError(f"metric {name!r}: neither a value nor is_null")
    if which not in ("int_value", "long_value", "float_value", "double_value", "boolean_value", "string_value"):
        raise PayloadError(f"metric {name!r}: a {which}, which no scalar metric carries")
    value: Scalar = getattr(metric, which)
    if datatype is None:
        return value
    expected = (_INTEGER[datatype][0] if datatype in _INTEGER else _FLOATING.get(datatype) or
                ("boolean_value" if datatype is DataType.Boolean else "string_value"))
    tahu_js_uint32 = datatype is DataType.UInt32 and which == "long_value"  # Tahu's JavaScript codec writes it so
    if which != expected and not tahu_js_uint32:
        raise PayloadError(f"metric {name!r}: {datatype.name} in {which}, not {expected}")
    if datatype in _INTEGER and _INTEGER[datatype][2]:
        return _signed(int(value), _INTEGER[datatype][1])  # Int8/16 may also come sign-extended to 32 bits
    return value


def _metric(metric: Any) -> Metric:
    name = metric.name if metric.HasField("name") else None
    alias = metric.alias if metric.HasField("alias") else None
    label = name if name is not None else f"alias {alias}"
    datatype: Optional[DataType] = None
    if metric.HasField("datatype"):
        try:
            datatype = DataType(metric.datatype)
        except ValueError:
            raise PayloadError(f"metric {label!r}: datatype {metric.datatype} is not a scalar Sparkplug type") \
                from None
    timestamp = metric.timestamp if metric.HasField("timestamp") else None
    value = None if metric.is_null else _value(label, datatype, metric)
    return Metric(name, datatype, value, timestamp, alias)


def decode_payload(data: bytes) -> Payload:
    """A ``Payload`` from its bytes. Raises PayloadError for anything malformed."""
    message = pb.Payload()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise PayloadError(f"not a Sparkplug B payload: {exc}") from None
    return Payload(message.timestamp if message.HasField("timestamp") else None,
                   message.seq if message.HasField("seq") else None,
                   [_metric(m) for m in message.metrics])
