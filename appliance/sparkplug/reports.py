"""What the edge node publishes, decided from its readings: births, data by exception, deaths. No I/O: the node
(``appliance.sparkplug.node``) publishes what these functions return, in order, on one connection.

Rules, in the order they apply to one sample of the readings:
1. ``births``: NBIRTH (seq 0, ``bdSeq``, ``Node Control/Rebirth`` = false, every node metric) and a DBIRTH for
   each live device with every metric, each with its name, datatype and alias. After a connect and on a rebirth
   request.
2. ``changes``: a node metric set that changed (a metric added, removed or retyped) needs a new NBIRTH, so it
   is rule 1 again. Otherwise an NDATA with the node metrics whose value changed; a DDEATH for each device that
   is no longer live; a DBIRTH for a new device or one whose metric set changed; a DDATA with the metrics
   of a born device whose value changed. Nothing changed: nothing is sent. DATA metrics carry their alias only.
Every message but NDEATH takes the next ``seq``; NDEATH carries only ``bdSeq`` (it is the connection's will).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from appliance.sparkplug.aliases import AliasTable
from appliance.sparkplug.payload import DataType, Metric, Scalar, encode_payload
from appliance.sparkplug.sequence import SeqCounter

log = logging.getLogger(__name__)

NAMESPACE = "spBv1.0"
REBIRTH = "Node Control/Rebirth"
BDSEQ = "bdSeq"

Reading = tuple[DataType, Optional[Scalar]]  # a metric's datatype and value (None: null)
MetricSet = Mapping[str, Reading]


@dataclass(frozen=True)
class Readings:
    """One sample: the node's metrics, and each live device's (a device absent here is dead: DDEATH)."""

    node: MetricSet = field(default_factory=dict)
    devices: Mapping[str, MetricSet] = field(default_factory=dict)


@dataclass(frozen=True)
class Outgoing:
    topic: str
    payload: bytes


class SparkplugTopics:
    """``spBv1.0/<group>/<type>/<edge node>[/<device>]``."""

    def __init__(self, group_id: str, edge_node_id: str) -> None:
        self.group_id, self.edge_node_id = group_id, edge_node_id

    def node(self, message_type: str) -> str:
        return f"{NAMESPACE}/{self.group_id}/{message_type}/{self.edge_node_id}"

    def device(self, message_type: str, device_id: str) -> str:
        return f"{self.node(message_type)}/{device_id}"


def death_payload(bd_seq: int, timestamp_ms: int) -> bytes:
    """NDEATH: the will of the connection with this ``bd_seq``, and what a clean stop publishes."""
    return encode_payload(timestamp_ms, [Metric(BDSEQ, DataType.Int64, bd_seq)], seq=None)


def _schema(metrics: MetricSet) -> dict[str, DataType]:
    return {name: datatype for name, (datatype, _value) in metrics.items()}


class NodeReports:
    """The state of one connection's session: its ``bdSeq``, the seq counter, what was born and last sent."""

    def __init__(self, topics: SparkplugTopics, bd_seq: int, clock_ms: Callable[[], int],
                 seq: SeqCounter | None = None) -> None:
        self.topics = topics
        self.bd_seq = bd_seq
        self._clock_ms = clock_ms
        self._seq = seq or SeqCounter()
        self.aliases = AliasTable()
        self._node: dict[str, Reading] = {}
        self._devices: dict[str, dict[str, Reading]] = {}

    def births(self, readings: Readings) -> list[Outgoing]:
        """NBIRTH (seq back to 0, as every NBIRTH) and a DBIRTH per live device."""
        self._seq.reset()
        now = self._clock_ms()
        fixed = [Metric(BDSEQ, DataType.Int64, self.bd_seq, now), Metric(REBIRTH, DataType.Boolean, False, now)]
        out = [self._message(self.topics.node("NBIRTH"), fixed + self._births_of(None, readings.node, now), now)]
        self._node = dict(readings.node)
        self._devices = {}
        for device_id, metrics in readings.devices.items():
            out.append(self._device_birth(device_id, metrics, now))
        return out

    def changes(self, readings: Readings) -> list[Outgoing]:
        """Everything that changed since the last births or changes (rule 2 of the module docstring)."""
        if _schema(readings.node) != _schema(self._node):
            log.info("sparkplug: the node's metric set changed; publishing a new NBIRTH")
            return self.births(readings)
        now = self._clock_ms()
        out = []
        changed = {k: v for k, v in readings.node.items() if self._node.get(k) != v}
        if changed:
            out.append(self._data(self.topics.node("NDATA"), self._changes_of(None, changed, now), now))
            self._node.update(changed)
        for device_id in [d for d in self._devices if d not in readings.devices]:
            out.append(self._message(self.topics.device("DDEATH", device_id), [], now))
            del self._devices[device_id]
        for device_id, metrics in readings.devices.items():
            born = self._devices.get(device_id)
            if born is None or _schema(born) != _schema(metrics):
                out.append(self._device_birth(device_id, metrics, now))
                continue
            changed = {k: v for k, v in metrics.items() if born.get(k) != v}
            if changed:
                out.append(self._data(self.topics.device("DDATA", device_id),
                                      self._changes_of(device_id, changed, now), now))
                born.update(changed)
        return out

    def _device_birth(self, device_id: str, metrics: MetricSet, now: int) -> Outgoing:
        self._devices[device_id] = dict(metrics)
        return self._message(self.topics.device("DBIRTH", device_id), self._births_of(device_id, metrics, now), now)

    def _message(self, topic: str, metrics: list[Metric], now: int) -> Outgoing:
        return Outgoing(topic, encode_payload(now, metrics, seq=self._seq.take()))

    def _data(self, topic: str, metrics: list[Metric], now: int) -> Outgoing:
        """NDATA/DDATA: no names and no datatypes, the host has both from the births."""
        return Outgoing(topic, encode_payload(now, metrics, seq=self._seq.take(), datatypes=False))

    def _births_of(self, device: Optional[str], metrics: MetricSet, now: int) -> list[Metric]:
        return [Metric(name, datatype, value, now, self.aliases.alias(device, name))
                for name, (datatype, value) in metrics.items()]

    def _changes_of(self, device: Optional[str], metrics: MetricSet, now: int) -> list[Metric]:
        return [Metric(None, datatype, value, now, self.aliases.alias(device, name))
                for name, (datatype, value) in metrics.items()]
