"""Signing key rotation as docs/ota.md describes it: while both public keys are trusted, bundles signed by either
install; once the old public key leaves ``ota.trusted_keys`` (read at start), a bundle it signs is refused as
``unknown_key`` before anything is written, and the version it installed serves on. Real Ed25519 keys, real signed
bundles, the real OtaManager and store, the real ONNX Runtime builder on a tiny ONNX model."""

from __future__ import annotations

import shutil

import pytest
from support.otamanager import offline_base, ota_manager

from appliance.ota.config import HealthPolicy
from appliance.ota.errors import OtaRejected
from appliance.ota.signing import TrustedKeys


def test_during_rotation_either_key_installs_and_after_it_the_old_key_is_refused(tmp_path, keys, sign,
                                                                                 tiny_source) -> None:
    old_key, new_key = keys.private, keys.other_private
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    shutil.copy(keys.public, trusted / "old.pub")
    shutil.copy(keys.other_public, trusted / "new.pub")
    state = tmp_path / "state"

    # as the supervisor builds it at start: trust is the directory's *.pub files now
    m = ota_manager(state, TrustedKeys.from_paths([trusted]), base_spec=offline_base, health=HealthPolicy(period_s=0))
    assert set(m.trusted.keys) == {keys.id, keys.other_id}
    assert m.install(sign(tiny_source("1"), "1-old.bundle", key=old_key))["state"] == "active"
    assert m.install(sign(tiny_source("2"), "2-new.bundle", key=new_key))["state"] == "active"
    assert m.install(sign(tiny_source("3"), "3-old.bundle", key=old_key))["state"] == "active"  # still trusted
    assert [m.store.verified_record(v)["key_id"] for v in ("1", "2", "3")] == [keys.id, keys.other_id, keys.id]

    (trusted / "old.pub").unlink()  # rotation done: the old public key leaves every device's trust
    # a restart reads ota.trusted_keys again
    m = ota_manager(state, TrustedKeys.from_paths([trusted]), base_spec=offline_base, health=HealthPolicy(period_s=0))
    with pytest.raises(OtaRejected) as refused:
        m.install(sign(tiny_source("4"), "4-old.bundle", key=old_key))
    assert refused.value.code == "unknown_key"
    assert refused.value.reason == f"signed by key {keys.id}, which is not trusted here (trusted: {keys.other_id})"
    assert m.store.serving() == "3" and "4" not in m.store.installed()  # refused before anything was written
    assert m.install(sign(tiny_source("4", "4-new"), "4-new.bundle", key=new_key))["state"] == "active"
    assert m.store.serving() == "4" and m.store.verified_record("4")["key_id"] == keys.other_id
