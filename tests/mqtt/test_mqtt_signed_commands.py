"""Signed state-changing commands through a real mosquitto and the real publisher: a signed `ota` runs; unsigned,
tampered, wrong device, wrong command, unknown key, expired, not yet valid and replayed ones (also after a restart)
are refused with their own reply codes, counted in health and logged once; `status` stays unsigned."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from mqtt_helpers import make_config, validate
from support.cli import run_appliance
from support.mosquitto import Mosquitto
from support.subscriber import Subscriber
from support.wait import wait_until

from appliance.fleet.push import PushError, PushRefused, push_mqtt
from appliance.mqtt.config import MqttConfig
from appliance.mqtt.errors import CommandRefused
from appliance.mqtt.messages import Command
from appliance.mqtt.nonces import NonceStore
from appliance.mqtt.publisher import MqttPublisher
from appliance.ota.commandsig import sign_command, signature_check
from appliance.ota.delivery import is_read_only
from appliance.ota.signing import TrustedKeys, generate_keypair, load_private_key

ROLLBACK = {"action": "rollback"}


class Device:
    """A publisher with an ``ota`` command (read-only only for {"action": "status"}, as the supervisor registers
    it) and a read-only ``status`` command, recording what ran."""

    def __init__(self, broker: Mosquitto, tmp_path: Path, trusted: TrustedKeys, nonce_path: Path | None = None,
                 **commands: Any) -> None:
        self.ran: list[Command] = []
        self.publisher = MqttPublisher(make_config(broker, commands=commands), tmp_path / "spool.sqlite3",
                                       signature_check=signature_check(trusted),
                                       nonce_path=nonce_path or tmp_path / "state" / "nonces.log")
        self.publisher.on_command("ota", lambda cmd: self.ran.append(cmd) or {"done": True}, read_only=is_read_only)
        self.publisher.on_command("status", lambda cmd: self.ran.append(cmd) or {"ok": True}, read_only=True)

    def start(self, sub: Subscriber) -> "Device":
        def online(ms: list[Any]) -> int:
            return len([m for m in ms if m.topic == "plant/dev1/status" and b'"online"' in m.payload])

        before = online(sub.messages)
        self.publisher.start()
        # The command subscription is live once the "online" status is out (the session subscribes first).
        assert sub.wait_for(lambda ms: online(ms) > before)
        return self


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Ed25519PrivateKey, TrustedKeys]:
    generate_keypair(tmp_path / "keys" / "operator.key", tmp_path / "keys" / "operator.pub")
    return load_private_key(tmp_path / "keys" / "operator.key"), TrustedKeys.from_paths([tmp_path / "keys"])


@pytest.fixture
def sub(broker: Mosquitto, subscriber_factory: Any) -> Subscriber:
    sub: Subscriber = subscriber_factory(broker, ["plant/dev1/reply", "plant/dev1/status"])
    return sub


@pytest.fixture
def device(broker: Mosquitto, tmp_path: Path, keys: Any, sub: Subscriber) -> Iterator[Device]:
    dev = Device(broker, tmp_path, keys[1]).start(sub)
    yield dev
    dev.publisher.stop()


def ask(sub: Subscriber, payload: dict[str, Any], name: str = "ota", device: str = "dev1") -> dict[str, Any]:
    before = len(sub.on_topic("/reply"))
    sub.client.publish(f"plant/{device}/command/{name}", json.dumps(payload), qos=1)
    assert sub.wait_for(lambda ms: len([m for m in ms if m.topic.endswith("/reply")]) > before)
    reply = sub.json_on("/reply")[-1]
    validate("command_reply", reply)
    return reply


def signed(key: Ed25519PrivateKey, args: dict[str, Any] = ROLLBACK, **kw: Any) -> dict[str, Any]:
    target = {"topic_prefix": "plant", "device_id": "dev1", "command": "ota", **kw}
    payload = sign_command(key, args=args, **target)
    validate("command", payload)
    return payload


def refused(reply: dict[str, Any]) -> str:
    assert reply["ok"] is False, reply
    return str(reply["error"]["code"])


def test_a_signed_rollback_runs_and_its_signature_is_the_documented_one(sub, device, keys) -> None:
    payload = signed(keys[0], request_id="r1")
    reply = ask(sub, payload)
    assert reply["ok"] is True and reply["result"] == {"done": True}
    assert [(c.name, dict(c.args)) for c in device.ran] == [("ota", ROLLBACK)]
    # Independently of the code: the documented bytes, made by hand, verify under the operator's public key.
    auth = {k: v for k, v in payload["auth"].items() if k != "signature"}
    message = b"appliance-command-v1\n" + json.dumps({"args": ROLLBACK, "auth": auth, "request_id": "r1"},
                                                     sort_keys=True, separators=(",", ":")).encode()
    keys[0].public_key().verify(base64.b64decode(payload["auth"]["signature"]), message)  # raises if not
    assert abs(auth["issued_at_ms"] / 1000 - time.time()) < 60 and len(auth["nonce"]) == 32


def test_status_stays_unsigned(sub, device) -> None:
    assert ask(sub, {"request_id": "s1"}, name="status")["ok"] is True
    assert ask(sub, {"request_id": "s2", "args": {"action": "status"}})["ok"] is True
    assert len(device.ran) == 2


def test_each_bad_command_is_refused_with_its_code_before_the_handler(sub, device, keys, tmp_path) -> None:
    key = keys[0]
    other = Ed25519PrivateKey.generate()
    tampered = signed(key)
    tampered["args"] = {"url": "https://evil.example/model.bundle"}
    retargeted = signed(key, device_id="dev2")
    retargeted["auth"]["device_id"] = "dev1"  # the signature covers it
    cases = [
        ({"args": ROLLBACK}, "unsigned"),
        ({"args": {"upload_id": "u1", "index": 0, "count": 1, "data": "AA=="}}, "unsigned"),  # chunks too
        ({"args": {"path": "/data/model.bundle"}}, "unsigned"),
        (tampered, "bad_signature"),
        (retargeted, "bad_signature"),
        ({**signed(key), "auth": {**signed(key)["auth"], "nonce": "xyz"}}, "bad_signature"),  # malformed auth
        (signed(key, device_id="dev2"), "wrong_target"),                # for device B, received by A
        (signed(key, command="status"), "wrong_target"),                # for `status`, received as `ota`
        (signed(key, topic_prefix="other-plant"), "wrong_target"),
        (signed(other), "unknown_key"),
        (signed(key, now=time.time() - 300 - 30 - 5), "expired"),       # max_age_s 300 + clock_skew_s 30
        (signed(key, now=time.time() + 30 + 5), "not_yet_valid"),
    ]
    codes = [refused(ask(sub, payload)) for payload, _ in cases]
    assert codes == [code for _, code in cases]
    assert device.ran == []
    # Within the allowances it runs: issued 5 s short of the limits either way.
    for now in (time.time() - 330 + 5, time.time() + 30 - 5):
        assert ask(sub, signed(key, now=now))["ok"] is True
    assert len(device.ran) == 2
    counts = device.publisher.stats().commands_refused
    assert counts == {"unsigned": 3, "bad_signature": 3, "wrong_target": 3, "unknown_key": 1, "expired": 1,
                      "not_yet_valid": 1, "replayed": 0}
    health = device.publisher.health_payload()
    validate("health", health)
    assert health["mqtt"]["commands_refused"] == counts


def test_a_replay_is_refused_also_after_a_restart(broker, tmp_path, keys, sub) -> None:
    key, trusted = keys
    once = signed(key)                                   # no request_id: nothing but the nonce recognizes it
    with_id = signed(key, request_id="r7")
    dev = Device(broker, tmp_path, trusted).start(sub)
    try:
        first_once = ask(sub, once)
        assert first_once["ok"] is True
        assert ask(sub, once) == first_once              # a redelivery, known by its nonce: not run again
        first = ask(sub, with_id)
        assert first["ok"] is True
        assert ask(sub, with_id) == first                # a QoS 1 redelivery: the first reply again, no second run
        assert refused(ask(sub, {**with_id, "request_id": "r8"})) == "bad_signature"  # the id is signed too
        assert len(dev.ran) == 2
    finally:
        dev.publisher.stop()
    again = Device(broker, tmp_path, trusted).start(sub)
    try:
        assert refused(ask(sub, once)) == "replayed"
        assert refused(ask(sub, with_id)) == "replayed"  # the request-id memory is gone; the nonce store is not
        assert again.ran == []
        assert ask(sub, signed(key))["ok"] is True       # a fresh command still runs
    finally:
        again.publisher.stop()


def test_a_refusal_is_logged_once_at_warning_without_the_signature(sub, device, keys, caplog) -> None:
    payload = signed(Ed25519PrivateKey.generate(), request_id="w1")
    with caplog.at_level(logging.WARNING, logger="appliance.mqtt"):
        assert refused(ask(sub, payload)) == "unknown_key"
    lines = [r.getMessage() for r in caplog.records if "w1" in r.getMessage()]
    assert len(lines) == 1 and "refused (unknown_key)" in lines[0], lines
    assert payload["auth"]["signature"] not in caplog.text


def test_unsigned_commands_run_only_when_signatures_are_not_required(broker, tmp_path, keys, sub) -> None:
    dev = Device(broker, tmp_path, keys[1], require_signature=False).start(sub)
    try:
        assert ask(sub, {"args": ROLLBACK})["ok"] is True
        bad = signed(keys[0])
        bad["args"] = {"path": "/elsewhere"}
        assert refused(ask(sub, bad)) == "bad_signature"  # a signature that is given is still checked
        assert len(dev.ran) == 1
    finally:
        dev.publisher.stop()


def _broker(broker: Mosquitto) -> MqttConfig:
    return MqttConfig(host=broker.host, port=broker.port, device_id="cli")


def test_push_signs_with_a_key_and_without_one_fails_with_the_devices_reason(broker, device, keys) -> None:
    assert push_mqtt(_broker(broker), "dev1", "plant", [ROLLBACK], sign_key=keys[0],
                     reply_timeout_s=20) == 1
    assert [dict(c.args) for c in device.ran] == [ROLLBACK]
    with pytest.raises(PushRefused) as info:
        push_mqtt(_broker(broker), "dev1", "plant", [ROLLBACK], reply_timeout_s=20)
    assert info.value.code == "unsigned" and "--sign-key" in str(info.value)
    assert len(device.ran) == 1


def test_the_documented_signed_command_is_signed_as_documented(repo_root: Path) -> None:
    text = (repo_root / "docs" / "mqtt.md").read_text()
    body = text.split("### Signed commands", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    doc = json.loads(body)
    validate("command", doc)
    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))  # the test key the doc names
    auth = {k: v for k, v in doc["auth"].items() if k != "signature"}
    message = b"appliance-command-v1\n" + json.dumps({"args": doc["args"], "auth": auth,
                                                     "request_id": doc["request_id"]},
                                                    sort_keys=True, separators=(",", ":")).encode()
    key.public_key().verify(base64.b64decode(doc["auth"]["signature"]), message)
    raw = key.public_key().public_bytes_raw()
    assert doc["auth"]["key_id"] == hashlib.sha256(raw).hexdigest()[:16]


def test_the_nonce_store_forgets_expired_nonces_and_skips_a_torn_line(tmp_path: Path) -> None:
    a, b, c, d = ("a" * 32, "b" * 32, "c" * 32, "d" * 32)
    path = tmp_path / "nonces.log"
    path.write_text(f"2000 {a}\n500 {b}\n3000 {c[:7]}")  # b expired at 500; the last line torn by a power cut
    store = NonceStore(path)
    store.open(now_ms=1000, window_ms=330_000)
    assert store.seen(a, 1000) and not store.seen(b, 1000)
    assert path.read_text() == f"2000 {a}\n"      # compacted on open
    store.add(d, expires_ms=5000, now_ms=1000)
    store.close()
    again = NonceStore(path)
    again.open(now_ms=2500, window_ms=330_000)                       # a has expired since
    assert again.seen(d, 2500) and not again.seen(a, 2500)
    assert path.read_text() == f"5000 {d}\n"
    again.close()


def test_push_says_so_when_no_device_answers(broker: Mosquitto, keys: Any) -> None:
    with pytest.raises(PushError) as info:
        push_mqtt(_broker(broker), "nobody", "plant", [ROLLBACK], sign_key=keys[0], reply_timeout_s=1)
    assert not isinstance(info.value, PushRefused) and "no reply from nobody within 1 s" in str(info.value)


def test_the_cli_refuses_an_unreadable_sign_key_as_bad_input(tmp_path: Path) -> None:
    done = run_appliance("ota", "push", "--mqtt", "127.0.0.1:1", "--device", "dev1", "--action", "rollback",
                         "--sign-key", str(tmp_path / "missing.key"), expect=None)
    assert done.returncode == 2 and "missing.key: cannot read private key" in done.stderr, done.stderr


def test_a_nonce_that_cannot_be_recorded_fails_closed(broker: Mosquitto, tmp_path: Path, keys: Any,
                                                      sub: Subscriber) -> None:
    (tmp_path / "not-a-dir").write_text("")
    dev = Device(broker, tmp_path, keys[1], nonce_path=tmp_path / "not-a-dir" / "nonces.log").start(sub)
    try:
        reply = ask(sub, signed(keys[0]))
        assert reply["error"]["code"] == "internal" and "it did not run" in reply["error"]["message"], reply
        assert dev.ran == []
    finally:
        dev.publisher.stop()


def test_an_unsigned_command_with_a_signed_commands_request_id_does_not_stop_it(sub, device, keys) -> None:
    """Push ids are predictable: whoever can write the command topic may send them first, unsigned."""
    rid = "push-5f2c91ab-0"
    assert ask(sub, {"request_id": rid}, name="status")["ok"] is True
    assert refused(ask(sub, {"request_id": rid, "args": ROLLBACK})) == "unsigned"
    assert ask(sub, {"request_id": rid, "args": {"action": "status"}})["ok"] is True  # read-only `ota`
    reply = ask(sub, signed(keys[0], request_id=rid))
    assert reply["ok"] is True and reply["command"] == "ota" and reply["result"] == {"done": True}, reply
    assert [dict(c.args) for c in device.ran if c.name == "ota"] == [{"action": "status"}, ROLLBACK]


def test_a_signed_command_is_judged_by_when_it_arrived_not_by_its_wait_in_the_queue(
        broker: Mosquitto, tmp_path: Path, keys: Any, sub: Subscriber) -> None:
    dev = Device(broker, tmp_path, keys[1], max_age_s=2, clock_skew_s=0)
    release = threading.Event()
    dev.publisher.on_command("slow", lambda _cmd: {"released": release.wait(30)}, read_only=True)
    dev.start(sub)
    try:
        sub.client.publish("plant/dev1/command/slow", json.dumps({"request_id": "slow-1"}), qos=1)
        issued = time.time()
        sub.client.publish("plant/dev1/command/ota", json.dumps(signed(keys[0], request_id="r-late", now=issued)),
                           qos=1)
        wait_until(lambda: time.time() > issued + 2.5, message="the rollback's window to pass while it waits")
        release.set()
        assert sub.wait_for(lambda ms: any(b'"r-late"' in m.payload for m in ms if m.topic.endswith("/reply")))
        reply = next(r for r in sub.json_on("/reply") if r["request_id"] == "r-late")
        assert reply["ok"] is True, reply
    finally:
        release.set()
        dev.publisher.stop()


def test_a_payload_json_cannot_read_gets_a_bad_request_reply(sub, device) -> None:
    for raw in ('{"request_id": "big", "args": {"n": ' + "9" * 5000 + "}}", "[" * 100_000):
        before = len(sub.on_topic("/reply"))
        sub.client.publish("plant/dev1/command/status", raw, qos=1)
        assert sub.wait_for(lambda ms: len([m for m in ms if m.topic.endswith("/reply")]) > before)
        reply = sub.json_on("/reply")[-1]
        validate("command_reply", reply)
        assert reply["error"]["code"] == "bad_request", reply
    assert device.ran == []


def test_a_damaged_nonce_store_fails_closed_and_takes_new_commands(broker, tmp_path, keys, sub, caplog) -> None:
    key, trusted = keys
    old = signed(key, now=time.time() - 1)
    dev = Device(broker, tmp_path, trusted).start(sub)
    try:
        assert ask(sub, old)["ok"] is True
    finally:
        dev.publisher.stop()
    path = tmp_path / "state" / "nonces.log"
    path.write_bytes(path.read_bytes().replace(old["auth"]["nonce"].encode(), b"\xff" * 32))  # a bad sector
    again = Device(broker, tmp_path, trusted).start(sub)
    try:
        with caplog.at_level(logging.ERROR, logger="appliance.mqtt"):
            assert refused(ask(sub, old)) == "replayed"
        assert "is damaged" in caplog.text and "refused as replayed" in caplog.text
        assert [p.name for p in path.parent.glob("nonces.log.damaged-*")] != []
        assert ask(sub, signed(key, now=time.time() + 1))["ok"] is True  # issued after the reset: it runs
        assert len(again.ran) == 1
    finally:
        again.publisher.stop()


def test_a_command_expires_at_the_instant_its_nonce_is_forgotten(tmp_path: Path, keys: Any) -> None:
    from appliance.mqtt.authz import CommandAuthorizer
    from appliance.mqtt.config import CommandsConfig
    from appliance.mqtt.topics import Topics

    key, trusted = keys
    config = CommandsConfig(max_age_s=300, clock_skew_s=30)
    authz = CommandAuthorizer(config, Topics("plant", "dev1"), signature_check(trusted),
                              NonceStore(tmp_path / "nonces.log"))
    payload = signed(key, now=1_700_000_000)
    issued = payload["auth"]["issued_at_ms"] / 1000
    args = ("ota", None, payload["args"], payload["auth"])
    assert authz.authorize(*args, received_at=issued + 10).nonce == payload["auth"]["nonce"]
    with pytest.raises(CommandRefused) as info:
        authz.authorize(*args, received_at=issued + 330)  # the store forgets the nonce at this instant
    assert info.value.code == "expired"
    authz.close()
