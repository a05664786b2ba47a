"""The Sparkplug B payload (``org.eclipse.tahu.protobuf.Payload``), written and read as protobuf wire format by hand.

The part of the schema an edge node needs is small, and this keeps protoc, generated code and a new dependency
out of the appliance. The reader skips fields it does not know, so a command from a host that sends more than we
write still decodes; malformed bytes raise ``PayloadError``. The fields: docs/sparkplug.md, "Payload"."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Optional, Sequence, Union

Scalar = Union[bool, int, float, str]


class PayloadError(ValueError):
    """Bytes that are not a Sparkplug B payload (truncated, a bad wire type, a value its datatype cannot hold)."""


class DataType(IntEnum):
    """The spec's ``DataType`` enum: the scalar types (datasets, templates and arrays are not used here)."""

    Int8 = 1
    Int16 = 2
    Int32 = 3
    Int64 = 4
    UInt8 = 5
    UInt16 = 6
    UInt32 = 7
    UInt64 = 8
    Float = 9
    Double = 10
    Boolean = 11
    String = 12
    DateTime = 13
    Text = 14


# datatype -> (value field, bits, signed) for the integer types
_INTEGER: dict[DataType, tuple[int, int, bool]] = {
    DataType.Int8: (10, 8, True), DataType.Int16: (10, 16, True), DataType.Int32: (10, 32, True),
    DataType.UInt8: (10, 8, False), DataType.UInt16: (10, 16, False), DataType.UInt32: (10, 32, False),
    DataType.Int64: (11, 64, True), DataType.UInt64: (11, 64, False), DataType.DateTime: (11, 64, False),
}
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


@dataclass(frozen=True)
class Metric:
    """One metric: ``value`` None is sent as ``is_null`` (e.g. a latency before the first frame)."""

    name: str
    datatype: DataType
    value: Optional[Scalar]
    timestamp_ms: Optional[int] = None


@dataclass(frozen=True)
class Payload:
    timestamp_ms: Optional[int]
    seq: Optional[int]
    metrics: list[Metric] = field(default_factory=list)


# -- writing -----------------------------------------------------------------------------------------------------

def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _length_delimited(number: int, data: bytes) -> bytes:
    return _key(number, _BYTES) + _varint(len(data)) + data


def _integer_field(metric: Metric) -> bytes:
    number, bits, signed = _INTEGER[metric.datatype]
    value = metric.value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"metric {metric.name!r}: {metric.datatype.name} needs an int, not {value!r}")
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not low <= value <= high:
        raise ValueError(f"metric {metric.name!r}: {value} does not fit {metric.datatype.name}")
    # Two's complement in the type's own width (Int8 -1 is 0xFF): Tahu's Java reader casts to the width, its Python
    # reader subtracts 2**bits; a sign extended to 32 bits would read wrong in the latter.
    return _key(number, _VARINT) + _varint(value & ((1 << bits) - 1))


def _value_field(metric: Metric) -> bytes:
    dt, value = metric.datatype, metric.value
    if dt in _INTEGER:
        return _integer_field(metric)
    if dt is DataType.Boolean:
        if not isinstance(value, bool):
            raise ValueError(f"metric {metric.name!r}: Boolean needs a bool, not {value!r}")
        return _key(14, _VARINT) + _varint(int(value))
    if dt in (DataType.Float, DataType.Double):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"metric {metric.name!r}: {dt.name} needs a number, not {value!r}")
        if dt is DataType.Float:
            return _key(12, _FIXED32) + struct.pack("<f", value)
        return _key(13, _FIXED64) + struct.pack("<d", value)
    if not isinstance(value, str):
        raise ValueError(f"metric {metric.name!r}: {dt.name} needs a str, not {value!r}")
    return _length_delimited(15, value.encode("utf-8"))


def encode_metric(metric: Metric) -> bytes:
    """One ``Payload.Metric``. Raises ValueError for a value its datatype cannot hold."""
    out = _length_delimited(1, metric.name.encode("utf-8"))
    if metric.timestamp_ms is not None:
        out += _key(3, _VARINT) + _varint(metric.timestamp_ms)
    out += _key(4, _VARINT) + _varint(int(metric.datatype))
    if metric.value is None:
        return out + _key(7, _VARINT) + _varint(1)
    return out + _value_field(metric)


def encode_payload(timestamp_ms: int, metrics: Sequence[Metric], seq: Optional[int]) -> bytes:
    """A ``Payload``; ``seq`` None leaves it out (NDEATH carries none)."""
    out = _key(1, _VARINT) + _varint(timestamp_ms)
    for metric in metrics:
        out += _length_delimited(2, encode_metric(metric))
    if seq is not None:
        out += _key(3, _VARINT) + _varint(seq)
    return out


# -- reading -----------------------------------------------------------------------------------------------------

def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise PayloadError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise PayloadError("varint longer than 10 bytes")


def _fields(data: bytes) -> list[tuple[int, int, Union[int, bytes]]]:
    """(field number, wire type, value) in order: an int for varints, the raw bytes otherwise."""
    found: list[tuple[int, int, Union[int, bytes]]] = []
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise PayloadError("field number 0")
        value: Union[int, bytes]
        if wire == _VARINT:
            value, pos = _read_varint(data, pos)
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if pos + size > len(data):
                raise PayloadError(f"truncated fixed{size * 8} field {number}")
            value, pos = data[pos:pos + size], pos + size
        elif wire == _BYTES:
            size, pos = _read_varint(data, pos)
            if pos + size > len(data):
                raise PayloadError(f"truncated field {number}: {size} bytes announced, {len(data) - pos} left")
            value, pos = data[pos:pos + size], pos + size
        else:
            raise PayloadError(f"wire type {wire} (field {number}) is not used by Sparkplug B")
        found.append((number, wire, value))
    return found


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def decode_metric(data: bytes) -> Metric:
    name, timestamp, datatype, is_null = "", None, None, False
    raw: dict[int, Union[int, bytes]] = {}
    for number, wire, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            name = value.decode("utf-8", errors="replace")
        elif number == 3 and isinstance(value, int):
            timestamp = value
        elif number == 4 and isinstance(value, int):
            datatype = value
        elif number == 7 and isinstance(value, int):
            is_null = bool(value)
        elif 10 <= number <= 15:
            raw[number] = value
    try:
        dt = DataType(-1 if datatype is None else datatype)
    except ValueError:
        raise PayloadError(f"metric {name!r}: datatype {datatype} is not a scalar Sparkplug type") from None
    if is_null:
        return Metric(name, dt, None, timestamp)
    return Metric(name, dt, _decode_value(name, dt, raw), timestamp)


def _decode_value(name: str, dt: DataType, raw: dict[int, Union[int, bytes]]) -> Scalar:
    if dt in _INTEGER:
        number, bits, signed = _INTEGER[dt]
        value = raw.get(number)
        if not isinstance(value, int):
            raise PayloadError(f"metric {name!r}: {dt.name} without its value field {number}")
        return _signed(value, bits) if signed else value
    if dt is DataType.Boolean:
        flag = raw.get(14)
        if not isinstance(flag, int):
            raise PayloadError(f"metric {name!r}: Boolean without boolean_value")
        return bool(flag)
    if dt in (DataType.Float, DataType.Double):
        number, fmt = (12, "<f") if dt is DataType.Float else (13, "<d")
        packed = raw.get(number)
        if not isinstance(packed, bytes) or len(packed) != struct.calcsize(fmt):
            raise PayloadError(f"metric {name!r}: {dt.name} without its value field {number}")
        return float(struct.unpack(fmt, packed)[0])
    text = raw.get(15)
    if not isinstance(text, bytes):
        raise PayloadError(f"metric {name!r}: {dt.name} without string_value")
    return text.decode("utf-8", errors="replace")


def decode_payload(data: bytes) -> Payload:
    """A ``Payload`` from its bytes. Raises PayloadError for anything malformed."""
    timestamp, seq, metrics = None, None, []
    for number, _wire, value in _fields(data):
        if number == 1 and isinstance(value, int):
            timestamp = value
        elif number == 2 and isinstance(value, bytes):
            metrics.append(decode_metric(value))
        elif number == 3 and isinstance(value, int):
            seq = value
    return Payload(timestamp, seq, metrics)
