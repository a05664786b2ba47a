"""Helpers for the engine tests (imported by name; the fixtures live in conftest.py): small real ONNX models built
with onnx.helper, profile files, a fake Jetson filesystem tree for the fingerprint, and a manager wired to the
real ONNX Runtime builder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from appliance.detector.buildprofile import EngineProfile, load_profile
from appliance.detector.engines.builders.ort import OnnxRuntimeBuilder
from appliance.detector.engines.fingerprint import DeviceProbe
from appliance.detector.engines.manager import EngineManager
from appliance.detector.engines.progress import ProgressEvent, ProgressReporter

REPO = Path(__file__).resolve().parents[2]


def make_onnx(
    path: Path,
    *,
    opset: int = 17,
    seed: int = 0,
    batch: str | int = "N",
    height: str | int = 8,
    drop_input: bool = False,
    input_name: str = "images",
    pooled: bool = True,
) -> Path:
    """A small conv net: images[N,3,H,8] -> Conv+Relu -> scores[N,4,H,8], GlobalAveragePool -> pooled[N,4,1,1].
    ``pooled=False`` leaves one output (scores), as the ensemble's detector stage needs."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    x = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [batch, 3, height, 8])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batch, 4, height, 8])
    p = helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [batch, 4, 1, 1])
    nodes = [
        helper.make_node("Conv", [input_name, "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["scores"]),
        helper.make_node("GlobalAveragePool", ["scores"], ["pooled"]),
    ]
    if not pooled:
        nodes.pop()
    graph = helper.make_graph(nodes, "tiny", [] if drop_input else [x], [y, p] if pooled else [y], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    save(model, str(path))
    return path


def write_profile(engines_dir: Path, model: str = "tiny", **fields: Any) -> Path:
    data: dict[str, Any] = {"model": model, "onnx": f"{model}.onnx", "batch": {"min": 1, "opt": 2, "max": 4}}
    data.update(fields)
    engines_dir.mkdir(parents=True, exist_ok=True)
    path = engines_dir / f"{model}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


X86_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz
flags\t\t: fpu sse sse2 avx avx2 fma

processor\t: 1
model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz
flags\t\t: fpu sse sse2 avx avx2 fma
"""

ORIN_CPUINFO = """processor\t: 0
BogoMIPS\t: 62.50
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU part\t: 0xd42
"""


def write_jetson_tree(
    root: Path,
    *,
    l4t: tuple[str, str] | None = ("36", "3.0"),
    jetpack: str | None = "6.0+b106",
    cuda: str | None = "12.2.140",
    board: str | None = "NVIDIA Jetson Orin Nano Developer Kit",
    cpuinfo: str = ORIN_CPUINFO,
) -> Path:
    """A fake Jetson root: /etc/nv_tegra_release, dpkg status, CUDA version.json, device-tree model, cpuinfo."""
    root.mkdir(parents=True, exist_ok=True)
    if l4t:
        (root / "etc").mkdir(exist_ok=True)
        (root / "etc" / "nv_tegra_release").write_text(
            f"# R{l4t[0]} (release), REVISION: {l4t[1]}, GCID: 36191598, BOARD: generic, EABI: aarch64, "
            "DATE: Mon May  6 17:34:21 UTC 2024\n# KERNEL_VARIANT: oot\n"
        )
    if jetpack:
        (root / "var/lib/dpkg").mkdir(parents=True, exist_ok=True)
        (root / "var/lib/dpkg/status").write_text(
            "Package: bash\nStatus: install ok installed\nVersion: 5.1-6\n\n"
            f"Package: nvidia-jetpack\nStatus: install ok installed\nArchitecture: arm64\nVersion: {jetpack}\n\n"
            "Package: nvidia-l4t-core\nStatus: install ok installed\nVersion: 36.3.0-20240506102626\n"
        )
    if cuda:
        (root / "usr/local/cuda").mkdir(parents=True, exist_ok=True)
        (root / "usr/local/cuda/version.json").write_text(
            '{"cuda": {"name": "CUDA SDK", "version": "%s"}, "cuda_cudart": {"version": "12.2.140"}}' % cuda
        )
    if board:
        (root / "proc/device-tree").mkdir(parents=True, exist_ok=True)
        (root / "proc/device-tree/model").write_bytes(board.encode() + b"\0")
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc/cpuinfo").write_text(cpuinfo)
    return root


@dataclass
class EngineEnv:
    """A complete little world: models root with tiny.onnx, a profile, a state dir, a fake device root."""

    root: Path
    models: Path
    engines: Path
    state: Path
    device_root: Path
    events: list[ProgressEvent]

    @property
    def profile_path(self) -> Path:
        return self.engines / "tiny.yaml"

    def profile(self) -> EngineProfile:
        return load_profile(self.profile_path)

    def manager(self, builder: OnnxRuntimeBuilder | None = None, device_root: Path | None = None,
                machine: str = "aarch64") -> EngineManager:
        return EngineManager(
            self.state,
            self.models,
            builder or OnnxRuntimeBuilder(),
            device=DeviceProbe(device_root or self.device_root, machine=machine),
            reporter=ProgressReporter(callback=self.events.append),
        )
