"""An independent Sparkplug B reader for tests: the ``Payload`` message of the spec's ``sparkplug_b.proto``
(Eclipse Tahu, ``org.eclipse.tahu.protobuf``, proto2) built as a descriptor here and decoded by google.protobuf,
never by ``appliance.sparkplug.payload``. Transcribed from the spec's .proto (the fields an edge node's scalar
metrics use; MetaData, PropertySet, DataSet, Template and extensions are left out, and google.protobuf keeps
such fields as unknown fields):

    enum DataType { Unknown = 0; Int8 = 1; Int16 = 2; Int32 = 3; Int64 = 4; UInt8 = 5; UInt16 = 6; UInt32 = 7;
                    UInt64 = 8; Float = 9; Double = 10; Boolean = 11; String = 12; DateTime = 13; Text = 14; ... }
    message Payload {
        message Metric {
            optional string name = 1;  optional uint64 alias = 2;  optional uint64 timestamp = 3;
            optional uint32 datatype = 4;  optional bool is_historical = 5;  optional bool is_transient = 6;
            optional bool is_null = 7;
            oneof value { uint32 int_value = 10; uint64 long_value = 11; float float_value = 12;
                          double double_value = 13; bool boolean_value = 14; string string_value = 15;
                          bytes bytes_value = 16; }
        }
        optional uint64 timestamp = 1;  repeated Metric metrics = 2;  optional uint64 seq = 3;
        optional string uuid = 4;  optional bytes body = 5;
    }

Also a recording subscriber on ``spBv1.0/#`` that decodes every message it gets, in arrival order.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from support.subscriber import Address, Message, Subscriber

F = descriptor_pb2.FieldDescriptorProto
DATATYPES = {"Int8": 1, "Int16": 2, "Int32": 3, "Int64": 4, "UInt8": 5, "UInt16": 6, "UInt32": 7, "UInt64": 8,
             "Float": 9, "Double": 10, "Boolean": 11, "String": 12, "DateTime": 13, "Text": 14}
VALUE_FIELDS = ["int_value", "long_value", "float_value", "double_value", "boolean_value", "string_value",
                "bytes_value"]


def _field(message: descriptor_pb2.DescriptorProto, name: str, number: int, kind: int, *,
           label: int = F.LABEL_OPTIONAL, type_name: str = "", oneof: Optional[int] = None) -> None:
    f = message.field.add(name=name, number=number, type=kind, label=label)
    if type_name:
        f.type_name = type_name
    if oneof is not None:
        f.oneof_index = oneof


def _build() -> Any:
    proto = descriptor_pb2.FileDescriptorProto(name="test_sparkplug_b.proto", package="org.eclipse.tahu.protobuf",
                                               syntax="proto2")
    enum = proto.enum_type.add(name="DataType")
    enum.value.add(name="Unknown", number=0)
    for name, number in DATATYPES.items():
        enum.value.add(name=name, number=number)
    payload = proto.message_type.add(name="Payload")
    metric = payload.nested_type.add(name="Metric")
    _field(metric, "name", 1, F.TYPE_STRING)
    _field(metric, "alias", 2, F.TYPE_UINT64)
    _field(metric, "timestamp", 3, F.TYPE_UINT64)
    _field(metric, "datatype", 4, F.TYPE_UINT32)
    _field(metric, "is_historical", 5, F.TYPE_BOOL)
    _field(metric, "is_transient", 6, F.TYPE_BOOL)
    _field(metric, "is_null", 7, F.TYPE_BOOL)
    metric.oneof_decl.add(name="value")
    for number, (name, kind) in enumerate([("int_value", F.TYPE_UINT32), ("long_value", F.TYPE_UINT64),
                                           ("float_value", F.TYPE_FLOAT), ("double_value", F.TYPE_DOUBLE),
                                           ("boolean_value", F.TYPE_BOOL), ("string_value", F.TYPE_STRING),
                                           ("bytes_value", F.TYPE_BYTES)], start=10):
        _field(metric, name, number, kind, oneof=0)
    _field(payload, "timestamp", 1, F.TYPE_UINT64)
    _field(payload, "metrics", 2, F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
           type_name=".org.eclipse.tahu.protobuf.Payload.Metric")
    _field(payload, "seq", 3, F.TYPE_UINT64)
    _field(payload, "uuid", 4, F.TYPE_STRING)
    _field(payload, "body", 5, F.TYPE_BYTES)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("org.eclipse.tahu.protobuf.Payload"))


Payload = _build()


def parse(data: bytes) -> Any:
    message = Payload()
    message.ParseFromString(data)
    return message


def metric_value(metric: Any, datatype: Optional[int] = None) -> Any:
    """The metric's value per the spec (signed types from their two's complement); None when is_null.
    ``datatype``: the birth's, for a DATA metric that leaves it out."""
    if metric.is_null:
        return None
    which = metric.WhichOneof("value")
    value = getattr(metric, which) if which else None
    signed_bits = {1: 8, 2: 16, 3: 32, 4: 64}.get(metric.datatype if metric.HasField("datatype") else datatype or 0)
    if signed_bits is not None and value is not None:
        value &= (1 << signed_bits) - 1  # Int8/16 may come in their own width or sign-extended to 32 bits
        if value >> (signed_bits - 1):
            value -= 1 << signed_bits
    return value


def metrics_of(payload: Any, aliases: Optional[dict[int, tuple[str, int]]] = None) -> dict[str, Any]:
    """name -> value; a metric sent by alias only is named from ``aliases`` (alias -> (name, datatype), as births
    announce them; ``?alias`` if not there)."""
    out = {}
    for m in payload.metrics:
        name, datatype = m.name, None
        if not m.HasField("name") and m.HasField("alias"):
            name, datatype = (aliases or {}).get(m.alias, (f"?{m.alias}", None))
        out[name] = metric_value(m, datatype)
    return out


def announced(payload: Any) -> dict[int, tuple[str, int]]:
    """The aliases a birth announces: alias -> (name, datatype)."""
    return {m.alias: (m.name, m.datatype) for m in payload.metrics if m.HasField("alias")}


def rebirth_command(value: bool = True, timestamp: int = 1) -> bytes:
    """An NCMD as a host (Ignition's MQTT Engine) sends it, encoded by google.protobuf (``timestamp`` tells one
    command from another)."""
    message = Payload()
    message.timestamp = timestamp
    metric = message.metrics.add()
    metric.name, metric.datatype, metric.boolean_value = "Node Control/Rebirth", DATATYPES["Boolean"], value
    return bytes(message.SerializeToString())


Aliases = dict[int, tuple[str, int]]  # alias -> (name, datatype), as the births announced them


@dataclass
class Received:
    topic: str
    kind: str              # NBIRTH, DDATA, ...
    device: Optional[str]
    payload: Any           # a decoded Payload
    aliases: Optional[Aliases] = None  # the edge node's, as of this message (DATA and CMD name metrics by alias)

    @property
    def seq(self) -> Optional[int]:
        return int(self.payload.seq) if self.payload.HasField("seq") else None

    @property
    def metrics(self) -> dict[str, Any]:
        """name -> value, metrics sent by alias only named from the births."""
        return metrics_of(self.payload, self.aliases)


NODE_KINDS = frozenset({"NBIRTH", "NDATA", "NDEATH", "DBIRTH", "DDATA", "DDEATH"})


class SparkplugSubscriber:
    """What edge nodes publish on ``spBv1.0/#`` (or ``topic``), recorded by the tests' one MQTT subscriber
    (support.subscriber) and decoded with the schema above; what it cannot decode goes to ``undecodable`` (the
    fixtures check that it stays empty)."""

    def __init__(self, broker: Address, topic: str = "spBv1.0/#", *, username: Optional[str] = None,
                 password: Optional[str] = None) -> None:
        self.mqtt = Subscriber(broker, topic, username=username, password=password)
        self._lock = threading.Lock()
        self._read = 0  # how many of self.mqtt's messages are sorted into the lists below
        self._messages: list[Received] = []
        self._commands: list[Received] = []  # NCMD and DCMD that decode (the node's subscription gets the same)
        self._undecodable: list[str] = []
        self._aliases: dict[str, Aliases] = {}  # per edge node (group/node), from its births

    def _sort(self) -> None:
        """Decode what arrived since the last call, once each."""
        with self._lock:
            arrived = self.mqtt.messages
            for msg in arrived[self._read:]:
                self._sort_one(msg)
            self._read = len(arrived)

    def _sort_one(self, msg: Message) -> None:
        parts = msg.topic.split("/")
        device = parts[4] if len(parts) > 4 else None
        node = "/".join(parts[1:4:2])
        if parts[2] in ("NCMD", "DCMD"):  # ours included; malformed ones are left out
            try:
                self._commands.append(Received(msg.topic, parts[2], device, parse(msg.payload)))
            except DecodeError:
                pass
            return
        if parts[2] not in NODE_KINDS:  # host STATE
            return
        try:
            payload = parse(msg.payload)
        except DecodeError as exc:
            self._undecodable.append(f"{msg.topic}: {exc}")
            return
        aliases = self._aliases.setdefault(node, {})
        if parts[2] == "NBIRTH":
            aliases.clear()
        if parts[2] in ("NBIRTH", "DBIRTH"):
            aliases.update(announced(payload))
        self._messages.append(Received(msg.topic, parts[2], device, payload, dict(aliases)))

    @property
    def messages(self) -> list[Received]:
        return self.snapshot()

    @property
    def commands(self) -> list[Received]:
        self._sort()
        with self._lock:
            return list(self._commands)

    @property
    def undecodable(self) -> list[str]:
        self._sort()
        with self._lock:
            return list(self._undecodable)

    def snapshot(self) -> list[Received]:
        self._sort()
        with self._lock:
            return list(self._messages)

    def of(self, kind: str, device: Optional[str] = None) -> list[Received]:
        return [m for m in self.snapshot() if m.kind == kind and (device is None or m.device == device)]

    def wait_for(self, predicate: Callable[[list[Received]], Any], timeout_s: float = 20.0,
                 message: str = "Sparkplug messages") -> Any:
        return self.mqtt.wait_for(lambda _arrived: predicate(self.snapshot()), timeout_s, message)

    def publish(self, topic: str, payload: bytes) -> None:
        self.mqtt.publish(topic, payload, qos=1)

    def stop(self) -> None:
        self.mqtt.close()
