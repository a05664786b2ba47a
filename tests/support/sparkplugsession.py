"""One recorded life of a real edge node process (tests/sparkplug/sparkplug_child_node.py) under a primary host,
for the checks named by the specification's tck ids (tests/sparkplug/test_sparkplug_tck.py). What is recorded
comes from outside the node: every message on ``spBv1.0/#`` in broker order, decoded by Eclipse Tahu's JavaScript
codec (support.tahu), and mosquitto's debug log, which states each CONNECT's flags and will, each SUBSCRIBE's QoS
and each PUBLISH's QoS and retain flag.

The script, in order (``Life.marks`` names the recorder's message count at each step):
 1. the host's STATE is offline (retained); the node starts, connects, subscribes, and must not be born;
 2. a stale online STATE (older than the offline one) must not make it born either;
 3. a current online STATE: NBIRTH, DBIRTHs, data; cam1 goes away (DDEATH) and comes back (DBIRTH);
 4. a host's NCMD rebirth by name, a DCMD and an NCMD by alias (Tahu-encoded): a new NBIRTH, commands ignored;
 5. a stale offline STATE: the node stays; a current offline STATE: NDEATH, disconnect, reconnect, no birth;
 6. a current online STATE: born again with the next bdSeq; then SIGKILL: the will's NDEATH.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from support.mosquitto import Mosquitto
from support.subscriber import Message, Subscriber
from support.tahu import TahuCodec
from support.wait import wait_until

CHILD = Path(__file__).resolve().parents[1] / "sparkplug" / "sparkplug_child_node.py"
GROUP, NODE, HOST = "plant1", "dev1", "scada"
CLIENT_ID = f"appliance-{NODE}-sparkplug"
STATE = f"spBv1.0/STATE/{HOST}"
PUBLISH = re.compile(r"Received PUBLISH from (\S+) \(d\d, q(\d), r(\d), m\d+, '([^']*)'")


@dataclass
class Seen:
    """A node message as the recorder got it, decoded by Tahu (DATA by the aliases its births announced)."""

    index: int                  # position among everything the recorder got (STATE included)
    topic: str
    kind: str
    device: Optional[str]
    raw: bytes
    doc: dict[str, Any]         # Tahu's payload object
    names: dict[int, str]       # alias -> name as of this message (the node's births so far)

    @property
    def seq(self) -> Optional[int]:
        return self.doc.get("seq")

    @property
    def metrics(self) -> dict[str, Any]:
        return {m.get("name") or self.names.get(m.get("alias", -1), "?"): m.get("value")
                for m in self.doc.get("metrics", [])}


@dataclass
class Life:
    messages: list[Seen] = field(default_factory=list)
    states: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (index, STATE payload)
    commands: list[tuple[int, str]] = field(default_factory=list)  # (index, topic) of the host's NCMD/DCMD
    marks: dict[str, int] = field(default_factory=dict)
    broker_log: str = ""
    child_log: str = ""
    aliases: dict[str, int] = field(default_factory=dict)  # "cam0/Capture/FPS" -> alias, from the first births

    def of(self, kind: str) -> list[Seen]:
        return [m for m in self.messages if m.kind == kind]

    def publishes(self, kind: str) -> list[tuple[int, int]]:
        """(qos, retain) of every PUBLISH the node sent on a topic of this kind, from the broker's log."""
        return [(int(q), int(r)) for client, q, r, topic in PUBLISH.findall(self.broker_log)
                if client == CLIENT_ID and topic.split("/")[2] == kind]


def state(online: bool, timestamp: int) -> str:
    return json.dumps({"online": online, "timestamp": timestamp})


def decode_all(arrived: list[Message], tahu: TahuCodec, life: Life) -> None:
    datatypes: dict[int, int] = {}
    names: dict[int, str] = {}
    for index, msg in enumerate(arrived):
        parts = msg.topic.split("/")
        if parts[1] == "STATE":
            life.states.append((index, json.loads(msg.payload)))
            continue
        if parts[2] in ("NCMD", "DCMD"):
            life.commands.append((index, msg.topic))
            continue
        doc = tahu.decode(msg.payload, datatypes)
        if parts[2] in ("NBIRTH", "DBIRTH"):
            for m in doc.get("metrics", []):
                if "alias" in m:
                    datatypes[m["alias"]] = int(_DATATYPES[m["type"]])
                    names[m["alias"]] = m["name"]
                    life.aliases.setdefault(f"{parts[4]}/{m['name']}" if len(parts) > 4 else m["name"], m["alias"])
        life.messages.append(Seen(index, msg.topic, parts[2], parts[4] if len(parts) > 4 else None, msg.payload,
                                  doc, dict(names)))


_DATATYPES = {"Int8": 1, "Int16": 2, "Int32": 3, "Int64": 4, "UInt8": 5, "UInt16": 6, "UInt32": 7, "UInt64": 8,
              "Float": 9, "Double": 10, "Boolean": 11, "String": 12, "DateTime": 13, "Text": 14}


class Script:
    """Runs the steps of the module docstring against a real broker and a real node process."""

    def __init__(self, broker: Mosquitto, workdir: Path, tahu: TahuCodec) -> None:
        self.broker, self.workdir, self.tahu = broker, workdir, tahu
        self.recorder = Subscriber(broker, "spBv1.0/#")
        self.host = Subscriber(broker, "spBv1.0/host-inbox")  # the host's own connection, to publish with
        self.child_log = workdir / "child.log"
        self.proc: Optional[subprocess.Popen[str]] = None
        self.life = Life()

    def mark(self, name: str) -> None:
        self.life.marks[name] = len(self.recorder.messages)

    def log_has(self, text: str, count: int = 1) -> bool:
        return self.child_log.exists() and self.child_log.read_text().count(text) >= count

    def node_messages(self, kind: str) -> list[Message]:
        return [m for m in self.recorder.messages if m.topic.split("/")[2:3] == [kind]]

    def run(self) -> Life:
        try:
            self._steps()
        finally:
            if self.proc is not None:
                self.proc.kill()
                self.proc.wait(10)
            self.recorder.close()
            self.host.close()
        arrived = self.recorder.messages
        decode_all(arrived, self.tahu, self.life)
        self.life.broker_log = self.broker.log_text()
        self.life.child_log = self.child_log.read_text()
        return self.life

    def _start_child(self) -> None:
        doc = {"host": self.broker.host, "port": self.broker.port, "device_id": NODE, "keepalive_s": 5,
               "backoff": {"initial_s": 0.1, "max_s": 0.5},
               "sparkplug": {"group_id": GROUP, "interval_s": 0.05, "primary_host_id": HOST}}
        self.proc = subprocess.Popen([sys.executable, str(CHILD), json.dumps(doc), str(self.workdir / "state")],
                                     stdout=subprocess.DEVNULL, stderr=open(self.child_log, "ab"), text=True)

    def _steps(self) -> None:
        now = int(time.time() * 1000)
        self.host.publish(STATE, state(False, now - 1000), retain=True)
        self._start_child()
        wait_until(lambda: f"{CLIENT_ID} 1 {STATE}" in self.broker.log_text(), message="the node's STATE subscription")
        self.host.publish("spBv1.0/STATE/other-host", state(True, now), retain=True)  # not its host
        self.host.publish(STATE, state(True, now - 2000), retain=True)  # older than the offline one: stale
        wait_until(lambda: self.log_has("ignoring a stale STATE"), message="the node judging the stale STATE")
        self.mark("online")
        self.host.publish(STATE, state(True, now), retain=True)
        self.recorder.wait_for(lambda _m: len(self.node_messages("DBIRTH")) >= 3 and self.node_messages("DDEATH")
                               and len(self.node_messages("DDATA")) >= 3, 30, "births, a DDEATH and a DBIRTH again")
        self._commands()
        self.mark("stale offline")
        self.host.publish(STATE, state(False, now - 1), retain=True)
        wait_until(lambda: self.log_has("ignoring a stale STATE", 2), message="the stale offline STATE judged")
        after = len(self.recorder.messages)
        self.recorder.wait_for(lambda m: any("DDATA" in x.topic for x in m[after:]), 20, "data after it")
        self.mark("offline")
        self.host.publish(STATE, state(False, now + 1), retain=True)
        self.recorder.wait_for(lambda _m: self.node_messages("NDEATH"), 20, "the NDEATH for the host going offline")
        wait_until(lambda: self.broker.log_text().count(f"{CLIENT_ID} 1 {STATE}") >= 2, 20,
                   message="the node connected and subscribed again")
        self.mark("online again")
        self.host.publish(STATE, state(True, now + 2), retain=True)
        self.recorder.wait_for(lambda _m: len(self.node_messages("NBIRTH")) >= 3, 20, "the birth after it")
        self.mark("kill")
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.recorder.wait_for(lambda _m: len(self.node_messages("NDEATH")) >= 2, 20, "the will's NDEATH")

    def _commands(self) -> None:
        """The host's commands, encoded by Tahu; aliases from the births the recorder got so far."""
        life = Life()
        decode_all(self.recorder.messages, self.tahu, life)
        self.mark("rebirth")
        ncmd, dcmd = f"spBv1.0/{GROUP}/NCMD/{NODE}", f"spBv1.0/{GROUP}/DCMD/{NODE}/cam0"
        self.host.publish(dcmd, self.tahu.encode({"timestamp": int(time.time() * 1000), "metrics": [
            {"alias": life.aliases["cam0/Capture/FPS"], "type": "Double", "value": 1.5}]}))
        self.host.publish(ncmd, self.tahu.encode({"timestamp": int(time.time() * 1000), "metrics": [
            {"alias": life.aliases["Model/Version"], "type": "String", "value": "x"}]}))
        self.host.publish(ncmd, self.tahu.encode({"timestamp": int(time.time() * 1000), "metrics": [
            {"name": "Node Control/Rebirth", "type": "Boolean", "value": True}]}))
        self.recorder.wait_for(lambda _m: len(self.node_messages("NBIRTH")) >= 2, 20, "the rebirth")
        wait_until(lambda: self.log_has("ignoring the command to device cam0 'Capture/FPS'") and
                   self.log_has("ignoring the command to the node 'Model/Version'"), message="the commands by alias")
        self.mark("after rebirth")
