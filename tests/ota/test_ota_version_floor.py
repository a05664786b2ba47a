"""Anti-rollback: a validly signed but older (or superseded) bundle is refused as ``downgrade``; the operator's
rollback to a kept version still works; the floor survives restarts and is written durably. Real keys, real
signed bundles, the real OtaManager and store, the real ONNX Runtime engine builder on a tiny ONNX model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.otamanager import offline_base, ota_manager
from support.schemas import validate_ota_status

from appliance.ota.config import HealthPolicy
from appliance.ota.errors import OtaRejected
from appliance.ota.manager import OtaManager
from appliance.ota.manifest import version_order
from appliance.ota.store import OtaStore, Pointer

NO_WATCH = HealthPolicy(period_s=0)  # an install ends active at the switch: no health watch after it


def rejected(m: OtaManager, bundle: Path) -> OtaRejected:
    with pytest.raises(OtaRejected) as info:
        m.install(bundle)
    return info.value


def test_versions_are_ordered_as_dotted_numbers() -> None:
    assert version_order("10") > version_order("9")  # not as strings
    assert version_order("2024.05.1") > version_order("2024.4") > version_order("2023.12.31")
    assert version_order("1.0") == version_order("1") == version_order("1.0.0")
    assert version_order("1.0.1") > version_order("1")
    for unordered in ("2.0-rc1", "beta", "v2", "1..2", "1.", ""):
        assert version_order(unordered) is None, unordered


def test_a_replayed_older_bundle_is_a_downgrade_and_the_active_version_serves_on(tmp_path, keys, sign,
                                                                                 tiny_source) -> None:
    events: list = []
    m = ota_manager(tmp_path / "state", keys.trusted(), events=events, base_spec=offline_base, health=NO_WATCH)
    old = sign(tiny_source("1"), "1.bundle")
    assert m.install(old)["state"] == "active"
    assert m.install(sign(tiny_source("2"), "2.bundle"))["state"] == "active"
    events.clear()
    refusal = rejected(m, old)
    assert refusal.code == "downgrade"
    assert "version 1 is not newer than 2, the newest version this device has served" in refusal.reason
    assert [e.state for e in events] == ["received", "verifying", "rejected"]  # refused before staging
    assert events[-1].code == "downgrade" and events[-1].version == "1"
    validate_ota_status(events[-1].to_dict())  # what the supervisor publishes on ota/status
    assert m.store.serving() == "2" and m.store.read_pointer() == Pointer("2", (None, "1"))
    assert m.store.read_floor() == "2" and m.status()["version_floor"] == "2"


def test_an_explicit_rollback_still_works_and_the_versions_rolled_away_from_stay_refused(
        tmp_path, keys, sign, tiny_source) -> None:
    m = ota_manager(tmp_path / "state", keys.trusted(), base_spec=offline_base, health=NO_WATCH, keep_versions=3)
    bundles = {v: sign(tiny_source(v), f"{v}.bundle") for v in ("1", "2", "3")}
    for version in ("1", "2", "3"):
        assert m.install(bundles[version])["state"] == "active"
    assert m.rollback()["to"] == "2" and m.store.serving() == "2"  # the operator goes back to a kept version
    assert m.rollback()["to"] == "1" and m.store.serving() == "1"
    assert m.store.read_floor() == "3"  # a rollback never lowers the floor
    for version in ("3", "2"):  # superseded, then rolled away from: a replay either way
        assert rejected(m, bundles[version]).code == "downgrade"
    assert m.store.serving() == "1"
    assert m.install(sign(tiny_source("4"), "4.bundle"))["state"] == "active"  # the way forward: a newer version
    assert m.store.read_floor() == "4"


def test_a_version_that_cannot_be_ordered_is_refused_with_the_rule(tmp_path, keys, sign, tiny_source) -> None:
    m = ota_manager(tmp_path / "state", keys.trusted(), base_spec=offline_base, health=NO_WATCH)
    refusal = rejected(m, sign(tiny_source("2.0-rc1"), "rc.bundle"))
    assert refusal.code == "invalid_manifest"
    assert "version '2.0-rc1' cannot be ordered: bundle versions are dotted numbers" in refusal.reason
    assert m.store.serving() is None and m.store.read_floor() is None and m.store.installed() == []


def test_numeric_order_not_string_order_decides(tmp_path, keys, sign, tiny_source) -> None:
    m = ota_manager(tmp_path / "state", keys.trusted(), base_spec=offline_base, health=NO_WATCH)
    assert m.install(sign(tiny_source("9"), "9.bundle"))["state"] == "active"
    assert m.install(sign(tiny_source("10"), "10.bundle"))["state"] == "active"
    assert rejected(m, sign(tiny_source("9.5"), "9.5.bundle")).code == "downgrade"
    assert rejected(m, sign(tiny_source("10.0"), "10.0.bundle")).code == "downgrade"  # the same as 10


def test_the_floor_is_durable_survives_a_restart_and_a_damaged_one_refuses(tmp_path, keys, sign,
                                                                          tiny_source) -> None:
    state = tmp_path / "state"
    old = sign(tiny_source("1"), "1.bundle")
    for bundle in (old, sign(tiny_source("2"), "2.bundle")):
        m = ota_manager(state, keys.trusted(), base_spec=offline_base, health=NO_WATCH)
        assert m.install(bundle)["state"] == "active"
    store = OtaStore(state)
    assert json.loads((store.root / "floor.json").read_text()) == {"format": 1, "version": "2"}
    assert not list(store.root.glob(".floor.json.*"))  # written through a temp file renamed over
    (store.root / ".floor.json.123.abcd").write_text("half")  # a power cut mid-write leaves this
    restarted = ota_manager(state, keys.trusted(), base_spec=offline_base, health=NO_WATCH)
    assert restarted.start_serving().version == "2"
    assert not list(store.root.glob(".floor.json.*"))
    assert rejected(restarted, old).code == "downgrade"
    (store.root / "floor.json").write_text("{not json")
    refusal = rejected(restarted, sign(tiny_source("3"), "3.bundle"))
    assert refusal.code == "downgrade" and "unreadable" in refusal.reason
    assert store.serving() == "2"


def test_a_floor_behind_the_pointer_counts_the_active_version(tmp_path, keys, sign, tiny_source) -> None:
    """A power cut between moving the pointer and raising the floor: the active version is the floor, and a
    rollback raises the file to it before the pointer moves back."""
    state = tmp_path / "state"
    m = ota_manager(state, keys.trusted(), base_spec=offline_base, health=NO_WATCH)
    old = sign(tiny_source("1"), "1.bundle")
    for bundle in (old, sign(tiny_source("2"), "2.bundle")):
        assert m.install(bundle)["state"] == "active"
    (OtaStore(state).root / "floor.json").write_text(json.dumps({"format": 1, "version": "1"}))
    assert m.version_floor() == "2" and rejected(m, old).code == "downgrade"
    assert m.rollback()["to"] == "1"
    assert m.store.read_floor() == "2" and rejected(m, sign(tiny_source("2", name="2b"), "2b.bundle")).code \
        == "downgrade"
