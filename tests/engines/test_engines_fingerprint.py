"""The device fingerprint read from fixture trees, and a cache miss (rebuild) for a change in each field (device,
machine, ONNX, profile, builder name and version, GPU name, compute capability, CUDA driver, precision), a hit
again when the field changes back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engines_helpers import ORIN_CPUINFO, X86_CPUINFO, EngineEnv, make_onnx, write_jetson_tree

from appliance.detector.buildprofile import EngineProfile
from appliance.detector.engines.builders.ort import OnnxRuntimeBuilder
from appliance.detector.engines.fingerprint import DeviceProbe


def test_reads_a_jetson_tree(tmp_path: Path) -> None:
    fields = DeviceProbe(write_jetson_tree(tmp_path), machine="aarch64").fields()
    assert fields["l4t"] == "36.3.0"
    assert fields["jetpack"] == "6.0+b106"
    assert fields["cuda"] == "12.2.140"
    assert fields["board"] == "NVIDIA Jetson Orin Nano Developer Kit"
    assert fields["cpu_model"] == "implementer 0x41 part 0xd42"
    assert "asimd" in fields["cpu_flags"].split()
    assert fields["machine"] == "aarch64"


def test_reads_a_pc_tree_and_older_cuda(tmp_path: Path) -> None:
    root = write_jetson_tree(tmp_path, l4t=None, jetpack=None, cuda=None, board=None, cpuinfo=X86_CPUINFO)
    (root / "usr/local/cuda").mkdir(parents=True)
    (root / "usr/local/cuda/version.txt").write_text("CUDA Version 10.2.89\n")
    fields = DeviceProbe(root, machine="x86_64").fields()
    assert fields["cpu_model"] == "Intel(R) Xeon(R) CPU @ 2.20GHz"
    assert fields["cpu_flags"] == "avx avx2 fma fpu sse sse2"  # sorted, de-duplicated across cores
    assert fields["cuda"] == "10.2.89"
    assert "l4t" not in fields and "jetpack" not in fields and "board" not in fields


def test_empty_root_still_fingerprints(tmp_path: Path) -> None:
    fields = DeviceProbe(tmp_path, machine="x86_64").fields()
    assert fields == {"machine": "x86_64", "cpu_model": "unknown", "cpu_flags": ""}


def test_jetpack_falls_back_to_l4t_core_and_ignores_removed_packages(tmp_path: Path) -> None:
    (tmp_path / "var/lib/dpkg").mkdir(parents=True)
    (tmp_path / "var/lib/dpkg/status").write_text(
        "Package: nvidia-jetpack\nStatus: deinstall ok config-files\nVersion: 5.1\n\n"
        "Package: nvidia-l4t-core\nStatus: install ok installed\nVersion: 35.4.1-20230801124926\n"
    )
    assert DeviceProbe(tmp_path).jetpack_version() == "35.4.1-20230801124926"


def test_the_real_host_fingerprints() -> None:
    fields = DeviceProbe("/").fields()
    assert fields["cpu_model"] != "unknown"  # /proc/cpuinfo exists on every Linux host


# Each case changes one fingerprint input; the build must miss, produce a new key, and hit again on revert.
DEVICE_CHANGES = {
    "l4t": dict(l4t=("36", "4.0")),
    "jetpack": dict(jetpack="6.1+b123"),
    "cuda": dict(cuda="12.6.68"),
    "board": dict(board="NVIDIA Jetson AGX Orin Developer Kit"),
    "cpu_model": dict(cpuinfo=ORIN_CPUINFO.replace("0xd42", "0xd4f")),
    "cpu_flags": dict(cpuinfo=ORIN_CPUINFO.replace(" asimddp", " asimddp sve2")),
}


@pytest.mark.parametrize("field", sorted(DEVICE_CHANGES))
def test_device_field_change_misses_then_reverting_hits(env: EngineEnv, field: str) -> None:
    first = env.manager().ensure(env.profile())
    assert not first.cache_hit
    changed_root = write_jetson_tree(env.root / f"device-{field}", **DEVICE_CHANGES[field])
    second = env.manager(device_root=changed_root).ensure(env.profile())
    assert not second.cache_hit and second.key != first.key
    before = json.loads(first.manifest_path.read_text())["fingerprint"]
    after = json.loads(second.manifest_path.read_text())["fingerprint"]
    assert {name for name in after if after[name] != before.get(name)} == {field}
    again = env.manager().ensure(env.profile())
    assert again.cache_hit and again.key == first.key


def test_machine_change_misses_then_reverting_hits(env: EngineEnv) -> None:
    first = env.manager(machine="aarch64").ensure(env.profile())
    second = env.manager(machine="x86_64").ensure(env.profile())
    assert not second.cache_hit and second.key != first.key
    again = env.manager(machine="aarch64").ensure(env.profile())
    assert again.cache_hit and again.key == first.key


def test_onnx_change_misses_then_reverting_hits(env: EngineEnv) -> None:
    first = env.manager().ensure(env.profile())
    make_onnx(env.models / "tiny.onnx", seed=1)  # same graph, new weights
    second = env.manager().ensure(env.profile())
    assert not second.cache_hit and second.key != first.key
    assert env.manager().ensure(env.profile()).cache_hit
    make_onnx(env.models / "tiny.onnx", seed=0)  # the original weights again
    again = env.manager().ensure(env.profile())
    assert again.cache_hit and again.key == first.key


def test_profile_change_misses_then_reverting_hits(env: EngineEnv) -> None:
    first = env.manager().ensure(env.profile())
    text = env.profile_path.read_text()
    env.profile_path.write_text(text.replace("max: 4", "max: 8"))
    second = env.manager().ensure(env.profile())
    assert not second.cache_hit and second.key != first.key and second.max_batch == 8
    env.profile_path.write_text(text)
    again = env.manager().ensure(env.profile())
    assert again.cache_hit and again.key == first.key


class _UpgradedOnnxRuntime(OnnxRuntimeBuilder):
    """The real builder reporting a newer toolchain version: what a JetPack/ORT upgrade changes in the key."""

    def version(self) -> str:
        return super().version() + "+upgraded"


def test_toolchain_upgrade_rebuilds_and_logs_what_changed(env: EngineEnv, caplog: pytest.LogCaptureFixture) -> None:
    first = env.manager().ensure(env.profile())
    caplog.set_level("INFO", logger="appliance.detector.engines")
    upgraded_root = write_jetson_tree(env.root / "upgraded", l4t=("36", "4.0"), jetpack="6.1+b123")
    second = env.manager(builder=_UpgradedOnnxRuntime(), device_root=upgraded_root).ensure(env.profile())
    assert not second.cache_hit and second.key != first.key
    assert second.verification.startswith("passed")
    changed = [r.getMessage() for r in caplog.records if "changed since the last build" in r.getMessage()]
    assert changed and "builder_version" in changed[0] and "l4t: 36.3.0 -> 36.4.0" in changed[0]
    assert "jetpack: 6.0+b106 -> 6.1+b123" in changed[0]
    downgraded = env.manager().ensure(env.profile())  # back to the old toolchain: its engine is still cached
    assert downgraded.cache_hit and downgraded.key == first.key


class _GpuReportingOnnxRuntime(OnnxRuntimeBuilder):
    """The real ORT builder reporting the fields a GPU builder adds to the key (TensorRTBuilder reads them from
    libcuda), and optionally another builder name or precision: one fingerprint field changed at a time."""

    def __init__(self, name: str = "onnxruntime", precision: str = "fp32", **gpu: str) -> None:
        self.name = name
        self._precision = precision
        self._gpu = {"gpu_name": "Orin", "gpu_cc": "8.7", "cuda_driver": "12.2", **gpu}

    def device_fields(self) -> dict[str, str]:
        return dict(self._gpu)

    def precision(self, profile: EngineProfile) -> str:
        return self._precision


BUILDER_CHANGES: dict[str, dict[str, str]] = {
    "builder": dict(name="onnxruntime-cuda"),
    "gpu_name": dict(gpu_name="NVIDIA GeForce RTX 4090"),  # the same image moved to another GPU
    "gpu_cc": dict(gpu_cc="8.9"),
    "cuda_driver": dict(cuda_driver="12.6"),
}
# A precision change needs the detection gate's frames and a detector head, so it is tested on the real detector
# (test_engines_int8.py: the int8 and the fallback fp32 engines' keys differ in precision and the frames' hashes).


@pytest.mark.parametrize("field", sorted(BUILDER_CHANGES))
def test_builder_field_change_misses_then_reverting_hits(env: EngineEnv, field: str) -> None:
    first = env.manager(builder=_GpuReportingOnnxRuntime()).ensure(env.profile())
    assert not first.cache_hit
    second = env.manager(builder=_GpuReportingOnnxRuntime(**BUILDER_CHANGES[field])).ensure(env.profile())
    assert not second.cache_hit and second.key != first.key
    before = json.loads(first.manifest_path.read_text())["fingerprint"]
    after = json.loads(second.manifest_path.read_text())["fingerprint"]
    assert {name for name in after if after[name] != before.get(name)} == {field}
    again = env.manager(builder=_GpuReportingOnnxRuntime()).ensure(env.profile())
    assert again.cache_hit and again.key == first.key
