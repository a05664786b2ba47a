"""The OPC UA server of the real appliance: `appliance run` as a process on OpenCV's vtest.avi (people walking)
with three counting lines, the real detector (Triton, ONNX Runtime) and a real mosquitto; one appliance for the
module. Clients from two stacks connect to it:

- node-opcua (another OPC UA stack) over Basic256Sha256 SignAndEncrypt with a user name and password browses the
  model and sees a line's count rise when a walker crosses; it also signs in over Aes256Sha256RsaPss, and a wrong
  password and an untrusted client certificate are refused;
- asyncua reads the same counts the MQTT counts message carries (a rise reaches it within a frame of MQTT's,
  publishing interval included), gets a ResultReady event for an MQTT event, is refused anonymously, and may
  reset a line only as an operator.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from asyncua import Client, ua
from asyncua.crypto.security_policies import SecurityPolicyBasic256Sha256
from support.daemon import RunningDaemon
from support.engineseed import seed_state_dir
from support.mosquitto import Mosquitto
from support.opcua import ClientIdentity, client_identity, require_node_client, run_node_client, trust
from support.ports import free_port
from support.shm import private_shm_dir
from support.subscriber import Subscriber

from appliance.opcua.passwords import hash_password

REPO = Path(__file__).resolve().parents[2]
VTEST = REPO / ".models" / "vtest" / "vtest.avi"
# Vertical lines across the square (x in pixels): walkers cross one of them within seconds.
LINES = {"west": 120, "left": 250, "middle": 384, "right": 520, "east": 650}
FPS = 5  # the camera's rate: a frame is 0.2 s
READER, OPERATOR = ("plc", "plc-secret-1"), ("shift-lead", "lead-secret-2")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("detector_onnx")]


@dataclass
class Running:
    device: str
    endpoint: str
    server_certificate: Path
    work: Path
    trusted: ClientIdentity
    untrusted: ClientIdentity
    subscriber: Subscriber
    daemon: RunningDaemon

    @property
    def namespace(self) -> str:
        return f"urn:appliance:{self.device}"

    def mqtt_counts(self) -> dict[str, Any] | None:
        counts = self.subscriber.of_type("counts")
        return counts[-1] if counts else None


def _config(tmp: Path, broker: Mosquitto, shm_root: Path, device: str, port: int) -> Path:
    lines = "\n".join(f"        - {{name: {name}, a: [{x}, 120], b: [{x}, 540], in_side: right}}"
                      for name, x in LINES.items())
    path = tmp / "appliance.yaml"
    path.write_text(f"""
device: {{id: {device}}}
paths: {{state_dir: {tmp / 'state'}, shm_root: {shm_root}}}
cameras:
  - id: hall
    source: {{type: file, path: {VTEST}, loop: true, realtime: true}}
    width: 768
    height: 576
    fps: {FPS}
    analytics:
      classes: {{person: 0.3}}
      zones:
        - {{name: floor, units: normalized, points: [[0, 0.55], [1, 0.55], [1, 1], [0, 1]]}}
      lines:
{lines}
mqtt: {{host: 127.0.0.1, port: {broker.port}, backoff: {{initial_s: 0.2, max_s: 1, jitter: 0}}}}
health: {{enabled: false}}
opcua:
  host: 127.0.0.1
  port: {port}
  interval_s: 0.5
  users:
    - {{name: {READER[0]}, password_hash: "{hash_password(READER[1])}"}}
    - {{name: {OPERATOR[0]}, password_hash: "{hash_password(OPERATOR[1])}", role: operator}}
""")
    return path


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, engine_seed: Path) -> Iterator[Running]:
    assert VTEST.is_file(), f"{VTEST} missing: scripts/setup.d/40-vtest.sh fetches it"
    require_node_client()
    tmp = tmp_path_factory.mktemp("opcua")
    device, port = f"op{uuid.uuid4().hex[:6]}", free_port()
    trusted, untrusted = client_identity(tmp, "plc"), client_identity(tmp, "stranger")
    trust(trusted, tmp / "state" / "opcua" / "trusted")
    seed_state_dir(tmp / "state", engine_seed)
    with Mosquitto(tmp / "broker") as broker:
        for shm_root in private_shm_dir():
            config = _config(tmp, broker, shm_root, device, port)
            subscriber = Subscriber(broker, f"appliance/{device}/#")
            daemon = RunningDaemon(tmp, config, REPO)
            try:
                assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
                yield Running(device, f"opc.tcp://127.0.0.1:{port}/", tmp / "state" / "opcua" / "server-cert.der",
                              tmp, trusted, untrusted, subscriber, daemon)
                assert daemon.terminate() == 0, daemon.tail()
            finally:
                daemon.close()
                subscriber.close()


def _node(running: Running, name: str, identity: ClientIdentity, policy: str, user: tuple[str, str],
          **extra: Any) -> Any:
    return run_node_client(running.work / name, endpoint=running.endpoint,
                           server_certificate=running.server_certificate, identity=identity, policy=policy,
                           user=user[0], password=user[1], **extra)


def test_node_opcua_browses_and_sees_a_line_count_rise_over_an_encrypted_password_session(running: Running) -> None:
    watch = [f"Cameras.hall.Lines.{name}.{d}" for name in LINES for d in ("In", "Out")]
    run = _node(running, "watch", running.trusted, "Basic256Sha256", READER, browse=running.device,
                namespace=running.namespace, watch=watch, timeoutMs=60000, timeout_s=90)
    print(run.output)  # the note quotes it
    assert run.returncode == 0, run.output
    assert run.lines("connected") == [f"{running.endpoint} Basic256Sha256 SignAndEncrypt"]
    browsed = "\n".join(run.lines("browse"))
    for name in LINES:
        for d in ("In", "Out"):
            assert f"/Cameras/hall/Lines/{name}/{d} = " in browsed and "(9) ns=" in browsed  # 9: UInt64
        assert f"/Cameras/hall/Lines/{name}/ResetCounts (Method)" in browsed
    assert '/VisionStateMachine/CurrentState = {"locale":"en","text":"Operational"}' in browsed
    assert "/Cameras/hall/Zones/floor/Entered = " in browsed and "/Device/Model = " in browsed
    risen = run.lines("increased")[0].split(" after ")[0]
    assert risen != "none"
    # Ground truth apart from OPC UA: the MQTT cross events say that line was crossed that way.
    line, direction = risen.split(";s=")[1].split(".")[3:5]
    crossings = [e for e in running.subscriber.of_type("event")
                 if e["event"] == "cross" and e["line"] == line and e["direction"] == direction.lower()]
    assert crossings, f"OPC UA says {line} {direction} rose, but MQTT had no such cross event"


def test_node_opcua_signs_in_with_aes256_and_is_refused_a_wrong_password_or_an_untrusted_certificate(
        running: Running) -> None:
    good = _node(running, "aes", running.trusted, "Aes256Sha256RsaPss", READER)
    assert good.returncode == 0 and good.lines("session") == [f"user {READER[0]}"], good.output
    wrong = _node(running, "wrong", running.trusted, "Basic256Sha256", (READER[0], "not-the-password"))
    assert wrong.returncode == 2 and wrong.lines("session") == [], wrong.output
    assert "BadUserAccessDenied" in wrong.output or "Bad" in " ".join(wrong.lines("refused")), wrong.output
    stranger = _node(running, "stranger", running.untrusted, "Basic256Sha256", READER)
    assert stranger.returncode == 2 and stranger.lines("session") == [], stranger.output
    assert stranger.lines("connected") == [] or stranger.lines("refused"), stranger.output
    print(wrong.output, stranger.output)


def _client(running: Running, user: tuple[str, str] | None) -> Client:
    client = Client(running.endpoint, timeout=10)
    client.application_uri = running.trusted.uri
    if user is not None:
        client.set_user(user[0])
        client.set_password(user[1])
    return client


async def _secure(client: Client, running: Running) -> Client:
    await client.set_security(SecurityPolicyBasic256Sha256, certificate=str(running.trusted.certificate),
                              private_key=str(running.trusted.private_key),
                              server_certificate=str(running.server_certificate),
                              mode=ua.MessageSecurityMode.SignAndEncrypt)
    return client


async def _counts(client: Client, ns: int) -> dict[str, Any]:
    """The counters as the counts message lays them out, read over OPC UA."""
    async def read(path: str) -> int:
        return int(await client.get_node(ua.NodeId(f"Cameras.hall.{path}", ns)).read_value())

    lines = {name: {d: await read(f"Lines.{name}.{d.capitalize()}") for d in ("in", "out")} for name in LINES}
    zones = {"floor": {k: await read(f"Zones.floor.{k.capitalize()}") for k in ("current", "entered", "exited")}}
    return {"lines": lines, "zones": zones, "active_tracks": await read("ActiveTracks")}


class _Results:
    """Result events, and each data change with the time it arrived (time.monotonic, as the MQTT subscriber's)."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.changes: list[tuple[str, int, float]] = []

    def event_notification(self, event: Any) -> None:
        self.events.append(event)

    def datachange_notification(self, node: Any, value: Any, _data: Any) -> None:
        self.changes.append((node.nodeid.Identifier, int(value), time.monotonic()))


def _lags(results: _Results, subscriber: Subscriber, since: float) -> list[float]:
    """Per line count that rose while both watched: when OPC UA notified it minus when MQTT delivered it."""
    first_mqtt: dict[tuple[str, int], float] = {}
    for message in subscriber.messages_of_type("counts", since):
        for line, counts in message.json()["lines"].items():
            for direction, value in counts.items():
                first_mqtt.setdefault((f"Cameras.hall.Lines.{line}.{direction.capitalize()}", value), message.at)
    first_opc: dict[tuple[str, int], float] = {}
    for node, value, at in results.changes:
        first_opc.setdefault((node, value), at)
    return sorted(first_opc[key] - at for key, at in first_mqtt.items() if key in first_opc and at > since + 1)


async def _true(value: bool) -> bool:
    return value


async def _wait(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


async def _reader_checks(running: Running) -> None:
    async with await _secure(_client(running, READER), running) as client:
        ns = await client.get_namespace_index(running.namespace)
        results = _Results()
        subscription = await client.create_subscription(100, results)
        mv = await client.get_namespace_index("http://opcfoundation.org/UA/MachineVision")
        spec_type = await client.nodes.root.get_child(
            ["0:Types", "0:EventTypes", "0:BaseEventType", f"{mv}:ResultReadyEventType"])
        own_type = await spec_type.get_child(f"{ns}:ApplianceResultReadyEventType")  # its fields: Seq, TrackId...
        await subscription.subscribe_events(client.get_node(ua.NodeId("VisionSystem", ns)), [spec_type, own_type])
        await subscription.subscribe_data_change([client.get_node(ua.NodeId(f"Cameras.hall.Lines.{name}.{d}", ns))
                                                  for name in LINES for d in ("In", "Out")])
        watching = time.monotonic()

        async def same_as_mqtt() -> bool:
            mqtt = running.mqtt_counts()
            opc = await _counts(client, ns)
            return mqtt is not None and all(mqtt[k] == opc[k] for k in ("lines", "zones", "active_tracks"))
        await _wait(same_as_mqtt, 20, "the OPC UA counts to equal the latest MQTT counts message")

        async def an_mqtt_event_as_result() -> Any:
            mqtt = {(e["camera_id"], e["seq"]): e for e in running.subscriber.of_type("event")}
            return next((r for r in results.events if ("hall", r.Seq) in mqtt), None)
        result = await _wait(an_mqtt_event_as_result, 60, "a ResultReady event that MQTT also carried")
        event = {(e["camera_id"], e["seq"]): e for e in running.subscriber.of_type("event")}[("hall", result.Seq)]
        assert (result.Result, result.TrackId, result.ClassName) == (event["event"], event["track_id"],
                                                                     event["class_name"])
        assert (result.Line or None, result.Zone or None, result.Direction or None) == (
            event["line"], event["zone"], event["direction"])
        await _wait(lambda: _true(len(_lags(results, running.subscriber, watching)) >= 3), 60, "three rises")
        lags = _lags(results, running.subscriber, watching)
        print(f"OPC UA notification minus MQTT arrival, s: {[round(lag, 3) for lag in lags]}")
        assert lags[len(lags) // 2] < 1 / FPS, f"the counts lag MQTT's by more than a frame: {lags}"
        reset = client.get_node(ua.NodeId("Cameras.hall.Lines.middle", ns))
        with pytest.raises(ua.uaerrors.BadUserAccessDenied):
            await reset.call_method(ua.NodeId("Cameras.hall.Lines.middle.ResetCounts", ns))


async def _operator_resets(running: Running) -> None:
    async with await _secure(_client(running, OPERATOR), running) as client:
        ns = await client.get_namespace_index(running.namespace)
        counted = await _wait(lambda: _any_line_counted(client, ns), 60, "a line with a count")
        line = client.get_node(ua.NodeId(f"Cameras.hall.Lines.{counted}", ns))
        since = time.monotonic()
        assert await line.call_method(ua.NodeId(f"Cameras.hall.Lines.{counted}.ResetCounts", ns)) is True

        async def reset_in_mqtt() -> bool:
            return any(m["lines"][counted] == {"in": 0, "out": 0} for m in running.subscriber.of_type("counts", since))
        await _wait(reset_in_mqtt, 10, f"a counts message with line {counted} at 0")


async def _any_line_counted(client: Client, ns: int) -> str | None:
    counts = (await _counts(client, ns))["lines"]
    return next((name for name, c in counts.items() if c["in"] + c["out"] > 0), None)


def test_asyncua_reads_the_mqtt_counts_and_results_and_only_an_operator_resets_a_line(running: Running) -> None:
    asyncio.run(_reader_checks(running))
    asyncio.run(_operator_resets(running))


def test_an_anonymous_session_is_refused(running: Running) -> None:
    async def anonymous() -> None:
        async with await _secure(_client(running, None), running):
            pass
    with pytest.raises(ua.uaerrors.BadIdentityTokenRejected):
        asyncio.run(anonymous())
