"""The running parts of the soak (scripts/soak.py): a subscriber with a persistent MQTT 5 session that records
every detections and ota/status message of a device, and `appliance run` as a real process, one Incarnation per
start, read every minute for RSS and open file descriptors. The checks on what they record are in soakcheck.py
beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from soakcheck import Sample, Seen, parse_status_rss_kib

from appliance.harness.notify import NotifySocket
from appliance.harness.processes import children_of
from appliance.procs import kill_process, stop_process

REPO = Path(__file__).resolve().parents[1]


class Recorder:
    """Every detections and ota/status message of the device, through a persistent MQTT 5 session."""

    def __init__(self, port: int, device: str) -> None:
        self.seen: list[Seen] = []
        self.versions: dict[str, int] = {}
        self.ota: list[dict[str, Any]] = []
        self.connects = 0
        self.malformed = 0  # messages that were not JSON or lacked a detections field
        self.last_at = time.monotonic()
        self._topics = [(f"appliance/{device}/+/detections", 1), (f"appliance/{device}/ota/status", 1)]
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"soak-{device}",
                                  protocol=paho.MQTTv5)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.reconnect_delay_set(1, 2)
        self.port = port

    def start(self) -> None:
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 24 * 3600  # the broker keeps our queue while we (or it) are away
        self.client.connect("127.0.0.1", self.port, clean_start=False, properties=props)
        self.client.loop_start()

    def _on_connect(self, client: paho.Client, _u: Any, _f: Any, _reason: Any, _p: Any) -> None:
        self.connects += 1
        client.subscribe(self._topics)

    def _on_message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        self.last_at = time.monotonic()
        try:  # an exception here would end paho's network thread, and with it the recording
            payload = json.loads(msg.payload)
            if payload.get("type") == "detections":
                seen = Seen.from_payload(payload)
                version = str(payload["model"]["version"])
            elif msg.topic.endswith("/ota/status"):
                self.ota.append(payload)
                return
            else:
                return
        except (ValueError, KeyError, TypeError, AttributeError):
            self.malformed += 1
            return
        self.seen.append(seen)
        self.versions[version] = self.versions.get(version, 0) + 1

    def away(self, seconds: float) -> None:
        """Disconnect for ``seconds``, then resume the same session (clean_start False, as connected)."""
        self.client.disconnect()
        self.client.loop_stop()
        time.sleep(seconds)
        self.client.reconnect()
        self.client.loop_start()

    def count(self, camera: str | None = None) -> int:
        return sum(1 for s in list(self.seen) if camera is None or s.camera_id == camera)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


@dataclass
class Incarnation:
    number: int
    pid: int
    started: float
    ready_at: float | None = None
    samples: list[Sample] = field(default_factory=list)
    tree_rss_kib: list[int] = field(default_factory=list)  # the daemon with its capture processes and stubs
    ended: str = "running"


class Daemon:
    """`appliance run --config CONFIG` as a real process; one Incarnation per start."""

    def __init__(self, config: Path, workdir: Path) -> None:
        self.config, self.log = config, workdir / "daemon.log"
        self.notify = NotifySocket(workdir / "notify.sock")
        self.incarnations: list[Incarnation] = []
        self.descendants: set[int] = set()  # every child pid seen: capture processes, model stubs
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def current(self) -> Incarnation | None:
        return self.incarnations[-1] if self.incarnations and self.incarnations[-1].ended == "running" else None

    def start(self, timeout_s: float) -> Incarnation:
        self.notify.messages.clear()
        env = {**os.environ, "NOTIFY_SOCKET": str(self.notify.path), "PYTHONFAULTHANDLER": "1"}
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "appliance", "run", "--config", str(self.config)],
                                         stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        inc = Incarnation(len(self.incarnations) + 1, self.proc.pid, time.monotonic())
        self.incarnations.append(inc)
        deadline = time.monotonic() + timeout_s
        while not self.notify.wait_for("READY=1", 1.0):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"error: the daemon did not get READY (exit {self.proc.poll()}); "
                                 f"see {self.log}:\n{self.log.read_text(errors='replace')[-3000:]}")
        inc.ready_at = time.monotonic()
        self.note_children()
        return inc

    def note_children(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.descendants.update(children_of(self.proc.pid))

    def kill(self) -> None:
        assert self.proc is not None and self.current is not None
        self.note_children()
        self.current.ended = "SIGKILL"
        kill_process(self.proc)

    def stop(self, timeout_s: float = 120.0) -> int:
        assert self.proc is not None and self.current is not None
        self.note_children()
        rc = stop_process(self.proc, timeout_s=timeout_s)  # SIGKILL after timeout_s, then waits for the exit
        assert rc is not None
        self.current.ended = f"SIGTERM, exit {rc}"
        return rc

    def sample(self) -> None:
        """One reading of the current incarnation (called once per --sample-s after its READY)."""
        inc = self.current
        if inc is None or inc.ready_at is None:
            return
        try:
            rss = parse_status_rss_kib(Path(f"/proc/{inc.pid}/status").read_text())
            fds = len(os.listdir(f"/proc/{inc.pid}/fd"))
        except OSError:
            return  # it died between the check and the read
        self.note_children()
        tree = rss or 0
        for pid in children_of(inc.pid):
            try:
                tree += parse_status_rss_kib(Path(f"/proc/{pid}/status").read_text()) or 0
            except OSError:
                pass
        inc.samples.append(Sample(time.monotonic() - inc.ready_at, rss or 0, fds))
        inc.tree_rss_kib.append(tree)


def sampler(daemon: Daemon, period_s: float, stop: threading.Event) -> None:
    """Reads the daemon at READY + k x period_s, for each incarnation."""
    taken: dict[int, int] = {}
    while not stop.wait(0.5):
        inc = daemon.current
        if inc is None or inc.ready_at is None:
            continue
        due = int((time.monotonic() - inc.ready_at) // period_s)
        if due > taken.get(inc.number, 0):
            taken[inc.number] = due
            daemon.sample()
