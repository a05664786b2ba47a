"""Bundles and the checks before anything is built: signature, archive, hashes, manifest, compatibility, disk
space. Real keys, real tar files, the real ONNX Runtime engine builder on a tiny real ONNX model."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

# Not 'from conftest import': with several test directories that name is whichever conftest pytest imported.
from ota_helpers import DETECTOR_ONNX, make_tiny_detector, tiny_model_profile, yolo_engine_profile, yolo_model_profile  # noqa: E402
from support.cli import run_appliance
from support.otamanager import ota_manager
from support.provisioned import require_detector
from support.schemas import validate_ota_status

from appliance.ota.config import HealthPolicy, OtaConfig
from appliance.ota.errors import OtaRejected, RollbackError
from appliance.ota.manager import OtaManager
from appliance.ota.offline import OfflineSwitcher
from appliance.ota.signing import TrustedKeys
from appliance.ota.store import Pointer


def rewrite(bundle: Path, out: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    """Copy a bundle member by member, letting edit(name, data) -> data | None (None drops the member)."""
    with tarfile.open(bundle) as src, tarfile.open(out, "w") as dst:
        for info in src:
            data = edit(info.name, src.extractfile(info).read())  # type: ignore[union-attr]
            if data is not None:
                info.size = len(data)
                dst.addfile(info, io.BytesIO(data))
    return out


def test_signed_bundle_installs_and_points_at_the_new_version(tmp_path, keys, sign, tiny_source) -> None:
    events: list = []
    m = ota_manager(tmp_path / "state", keys.trusted(), events=events)
    result = m.install(sign(tiny_source("2")))
    assert result["state"] == "active"
    assert m.store.read_pointer().version == "2" and m.store.serving() == "2"
    assert m.store.check_files("2") is None
    states = [e.state for e in events]
    assert states[:4] == ["received", "verifying", "staging", "building"]
    assert states[-1] == "active" and "switching" in states
    assert any(e.state == "building" and e.percent == 100 for e in events)
    assert not any(m.store.staging_dir.iterdir())
    for e in events:
        validate_ota_status(e)  # what the supervisor publishes on ota/status


@pytest.mark.parametrize("case,code", [
    ("truncated", "corrupt"), ("garbage", "corrupt"), ("no_manifest", "corrupt"), ("unsigned", "unsigned"),
    ("tampered_manifest", "bad_signature"), ("other_key", "unknown_key"), ("hash_mismatch", "hash_mismatch"),
    ("size_mismatch", "hash_mismatch"), ("extra_file", "corrupt"), ("bad_sig_doc", "corrupt"),
])
def test_bad_bundles_are_rejected_with_a_reason(tmp_path, keys, sign, tiny_source, case, code) -> None:
    good = sign(tiny_source("2"))
    bad = tmp_path / "bad.bundle"
    if case == "truncated":
        bad.write_bytes(good.read_bytes()[:5000])
    elif case == "garbage":
        bad.write_bytes(b"\x00not a tar at all" * 100)
    elif case == "no_manifest":
        rewrite(good, bad, lambda n, d: None if n == "manifest.json" else d)
    elif case == "unsigned":
        rewrite(good, bad, lambda n, d: None if n == "manifest.sig" else d)
    elif case == "tampered_manifest":
        rewrite(good, bad, lambda n, d: d.replace(b'"score": 0.5', b'"score": 0.1') if n == "manifest.json" else d)
    elif case == "other_key":
        bad = sign(tiny_source("2", name="o"), "other.bundle", key=keys.other_private)
    elif case == "hash_mismatch":
        rewrite(good, bad, lambda n, d: bytes([d[0] ^ 1]) + d[1:] if n == "model.onnx" else d)
    elif case == "size_mismatch":
        rewrite(good, bad, lambda n, d: d + b"\x00" if n == "model.onnx" else d)
    elif case == "extra_file":
        def add(n: str, d: bytes) -> bytes:
            return d
        rewrite(good, bad, add)
        with tarfile.open(bad, "a") as t:
            info = tarfile.TarInfo("payload.sh")
            info.size = 3
            t.addfile(info, io.BytesIO(b"x=1"))
    elif case == "bad_sig_doc":
        rewrite(good, bad, lambda n, d: b"{not json" if n == "manifest.sig" else d)
    events: list = []
    m = ota_manager(tmp_path / "state", keys.trusted(), events=events)
    with pytest.raises(OtaRejected) as info:
        m.install(bad)
    assert info.value.code == code, info.value
    assert events[-1].state == "rejected" and events[-1].code == code
    for e in events:
        validate_ota_status(e)
    assert m.store.read_pointer().version is None and m.store.installed() == []
    assert not any(m.store.staging_dir.iterdir())


def test_no_trusted_keys_rejects_everything(tmp_path, sign, tiny_source) -> None:
    with pytest.raises(OtaRejected, match="no trusted keys are configured .ota.trusted_keys.: OTA updates are off"):
        ota_manager(tmp_path / "state", TrustedKeys({})).install(sign(tiny_source("2")))


def test_key_files_load_only_as_the_ed25519_pem_kind_asked_for(tmp_path, keys) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from appliance.ota.signing import KeyFileError, load_private_key, load_public_key, sign_manifest

    private, public = load_private_key(keys.private), load_public_key(keys.public)
    assert TrustedKeys.from_paths([keys.public]).verify(b"m", sign_manifest(b"m", private)) == keys.id
    assert TrustedKeys({keys.id: public}).verify(b"m", sign_manifest(b"m", private)) == keys.id
    ec_key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "ec.key").write_bytes(ec_key.private_bytes(serialization.Encoding.PEM,
                                                           serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))
    (tmp_path / "ec.pub").write_bytes(ec_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    refusals = [(load_private_key, tmp_path / "missing.key", "cannot read private key: No such file"),
                (load_public_key, tmp_path / "missing.pub", "cannot read public key: No such file"),
                (load_private_key, keys.public, "not an unencrypted PEM private key: "),
                (load_public_key, keys.private, "not a PEM public key: "),
                (load_private_key, tmp_path / "ec.key", r"not an Ed25519 key \(EC\w+\)"),
                (load_public_key, tmp_path / "ec.pub", r"not an Ed25519 public key \(EC\w+\)")]
    for load, path, message in refusals:
        with pytest.raises(KeyFileError, match=f"^{re.escape(str(path))}: {message}"):
            load(path)


def test_manifest_path_traversal_is_invalid(tmp_path, keys, sign, tiny_source) -> None:
    good = sign(tiny_source("2"))
    from appliance.fleet.bundle import write_bundle
    from appliance.ota.signing import load_private_key, sign_manifest

    with tarfile.open(good) as t:
        doc = json.loads(t.extractfile("manifest.json").read())  # type: ignore[union-attr]
    doc["files"]["../evil"] = doc["files"]["model.onnx"]
    data = json.dumps(doc).encode()
    bad = tmp_path / "evil.bundle"
    write_bundle(bad, data, sign_manifest(data, load_private_key(keys.private)), {})
    with pytest.raises(OtaRejected) as info:
        ota_manager(tmp_path / "state", keys.trusted()).install(bad)
    assert info.value.code == "invalid_manifest" and "not a safe relative path" in info.value.reason
    assert not (tmp_path / "state" / "ota" / "evil").exists()


def test_appliance_too_old_is_incompatible(tmp_path, keys, sign, tiny_source) -> None:
    bundle = sign(tiny_source("2", min_appliance_version="99.0"))
    with pytest.raises(OtaRejected, match="needs appliance >= 99.0, this is") as info:
        ota_manager(tmp_path / "state", keys.trusted()).install(bundle)
    assert info.value.code == "incompatible"


def test_input_shape_that_does_not_match_the_onnx_is_incompatible(tmp_path, keys, sign, tiny_source) -> None:
    bundle = sign(tiny_source("2", model_profile=tiny_model_profile(size=64)))
    m = ota_manager(tmp_path / "state", keys.trusted())
    with pytest.raises(OtaRejected, match=r"input images is \['\?', 3, 32, 32\].*needs \[batch, 3, 64, 64\]") as info:
        m.install(bundle)
    assert info.value.code == "incompatible"
    assert m.store.installed() == [] and not (m.store.versions_dir / "2").exists()


def test_real_detector_at_another_input_size_is_incompatible(tmp_path, keys, sign, tiny_source) -> None:
    require_detector()  # fails, not skips, without the detector

    profile = yolo_model_profile()
    profile["input"].update(width=320, height=320)
    bundle = sign(tiny_source("2", onnx=DETECTOR_ONNX, model_profile=profile, engine_profile=yolo_engine_profile()))
    with pytest.raises(OtaRejected, match=r"\['\?', 3, 416, 416\].*\[batch, 3, 320, 320\]"):
        ota_manager(tmp_path / "state", keys.trusted()).install(bundle)


def test_engine_build_failure_is_rejected(tmp_path, keys, sign, tiny_source) -> None:
    broken = make_tiny_detector(tmp_path / "broken.onnx", broken=True)
    events: list = []
    m = ota_manager(tmp_path / "state", keys.trusted(), events=events)
    with pytest.raises(OtaRejected) as info:
        m.install(sign(tiny_source("2", onnx=broken)))
    assert info.value.code == "build_failed", info.value
    assert any(e.state == "building" for e in events)
    assert m.store.installed() == [] and m.store.read_pointer().version is None
    for e in events:
        validate_ota_status(e)


def serving_1(tmp_path: Path, keys: Any, sign: Any, tiny_source: Any, events: list, switcher: Any = None,
              **kw: Any) -> OtaManager:
    """A manager that serves version 1 (routed, pointed at); no health watch unless ``health`` is given."""
    kw.setdefault("health", HealthPolicy(period_s=0))
    m = ota_manager(tmp_path / "state", keys.trusted(), switcher, events=events, **kw)
    assert m.install(sign(tiny_source("1"), "1.bundle"))["state"] == "active"
    return m


def assert_rejected_and_1_serves(m: OtaManager, events: list, code: str) -> None:
    """The update ended with a `rejected` status, and version 1 is still routed, pointed at and alone on disk."""
    assert events[-1].state == "rejected" and events[-1].code == code and events[-1].version == "2", events[-1]
    for e in events:
        validate_ota_status(e)
    assert m.switcher.current().version == "1"  # type: ignore[union-attr]
    assert m.store.read_pointer().version == "1" and m.store.serving() == "1" and m.store.installed() == ["1"]
    assert not (m.store.versions_dir / "2").exists() and not any(m.store.staging_dir.iterdir())


def test_a_golden_file_that_is_not_an_image_is_rejected_and_the_old_version_serves(tmp_path, keys, sign,
                                                                                   tiny_source) -> None:
    events: list = []
    m = serving_1(tmp_path, keys, sign, tiny_source, events)
    text = tmp_path / "notes.jpg"
    text.write_text("a text file named like an image")
    bundle = sign(tiny_source("2", golden=[{"file": "golden/notes.jpg", "expected": []}],
                              golden_files={"golden/notes.jpg": text}))
    with pytest.raises(OtaRejected) as info:
        m.install(bundle)
    assert info.value.code == "golden_mismatch", info.value
    assert "golden/notes.jpg" in info.value.reason and "not a readable image" in info.value.reason
    assert_rejected_and_1_serves(m, events, "golden_mismatch")
    # the offline CLI reports it as a refusal (exit 1), its last status line is the rejection
    done = run_cli("install", str(bundle), "--trusted-key", str(keys.public), "--state-dir", str(tmp_path / "cli"))
    assert done.returncode == 1 and "rejected: golden_mismatch" in done.stderr, done.stderr
    last = json.loads([line for line in done.stderr.splitlines() if line.startswith("{")][-1])
    assert last["state"] == "rejected" and last["code"] == "golden_mismatch"


def test_a_golden_frame_the_candidate_fails_to_run_is_rejected(tmp_path, keys, sign, tiny_source) -> None:
    import cv2
    import numpy as np

    events: list = []
    m = serving_1(tmp_path, keys, sign, tiny_source, events)
    wide = tmp_path / "wide.png"
    cv2.imwrite(str(wide), np.full((40, 64, 3), 127, np.uint8))
    profile = {**tiny_model_profile(), "limits": {"max_width": 48}}  # the pipeline refuses the 64 px frame
    bundle = sign(tiny_source("2", model_profile=profile, golden=[{"file": "golden/wide.png", "expected": []}],
                              golden_files={"golden/wide.png": wide}))
    with pytest.raises(OtaRejected) as info:
        m.install(bundle)
    assert info.value.code == "golden_mismatch" and "tiny@2 failed to run it: InputRejected" in info.value.reason
    assert_rejected_and_1_serves(m, events, "golden_mismatch")


def test_a_device_golden_set_the_model_cannot_match_is_a_golden_mismatch(tmp_path, keys, sign,
                                                                       tiny_source) -> None:
    import cv2
    import numpy as np

    device = tmp_path / "device-golden"
    device.mkdir()
    cv2.imwrite(str(device / "line.png"), np.full((32, 32, 3), 90, np.uint8))
    golden_json = device / "golden.json"
    golden_json.write_text(json.dumps({"frames": [{"file": "line.png", "expected": []}]}))
    events: list = []
    m = serving_1(tmp_path, keys, sign, tiny_source, events, device_golden_dir=device)  # it sees nothing: passes
    assert any(e.state == "checking" and e.message == "1 golden frame(s)" for e in events)
    # this line's cameras see an "a" there, which the tiny model never reports
    golden_json.write_text(json.dumps({"frames": [{"file": "line.png", "expected": [
        {"class_name": "a", "score": 0.9, "box": [2, 2, 20, 20]}]}]}))
    with pytest.raises(OtaRejected) as info:
        m.install(sign(tiny_source("2")))
    assert info.value.code == "golden_mismatch", info.value
    assert f"device golden set {device}: line.png: 0 matched, missing ['a@0.90']" in info.value.reason
    assert_rejected_and_1_serves(m, events, "golden_mismatch")
    # a broken device set refuses every update rather than being skipped
    golden_json.write_text("{not json")
    with pytest.raises(OtaRejected, match=f"golden_mismatch: device golden set: {golden_json}"):
        m.install(sign(tiny_source("2", name="2b"), "2b.bundle"))
    assert_rejected_and_1_serves(m, events, "golden_mismatch")


class HealthFails(OfflineSwitcher):
    """Reading the new version's health raises (a bug, an unexpected error) while traffic is on it."""

    def health(self, route: Any, since: float, until: float | None = None) -> Any:
        if route.version == "2":
            raise RuntimeError("health source went away")
        return super().health(route, since, until)


def test_an_unexpected_error_after_traffic_moved_is_rejected_and_routes_back(tmp_path, keys, sign,
                                                                            tiny_source) -> None:
    events: list = []
    m = serving_1(tmp_path, keys, sign, tiny_source, events, switcher=HealthFails(),
                  health=HealthPolicy(period_s=5, min_requests=1))
    with pytest.raises(OtaRejected) as info:
        m.install(sign(tiny_source("2")))
    assert info.value.code == "internal" and "RuntimeError: health source went away" in info.value.reason
    assert "watching" in [e.state for e in events]  # it failed after the new version took the traffic
    assert_rejected_and_1_serves(m, events, "internal")


def test_keep_versions_keeps_that_many_on_disk_and_rollback_reaches_them_then_the_base(tmp_path, keys, sign,
                                                                                      tiny_source) -> None:
    from appliance.detector.serving.switcher import ModelSpec

    m = OtaManager(tmp_path / "state", keys.trusted(), OfflineSwitcher(), base_spec=lambda: ModelSpec(None, None, None),
                   config=OtaConfig(keep_versions=2, health=HealthPolicy(period_s=0)))  # the CLI's stand-in base
    for version in ("1", "2", "3", "4", "5"):
        assert m.install(sign(tiny_source(version), f"{version}.bundle"))["state"] == "active"
        assert len(m.store.installed()) <= 2
    assert m.store.installed() == ["4", "5"]
    assert sorted(p.name for p in m.store.versions_dir.iterdir()) == ["4", "5"]
    assert m.store.read_pointer() == Pointer("5", (None, "4"))
    assert m.rollback()["to"] == "4" and m.store.serving() == "4"
    assert m.rollback()["to"] is None and m.store.serving() is None  # the base model is always there
    with pytest.raises(RollbackError):
        m.rollback()
    # a version rolled away from is not reachable any more and does not count on top of keep_versions
    assert m.install(sign(tiny_source("6"), "6.bundle"))["state"] == "active"
    assert m.rollback()["to"] is None
    assert m.install(sign(tiny_source("7"), "7.bundle"))["state"] == "active"
    assert m.store.installed() == ["7"] and m.store.read_pointer() == Pointer("7", (None,))


def test_keep_versions_1_keeps_only_the_active_version(tmp_path, keys, sign, tiny_source) -> None:
    m = ota_manager(tmp_path / "state", keys.trusted(), keep_versions=1, health=HealthPolicy(period_s=0))
    for version in ("1", "2", "3"):
        m.install(sign(tiny_source(version), f"{version}.bundle"))
    assert m.store.installed() == ["3"] and m.store.read_pointer() == Pointer("3", (None,))


def test_an_update_while_another_process_holds_the_state_lock_is_busy(tmp_path, keys, sign, tiny_source) -> None:
    from appliance.ota.store import OtaStore

    events: list = []
    m = ota_manager(tmp_path / "state", keys.trusted(), events=events)
    bundle = sign(tiny_source("2"))
    with OtaStore(tmp_path / "state").lock():  # its own open file, as `appliance ota install` would hold it
        with pytest.raises(OtaRejected) as info:
            m.install(bundle, wait=False)
    assert info.value.code == "busy"
    assert [e.state for e in events] == ["received", "rejected"] and events[-1].code == "busy"
    assert m.store.installed() == []
    assert m.install(bundle)["state"] == "active"  # once the lock is free


def test_same_version_twice_is_a_duplicate(tmp_path, keys, sign, tiny_source) -> None:
    m = ota_manager(tmp_path / "state", keys.trusted())
    m.install(sign(tiny_source("2")))
    with pytest.raises(OtaRejected) as info:
        m.install(sign(tiny_source("2", name="again"), "again.bundle"))
    assert info.value.code == "duplicate"
    assert m.store.serving() == "2"


def test_over_the_size_limit_is_too_large(tmp_path, keys, sign, tiny_source) -> None:
    with pytest.raises(OtaRejected) as info:
        ota_manager(tmp_path / "state", keys.trusted(), max_bundle_bytes=1000).install(sign(tiny_source("2")))
    assert info.value.code == "too_large"


def test_injected_free_space_check_rejects_cleanly(tmp_path, keys, sign, tiny_source) -> None:
    m = OtaManager(tmp_path / "state", keys.trusted(), OfflineSwitcher(), free_space=lambda _p: 1000)
    with pytest.raises(OtaRejected, match="staging needs .* bytes .* 1000 are free") as info:
        m.install(sign(tiny_source("2")))
    assert info.value.code == "disk_full"
    assert not any(m.store.staging_dir.iterdir()) and m.store.installed() == []


@pytest.mark.parametrize("precheck", [True, False], ids=["precheck", "enospc-while-writing"])
def test_disk_full_while_staging_on_a_real_small_filesystem(tmp_path, keys, sign, tiny_source, small_tmpfs,
                                                            precheck) -> None:
    # the tiny model is ~80 KB; the bundle brings it twice (model + a large "golden" image) to overflow 200 KB
    big = tmp_path / "big.jpg"
    big.write_bytes(b"\xff" * 300_000)
    bundle = sign(tiny_source("2", golden_files={"golden/big.jpg": big},
                              golden=[{"file": "golden/big.jpg", "expected": []}]))
    kw = {} if precheck else {"free_space": lambda _p: 1 << 40}  # lie, so the write itself hits ENOSPC
    m = OtaManager(small_tmpfs, keys.trusted(), OfflineSwitcher(), config=OtaConfig(reserve_bytes=0), **kw)
    with pytest.raises(OtaRejected) as info:
        m.install(bundle)
    assert info.value.code == "disk_full", info.value
    assert not any(m.store.staging_dir.iterdir()) and not any(m.store.versions_dir.iterdir())
    assert m.store.read_pointer().version is None


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_appliance("ota", *args, expect=None)


def test_cli_keygen_sign_install_status_rollback(tmp_path, tiny_source) -> None:
    done = run_cli("keygen", "--private", str(tmp_path / "k"), "--public", str(tmp_path / "k.pub"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o600
    again = run_cli("keygen", "--private", str(tmp_path / "k"), "--public", str(tmp_path / "k.pub"))
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr
    for version in ("2", "3"):
        done = run_cli("sign", str(tiny_source(version)), "--key", str(tmp_path / "k"),
                       "--out", str(tmp_path / f"{version}.bundle"))
        assert done.returncode == 0 and f"tiny@{version}" in done.stdout, done.stderr
    state = str(tmp_path / "state")
    for version in ("2", "3"):
        done = run_cli("install", str(tmp_path / f"{version}.bundle"), "--trusted-key", str(tmp_path / "k.pub"),
                       "--state-dir", state)
        assert done.returncode == 0 and json.loads(done.stdout)["state"] == "active", done.stderr
    status = json.loads(run_cli("status", "--json", "--state-dir", state).stdout)
    assert status["active"] == "3" and status["history"] == [None, "2"] and status["installed"] == ["2", "3"]
    text = run_cli("status", "--state-dir", state).stdout
    assert "history: base, 2\n" in text, text  # the base model by name, not null
    done = run_cli("rollback", "--state-dir", state)
    assert done.returncode == 0 and done.stdout.startswith("rolled back from 3 to 2"), done.stdout + done.stderr
    assert json.loads(run_cli("status", "--json", "--state-dir", state).stdout)["serving_at_next_start"] == "2"
    assert json.loads(run_cli("rollback", "--state-dir", state, "--json").stdout)["to"] is None  # 2 -> base
    wrong = run_cli("install", str(tmp_path / "3.bundle"), "--trusted-key", str(tmp_path / "nope.pub"),
                    "--state-dir", state)
    assert wrong.returncode == 2 and "cannot read public key" in wrong.stderr
    bad_src = run_cli("sign", str(tmp_path / "missing"), "--key", str(tmp_path / "k"), "--out", str(tmp_path / "x"))
    assert bad_src.returncode == 2 and "bundle.yaml" in bad_src.stderr


def test_inbox_push_is_atomic_and_the_watcher_installs(tmp_path, keys, sign, tiny_source) -> None:
    from appliance.fleet.push import push_to_inbox
    from appliance.ota.delivery import InboxWatcher

    m = ota_manager(tmp_path / "state", keys.trusted())
    inbox = tmp_path / "inbox"
    push_to_inbox(sign(tiny_source("2")), inbox)
    push_to_inbox(sign(tiny_source("x", name="x", min_appliance_version="99"), "x.bundle"), inbox)
    assert [p.name for p in inbox.iterdir() if p.name.startswith(".")] == []  # no temp files left behind
    os.utime(inbox / "update.bundle", (2_000_000_000, 2_000_000_000))  # pushed last: installed last
    outcomes = InboxWatcher(m, inbox).poll_once()
    assert [name for name, _ in outcomes] == ["x.bundle", "update.bundle"]  # oldest first
    assert dict(outcomes)["update.bundle"] == "active"
    assert dict(outcomes)["x.bundle"].startswith("rejected: incompatible")
    assert (inbox / "done" / "update.bundle").exists() and (inbox / "rejected" / "x.bundle").exists()
    assert m.store.serving() == "2"


def test_the_engine_profiles_golden_inputs_travel_in_the_bundle_and_the_build_uses_them(
        tmp_path, keys, sign, tiny_source, tiny_onnx) -> None:
    import numpy as np
    import onnxruntime as ort
    from ota_helpers import tiny_engine_profile

    spec = ort.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"]).get_inputs()[0]
    shape = [2, *spec.shape[1:]]  # batch 2: the seeded golden inputs start at batch 1
    npz = tmp_path / "engine.npz"
    np.savez(npz, **{spec.name: np.random.default_rng(3).uniform(0, 1, shape).astype(np.float32)})
    profile = tiny_engine_profile()
    profile["verify"]["golden"] = "golden/engine.npz"  # relative: to the staged bundle, never the cwd
    m = ota_manager(tmp_path / "state", keys.trusted())
    assert m.install(sign(tiny_source("2", engine_profile=profile,
                                      golden_files={"golden/engine.npz": npz})))["state"] == "active"
    manifest = m.store.manifest("2")
    assert "golden/engine.npz" in manifest.files  # hashed and signed like the ONNX
    without = manifest.model_dump(mode="json")
    del without["files"]["golden/engine.npz"]
    with pytest.raises(ValueError, match="verify.golden 'golden/engine.npz' is not listed in files"):
        type(manifest).model_validate(without)
    (engine_manifest,) = (m.store.versions_dir / "2").rglob("engines/*/*/manifest.json")
    assert json.loads(engine_manifest.read_text())["timing"]["batch"] == 2  # built and checked on the .npz


def test_an_engine_golden_file_missing_from_the_bundle_is_an_invalid_manifest(tmp_path, keys, sign,
                                                                            tiny_source) -> None:
    from ota_helpers import tiny_engine_profile

    from appliance.fleet.bundle import BundleSourceError

    profile = tiny_engine_profile()
    profile["verify"]["golden"] = "golden/engine.npz"
    with pytest.raises(BundleSourceError, match="golden/engine.npz"):
        sign(tiny_source("2", engine_profile=profile))
