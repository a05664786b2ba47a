"""A bundle's calibration folder: every file under it is listed, hashed and signed; an int8 build on the device
calibrates on those frames (the engine's fingerprint carries their hash); a tampered or unlisted calibration file
is rejected before anything is built. Real keys, real tar files, the real detector and ONNX Runtime."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from ota_helpers import DETECTOR_ONNX, IMAGES, yolo_engine_profile, yolo_model_profile  # noqa: E402
from support.otamanager import ota_manager
from support.provisioned import require_detector

from appliance.detector.buildprofile import EngineProfile
from appliance.detector.calibration.frames import files_digest
from appliance.fleet.bundle import BundleSourceError
from appliance.ota.errors import OtaRejected
from appliance.ota.manifest import Manifest

CALIB = ("dog", "eagle", "giraffe", "scream")
HELD_OUT = ("horses", "kite", "person")


def _frames() -> dict[str, Path]:
    """Bundle name -> real image: calibration frames, and held-out gate frames in a subfolder of the same signed
    folder (a folder source reads only its own files, so the two sets stay apart)."""
    out = {f"calibration/{n}.jpg": IMAGES / f"{n}.jpg" for n in CALIB}
    out.update({f"calibration/held-out/{n}.jpg": IMAGES / f"{n}.jpg" for n in HELD_OUT})
    return out


def _int8_profile() -> dict[str, Any]:
    data = yolo_engine_profile()
    data["onnxruntime"]["precision"] = "int8"
    data["calibration"]["sources"] = [{"path": "calibration"}]  # relative: the staged bundle's folder
    data["gate"]["sources"] = [{"path": "calibration/held-out"}]
    # Three held-out images are too few for the shipped 0.95 floors to mean anything; this test is about where the
    # frames come from, not about int8's accuracy (tests/engines/test_engines_int8.py).
    data["gate"].update(min_recall=0.5, min_precision=0.5)
    return data


def _rewrite(bundle: Path, out: Path, edit: Any) -> Path:
    with tarfile.open(bundle) as src, tarfile.open(out, "w") as dst:
        for info in src:
            data = edit(info.name, src.extractfile(info).read())  # type: ignore[union-attr]
            info.size = len(data)
            dst.addfile(info, io.BytesIO(data))
    return out


@pytest.mark.slow
def test_a_bundle_with_a_calibration_folder_installs_an_int8_engine_calibrated_on_it(
        tmp_path: Path, keys: Any, sign: Any, tiny_source: Any) -> None:
    require_detector()
    src = tiny_source("2", onnx=DETECTOR_ONNX, model_profile=yolo_model_profile(), engine_profile=_int8_profile(),
                      golden_files=_frames(), calibration="calibration")
    m = ota_manager(tmp_path / "state", keys.trusted())
    result = m.install(sign(src))
    assert result["state"] == "active", result
    manifest = m.store.manifest("2")
    assert set(_frames()) <= set(manifest.files) and manifest.calibration == "calibration"
    (engine_manifest,) = (m.store.versions_dir / "2").rglob("engines/*/*/manifest.json")
    record = json.loads(engine_manifest.read_text())
    assert record["fingerprint"]["precision"] == "int8" and record["verification"]["gate"]["passed"]
    assert record["build"]["calibration_frames"] == len(CALIB)
    # The hash of the bundle's calibration files, computed over the source folder (another root, same content):
    profile = EngineProfile.model_validate(_int8_profile())
    assert record["fingerprint"]["calibration_sha256"] == files_digest(profile, "calibration", src)


@pytest.mark.parametrize("case,code", [("tampered", "hash_mismatch"), ("unlisted", "corrupt")])
def test_a_tampered_or_unlisted_calibration_file_is_rejected(tmp_path: Path, keys: Any, sign: Any,
                                                             tiny_source: Any, case: str, code: str) -> None:
    good = sign(tiny_source("2", golden_files=_frames(), calibration="calibration"))
    bad = tmp_path / "bad.bundle"
    if case == "tampered":
        _rewrite(good, bad, lambda n, d: d[:-1] + bytes([d[-1] ^ 1]) if n == "calibration/dog.jpg" else d)
    else:
        _rewrite(good, bad, lambda n, d: d)
        with tarfile.open(bad, "a") as tar:
            data = (IMAGES / "dog.jpg").read_bytes()
            info = tarfile.TarInfo("calibration/extra.jpg")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    m = ota_manager(tmp_path / "state", keys.trusted())
    with pytest.raises(OtaRejected) as info:
        m.install(bad)
    assert info.value.code == code, info.value
    assert "calibration/" in str(info.value)
    assert m.store.installed() == [] and m.store.read_pointer().version is None


def test_a_calibration_folder_that_is_missing_or_empty_is_refused_when_signing(tmp_path: Path, sign: Any,
                                                                            tiny_source: Any) -> None:
    with pytest.raises(BundleSourceError, match="'calibration' must name a folder"):
        sign(tiny_source("2", name="missing", calibration="calibration"))
    src = tiny_source("3", name="empty", calibration="calibration")
    (src / "calibration").mkdir()
    with pytest.raises(BundleSourceError, match="calibration folder is empty"):
        sign(src)


def test_a_manifest_naming_a_calibration_folder_without_listed_files_is_invalid(sign: Any,
                                                                               tiny_source: Any) -> None:
    bundle = sign(tiny_source("2", golden_files=_frames(), calibration="calibration"))
    with tarfile.open(bundle) as tar:
        data = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    Manifest.model_validate(data)  # as signed: valid
    data["files"] = {k: v for k, v in data["files"].items() if not k.startswith("calibration/")}
    with pytest.raises(ValueError, match="calibration folder 'calibration' has no files listed"):
        Manifest.model_validate(data)
