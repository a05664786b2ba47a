"""The device side of a fleet rollout (appliance.ota.follower, appliance.ota.desired): a signed desired state makes a
real OtaManager download (real HTTP), hash-check and install the bundle; every bad document, key, group, version,
hash is refused and reported with the rollout id; a failed rollout is not tried again, even after a restart."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from support.schemas import validate_message, validate_ota_status
from support.wait import wait_until

from appliance.detector.serving.switcher import ModelSpec
from appliance.durable import sha256_file
from appliance.fleet.desiredstate import sign_desired
from appliance.ota.config import HealthPolicy, OtaConfig
from appliance.ota.desired import DesiredState, canonical, parse_desired
from appliance.ota.errors import OtaRejected
from appliance.ota.follower import DesiredStateFollower
from appliance.ota.manager import OtaManager
from appliance.ota.offline import OfflineSwitcher
from appliance.ota.signing import load_private_key


class Device:
    """A real manager on the offline switcher serving the base model, its follower for group ``line-1``, and every
    status it reported."""

    def __init__(self, state: Path, keys: Any, **ota: Any) -> None:
        self.events: list[Any] = []
        self.config = OtaConfig(group="line-1", allow_http=True, health=HealthPolicy(period_s=0), **ota)
        base = ModelSpec(None, None, None)  # type: ignore[arg-type]  # the offline switcher's base model
        self.manager = OtaManager(state, keys.trusted(), OfflineSwitcher(), config=self.config,
                                  status_cb=self.events.append, base_spec=lambda: base)
        self.manager.start_serving()
        self.follower = DesiredStateFollower(self.manager, self.config, "line-1", state / "ota" / "incoming")

    @property
    def active(self) -> str | None:
        return self.manager.store.read_pointer().version


@pytest.fixture
def publish(bundle_server, keys, sign, tiny_source):  # type: ignore[no-untyped-def]
    """publish(version, rollout_id, **changes) -> the signed document's bytes, its bundle served over HTTP.
    ``times``: (issued_at_ms, expires_at_ms), by default now and an hour from now."""
    base_url, served = bundle_server

    def _publish(version: str, rollout_id: str, *, key: Path | None = None, group: str = "line-1",
                 source: Path | None = None, sha256: str | None = None, url: str | None = None,
                 times: tuple[int, int] | None = None, state_: str = "active") -> bytes:
        bundle = sign(source or tiny_source(version), f"{version}-{rollout_id}.bundle")
        shutil.copy(bundle, served / bundle.name)
        now_ms = int(time.time() * 1000)
        issued, expires = times or (now_ms, now_ms + 3_600_000)
        state = DesiredState(group, rollout_id, version, url or f"{base_url}/{bundle.name}",
                             sha256 or sha256_file(bundle), issued, expires, state_)
        doc = sign_desired(state, load_private_key(key or keys.private))
        validate_message("ota_desired", doc)
        return json.dumps(doc).encode()

    return _publish


def test_a_signed_desired_state_installs_the_bundle_and_every_status_carries_the_rollout_id(tmp_path, keys,
                                                                                           publish) -> None:
    dev = Device(tmp_path / "state", keys)
    assert dev.follower.handle(publish("2", "r2")) == "active"
    assert dev.active == "2"
    ours = [e for e in dev.events if e.version == "2" or e.state in ("received", "verifying")]
    assert [e.state for e in ours][0] == "received" and ours[-1].state == "active"
    assert all(e.rollout_id == "r2" for e in ours), ours
    payload = validate_ota_status(ours[-1])
    assert payload["rollout_id"] == "r2"
    assert not list((tmp_path / "state" / "ota" / "incoming").glob("*.bundle"))  # the download is removed


def test_the_same_document_again_and_a_device_already_on_the_version_do_nothing(tmp_path, keys, publish) -> None:
    dev = Device(tmp_path / "state", keys)
    doc = publish("2", "r2")
    assert dev.follower.handle(doc) == "active"
    n = len(dev.events)
    assert dev.follower.handle(doc) == "ignored"  # the retained message again, after a reconnect
    restarted = Device(tmp_path / "state", keys)  # a restart forgets the last document, not the version
    assert restarted.follower.handle(doc) == "current"
    assert len(dev.events) == n and not [e for e in restarted.events if e.state != "active"]


@pytest.mark.parametrize("case, code", [
    ("unknown key", "unknown_key"),
    ("tampered url", "bad_signature"),
    ("unsigned", "unsigned"),
    ("other group", "invalid_manifest"),
    ("not json", "corrupt"),
    ("unknown field", "corrupt"),
])
def test_a_document_that_is_not_trusted_or_not_ours_is_refused_and_nothing_is_downloaded(
        tmp_path, keys, publish, bundle_server, case, code) -> None:
    dev = Device(tmp_path / "state", keys)
    if case == "unknown key":
        raw = publish("2", "r2", key=keys.other_private)
    elif case == "other group":
        raw = publish("2", "r2", group="line-2")  # signed for line-2, copied onto line-1's topic
    elif case == "not json":
        raw = b"{not json"
    else:
        doc = json.loads(publish("2", "r2"))
        if case == "tampered url":
            doc["url"] = "http://127.0.0.1:1/elsewhere.bundle"
        elif case == "unsigned":
            del doc["signature"]
        else:
            doc["note"] = "x"
        raw = json.dumps(doc).encode()
    assert dev.follower.handle(raw) == "refused"
    assert dev.events[-1].state == "rejected" and dev.events[-1].code == code, dev.events[-1]
    if case != "not json":
        assert dev.events[-1].rollout_id == "r2"
    validate_ota_status(dev.events[-1])
    versions = tmp_path / "state" / "ota" / "versions"
    assert dev.active is None and (not versions.exists() or not any(versions.iterdir()))


def test_the_signature_covers_the_canonical_form_whatever_the_key_order(keys) -> None:
    doc = sign_desired(DesiredState("g", "r", "2", "https://x/b", "0" * 64, 1, 2), load_private_key(keys.private))
    shuffled = dict(reversed(list(doc.items())))
    assert parse_desired(json.dumps(shuffled, indent=3).encode(), keys.trusted(), "g").version == "2"
    unsigned = {k: v for k, v in doc.items() if k != "signature"}
    assert canonical(unsigned) == json.dumps(unsigned, sort_keys=True, separators=(",", ":")).encode()


def test_a_version_below_the_floor_is_refused_before_downloading(tmp_path, keys, publish, bundle_server) -> None:
    dev = Device(tmp_path / "state", keys)
    assert dev.follower.handle(publish("3", "r3")) == "active"
    old = publish("2", "r2-again", url=f"{bundle_server[0]}/never-fetched.bundle")  # a 404 if it were fetched
    assert dev.follower.handle(old) == "refused"
    last = dev.events[-1]
    assert (last.state, last.code, last.rollout_id) == ("rejected", "downgrade", "r2-again"), last
    assert "not newer than 3" in last.message
    assert dev.active == "3"


def test_a_version_rolled_back_from_is_not_taken_again_and_its_rollback_stays_the_last_word(tmp_path, keys,
                                                                                           publish,
                                                                                           tiny_source) -> None:
    dev = Device(tmp_path / "state", keys)
    doc = publish("2", "r2")
    assert dev.follower.handle(doc) == "active"
    dev.manager.rollback()  # the operator's rollback (the rollout's, when this device turned unhealthy)
    n = len(dev.events)
    restarted = Device(tmp_path / "state", keys)  # the retained document comes again after a restart
    assert restarted.follower.handle(doc) == "rolled_away"
    assert restarted.active is None and len(dev.events) == n and not restarted.events
    again = publish("2", "r2-again", source=tiny_source("2", name="2b"))
    assert restarted.follower.handle(again) == "rolled_away"  # whichever rollout asks


def test_a_bundle_whose_hash_differs_from_the_document_is_refused(tmp_path, keys, publish) -> None:
    dev = Device(tmp_path / "state", keys)
    assert dev.follower.handle(publish("2", "r2", sha256="ab" * 32)) == "refused"
    assert (dev.events[-1].code, dev.events[-1].version) == ("hash_mismatch", "2")
    assert dev.active is None


def test_a_failed_rollout_is_not_retried_even_after_a_restart_but_a_new_rollout_id_is(tmp_path, keys, publish,
                                                                                     tiny_source) -> None:
    golden = tmp_path / "device-golden"
    golden.mkdir()
    cv2.imwrite(str(golden / "line.png"), np.full((32, 32, 3), 90, np.uint8))
    (golden / "golden.json").write_text(json.dumps({"frames": [{"file": "line.png", "expected": [
        {"class_name": "a", "score": 0.9, "box": [2, 2, 20, 20]}]}]}))  # the tiny model never sees an "a" there
    dev = Device(tmp_path / "state", keys, device_golden_dir=golden)
    doc = publish("2", "r2")
    assert dev.follower.handle(doc) == "refused"
    assert (dev.events[-1].code, dev.events[-1].rollout_id) == ("golden_mismatch", "r2")
    restarted = Device(tmp_path / "state", keys, device_golden_dir=golden)
    assert restarted.follower.handle(doc) == "failed_before"
    assert not restarted.events  # nothing downloaded, nothing reported
    memory = json.loads((tmp_path / "state" / "ota" / "rollouts.json").read_text())
    assert memory["failed"] == [{"rollout_id": "r2", "version": "2", "outcome": "golden_mismatch"}]
    (golden / "golden.json").write_text(json.dumps({"frames": [{"file": "line.png", "expected": []}]}))
    assert restarted.follower.handle(publish("2", "r2-fixed", source=tiny_source("2", name="2b"))) == "active"
    assert restarted.active == "2"


def test_the_worker_thread_follows_the_newest_offer(tmp_path, keys, publish) -> None:
    dev = Device(tmp_path / "state", keys)
    dev.follower.start()
    try:
        dev.follower.offer(b"")  # the topic cleared (an empty retained message): nothing to do
        dev.follower.offer(publish("2", "r2"))
        wait_until(lambda: dev.active == "2", timeout_s=60)
    finally:
        dev.follower.stop()
    assert dev.follower.handle(b"") == "ignored"
    with pytest.raises(OtaRejected, match="corrupt"):
        parse_desired(b"", keys.trusted(), "line-1")


def test_the_documented_desired_state_validates_against_its_schema() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "fleet-rollout.md").read_text()
    examples = re.findall(r"<!-- schema: (\w+) -->\s*```json\n(.*?)```", text, re.S)
    assert [name for name, _ in examples] == ["ota_desired"]
    for name, body in examples:
        validate_message(name, json.loads(body))


def test_a_stopped_rollout_is_not_installed_by_a_device_that_comes_back(tmp_path, keys, publish) -> None:
    """The rollout stopped while this device was away: the retained document it finds is the signed stop."""
    dev = Device(tmp_path / "state", keys)
    assert dev.follower.handle(publish("2", "r2", state_="stopped")) == "stopped"
    assert dev.active is None and dev.events == []  # nothing downloaded, nothing published
    assert dev.manager.store.installed() == []


def test_an_expired_or_older_desired_state_is_not_followed(tmp_path, keys, publish, tiny_source) -> None:
    dev = Device(tmp_path / "state", keys)
    now_ms, src = int(time.time() * 1000), tiny_source("2")
    assert dev.follower.handle(publish("2", "r2", source=src, times=(now_ms - 7_200_000, now_ms - 1))) == "expired"
    assert dev.active is None and dev.events == []
    stop = publish("2", "r2b", source=src, state_="stopped", times=(now_ms, now_ms + 60_000))
    assert dev.follower.handle(stop) == "stopped"
    # the rollout's earlier, still valid document put back on the topic after the stop: older, not followed
    older = publish("2", "r2b", source=src, times=(now_ms - 1000, now_ms + 60_000))
    assert dev.follower.handle(older) == "older"
    assert dev.active is None and dev.events == []


def test_a_desired_state_whose_expiry_is_not_after_its_issue_is_corrupt(keys) -> None:
    doc = sign_desired(DesiredState("g", "r", "2", "https://x/b", "0" * 64, 5, 5), load_private_key(keys.private))
    with pytest.raises(OtaRejected, match="corrupt"):
        parse_desired(json.dumps(doc).encode(), keys.trusted(), "g")
