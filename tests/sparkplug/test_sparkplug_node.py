"""The edge node through a real mosquitto, decoded with the spec's schema by google.protobuf
(tests/support/sparkplug_b.py): birth before data, seq 0..255 wrapping, DDEATH and rebirth of a device, rebirth on
NCMD, NDEATH on a clean stop and, as the will, on SIGKILL of a real process; bdSeq across reconnects and restarts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from support.mosquitto import Mosquitto
from support.sparkplug_b import Received, SparkplugSubscriber, rebirth_command

from appliance.mqtt.config import MqttConfig
from appliance.sparkplug.node import EdgeNode
from appliance.sparkplug.payload import DataType
from appliance.sparkplug.reports import Readings

CHILD = Path(__file__).with_name("sparkplug_child_node.py")
NODE_TOPIC = "spBv1.0/plant1/{}/dev1"


def config_doc(broker: Mosquitto, interval_s: float = 0.01) -> dict[str, Any]:
    return {"host": broker.host, "port": broker.port, "device_id": "dev1", "keepalive_s": 5,
            "backoff": {"initial_s": 0.1, "max_s": 0.5},
            "sparkplug": {"group_id": "plant1", "interval_s": interval_s}}


class Cameras:
    """A readings provider: cam1's fps changes on every sample; cameras can be taken away and brought back."""

    def __init__(self) -> None:
        self.live = {"cam1", "cam2"}
        self.samples = 0
        self._lock = threading.Lock()

    def __call__(self) -> Readings:
        with self._lock:
            self.samples += 1
            fps = float(self.samples)
            live = sorted(self.live)
        devices = {c: {"State": (DataType.String, "streaming"),
                       "Capture/FPS": (DataType.Double, fps if c == "cam1" else 5.0)} for c in live}
        return Readings(node={"Model/Version": (DataType.String, "base"),
                              "Inference/Latency p50 ms": (DataType.Double, None)}, devices=devices)

    def set_live(self, live: set[str]) -> None:
        with self._lock:
            self.live = live


@pytest.fixture
def sub(broker: Mosquitto) -> Iterator[SparkplugSubscriber]:
    s = SparkplugSubscriber(broker)
    yield s
    s.stop()
    assert s.undecodable == []


@pytest.fixture
def node_factory(tmp_path: Path) -> Iterator[Any]:
    made: list[EdgeNode] = []

    def make(doc: dict[str, Any], readings: Any, state_dir: Path = tmp_path / "state") -> EdgeNode:
        node = EdgeNode(MqttConfig.model_validate(doc), readings, state_dir).start()
        made.append(node)
        assert node.wait_connected(20), "the edge node never connected"
        return node

    yield make
    for node in made:
        node.stop()


def seqs(messages: list[Received]) -> list[int | None]:
    return [m.seq for m in messages]


def check_session_order(messages: list[Received]) -> None:
    """Sparkplug's rules on one session's messages (no NDEATH among them)."""
    assert messages[0].kind == "NBIRTH" and messages[0].seq == 0
    born: set[str] = set()
    for prev, m in zip(messages, messages[1:]):
        assert m.seq == (prev.seq + 1) % 256, f"seq {prev.seq} then {m.seq} ({m.topic})"  # type: ignore[operator]
        if m.kind == "DBIRTH":
            born.add(m.device or "")
        elif m.kind in ("DDATA", "DDEATH"):
            assert m.device in born, f"{m.kind} for {m.device} before its DBIRTH"
            if m.kind == "DDEATH":
                born.discard(m.device or "")


def test_birth_before_data_and_seq_wraps_through_the_broker(broker: Mosquitto, sub: SparkplugSubscriber,
                                                             node_factory: Any) -> None:
    before_ms = int(time.time() * 1000)
    node = node_factory(config_doc(broker, interval_s=0.01), Cameras())
    msgs = sub.wait_for(lambda m: len(m) >= 300 and m, timeout_s=60, message="300 Sparkplug messages")
    check_session_order(msgs)
    nbirth = msgs[0]
    assert nbirth.topic == NODE_TOPIC.format("NBIRTH")
    assert nbirth.metrics == {"bdSeq": 0, "Node Control/Rebirth": False, "Model/Version": "base",
                              "Inference/Latency p50 ms": None}
    assert node.bd_seq == 0
    datatypes = {m.name: m.datatype for m in nbirth.payload.metrics}
    assert datatypes == {"bdSeq": 4, "Node Control/Rebirth": 11, "Model/Version": 12, "Inference/Latency p50 ms": 10}
    assert {m.device: m.metrics for m in msgs[1:3]} == {
        "cam1": {"State": "streaming", "Capture/FPS": 1.0}, "cam2": {"State": "streaming", "Capture/FPS": 5.0}}
    ddata = [m for m in msgs if m.kind == "DDATA"]
    assert {m.device for m in ddata} == {"cam1"}  # cam2 never changes: report by exception
    assert all(set(m.metrics) == {"Capture/FPS"} for m in ddata)
    assert seqs(msgs[250:260]).count(0) == 1 and 255 in seqs(msgs)  # wrapped 255 -> 0
    assert before_ms <= nbirth.payload.timestamp <= int(time.time() * 1000)  # milliseconds since the epoch


def test_a_camera_that_goes_gets_ddeath_and_its_dbirth_when_back(broker: Mosquitto, sub: SparkplugSubscriber,
                                                                 node_factory: Any) -> None:
    cameras = Cameras()
    node_factory(config_doc(broker), cameras)
    sub.wait_for(lambda m: any(x.kind == "DDATA" for x in m), message="DDATA")
    cameras.set_live({"cam1"})
    sub.wait_for(lambda m: any(x.kind == "DDEATH" and x.device == "cam2" for x in m), message="cam2's DDEATH")
    cameras.set_live({"cam1", "cam2"})
    msgs = sub.wait_for(lambda m: len([x for x in m if x.kind == "DBIRTH" and x.device == "cam2"]) == 2 and m,
                        message="cam2 born again")
    check_session_order(msgs)
    (death,) = [m for m in msgs if m.kind == "DDEATH"]
    assert death.metrics == {} and death.seq is not None


def test_rebirth_on_ncmd_keeps_bdseq_and_starts_seq_at_0(broker: Mosquitto, sub: SparkplugSubscriber,
                                                         node_factory: Any) -> None:
    node_factory(config_doc(broker, interval_s=0.05), Cameras())
    sub.wait_for(lambda m: len(m) >= 5, message="a few messages")
    sub.publish(NODE_TOPIC.format("NCMD"), b"\x12\x05garbage")      # malformed: ignored
    sub.publish(NODE_TOPIC.format("NCMD"), rebirth_command(False))   # false: nothing to do
    sub.publish(NODE_TOPIC.format("NCMD"), rebirth_command(True))
    msgs = sub.wait_for(lambda m: len([x for x in m if x.kind == "NBIRTH"]) == 2 and
                        len([x for x in m if x.kind == "DBIRTH"]) == 4 and m, message="the rebirth")
    second = max(i for i, m in enumerate(msgs) if m.kind == "NBIRTH")
    check_session_order(msgs[:second])
    check_session_order(msgs[second:])
    assert [(m.kind, m.device, m.seq) for m in msgs[second:second + 3]] == [
        ("NBIRTH", None, 0), ("DBIRTH", "cam1", 1), ("DBIRTH", "cam2", 2)]
    assert msgs[second].metrics["bdSeq"] == msgs[0].metrics["bdSeq"] == 0


def test_a_clean_stop_publishes_ndeath_with_the_births_bdseq(broker: Mosquitto, sub: SparkplugSubscriber,
                                                             tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "sparkplug-bdseq").write_text("41\n")  # an earlier run's
    node = EdgeNode(MqttConfig.model_validate(config_doc(broker)), Cameras(), tmp_path / "state").start()
    try:
        assert node.wait_connected(20)
    finally:
        node.stop()
    msgs = sub.wait_for(lambda m: any(x.kind == "NDEATH" for x in m) and m, message="NDEATH")
    assert msgs[0].metrics["bdSeq"] == 42
    assert msgs[-1].kind == "NDEATH" and msgs[-1].seq is None and msgs[-1].metrics == {"bdSeq": 42}


def test_a_broker_restart_reconnects_with_the_next_bdseq(broker: Mosquitto, sub: SparkplugSubscriber,
                                                         node_factory: Any) -> None:
    node = node_factory(config_doc(broker, interval_s=0.05), Cameras())
    sub.wait_for(lambda m: len(m) >= 3, message="the births")
    sub.stop()
    broker.restart()
    after = SparkplugSubscriber(broker)
    try:
        # The node may be back and born before this subscriber is; then, as a host does on data without a birth,
        # it asks for a rebirth.
        if not after.wait_for(lambda m: m, message="the node back")[0].kind == "NBIRTH":
            after.publish(NODE_TOPIC.format("NCMD"), rebirth_command(True))
        born = after.wait_for(lambda m: [x for x in m if x.kind == "NBIRTH"], timeout_s=30, message="a new NBIRTH")
        assert born[0].metrics["bdSeq"] >= 1 and born[0].seq == 0
        assert node.bd_seq == born[0].metrics["bdSeq"]
        first = next(i for i, m in enumerate(after.messages) if m.kind == "NBIRTH")
        check_session_order(after.wait_for(lambda m: len(m) >= first + 4 and m[first:], message="the session after it"))
    finally:
        after.stop()
    assert after.undecodable == []


def start_child(doc: dict[str, Any], state_dir: Path, log: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, str(CHILD), json.dumps(doc), str(state_dir)], stdout=subprocess.PIPE,
                            stderr=open(log, "ab"), text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    assert line.startswith("up "), f"the child said {line!r} (log: {log.read_text()})"
    return proc, int(line.split()[1])


def test_sigkill_sends_ndeath_by_the_will_and_a_restart_takes_the_next_bdseq(
        broker: Mosquitto, sub: SparkplugSubscriber, tmp_path: Path) -> None:
    doc, state = config_doc(broker, interval_s=0.05), tmp_path / "state"
    proc, first = start_child(doc, state, tmp_path / "child.log")
    try:
        sub.wait_for(lambda m: any(x.kind == "DDATA" for x in m), message="DDATA from the child")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deaths = sub.wait_for(lambda m: [x for x in m if x.kind == "NDEATH"], message="the will's NDEATH")
    finally:
        proc.kill()
        proc.wait()
    births = sub.of("NBIRTH")
    assert births[0].metrics["bdSeq"] == first == deaths[0].metrics["bdSeq"]
    assert deaths[0].topic == NODE_TOPIC.format("NDEATH") and deaths[0].seq is None
    proc, second = start_child(doc, state, tmp_path / "child.log")
    try:
        reborn = sub.wait_for(lambda m: len([x for x in m if x.kind == "NBIRTH"]) == 2 and
                              [x for x in m if x.kind == "NBIRTH"][1], message="the restarted child's NBIRTH")
    finally:
        proc.kill()
        proc.wait()
    assert second == first + 1 == reborn.metrics["bdSeq"] and reborn.seq == 0


def test_with_mqtt_hosts_the_node_moves_to_the_next_broker_and_is_born_there(
        broker: Mosquitto, node_factory: Any, tmp_path: Path) -> None:
    second = Mosquitto(tmp_path / "second").start()
    there = SparkplugSubscriber(second)
    try:
        doc = config_doc(broker, interval_s=0.05)
        del doc["host"], doc["port"]
        doc["hosts"] = [f"{broker.host}:{broker.port}", f"{second.host}:{second.port}"]
        node = node_factory(doc, Cameras())
        first_bd_seq = node.bd_seq
        assert there.messages == []  # born on the first broker of the list, not on both
        broker.kill()
        born = there.wait_for(lambda m: [x for x in m if x.kind == "NBIRTH"], timeout_s=30,
                              message="an NBIRTH on the second broker")
        assert born[0].seq == 0 and born[0].metrics["bdSeq"] == node.bd_seq != first_bd_seq
        check_session_order(there.wait_for(lambda m: len(m) >= 4 and m, message="the session on the second broker"))
    finally:
        there.stop()
        second.stop()
    assert there.undecodable == []
