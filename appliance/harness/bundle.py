"""A signed OTA bundle of the served detector as another version: the shipped profiles with a lower score
threshold, the engine verified on one sample to keep an on-device build short."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from appliance.fleet.bundle import build_bundle
from appliance.paths import engines_dir, models_dir, profiles_dir


def detector_bundle(workdir: Path, private_key: Path, version: str) -> Path:
    """Build ``workdir/model-<version>.bundle`` signed with ``private_key`` and return its path."""
    src = workdir / f"bundle-src-{version}"
    src.mkdir()
    os.symlink(models_dir() / "yolov3-tiny" / "model.onnx", src / "model.onnx")
    profile = yaml.safe_load((profiles_dir() / "yolov3-tiny.yaml").read_text())
    profile["thresholds"]["score"] = 0.3
    engine = yaml.safe_load((engines_dir() / "yolov3-tiny.yaml").read_text())
    engine["verify"]["samples"] = 1  # keeps the on-device build short
    (src / "bundle.yaml").write_text(yaml.safe_dump({
        "model": "yolov3-tiny", "version": version, "min_appliance_version": "0.1.0",
        "model_profile": profile, "engine_profile": engine}, sort_keys=False))
    out = workdir / f"model-{version}.bundle"
    build_bundle(src, private_key, out)
    return out
