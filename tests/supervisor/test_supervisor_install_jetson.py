"""install-service.sh on a Jetson without Triton's igpu build: a clear error that names what is missing and where
it comes from, before anything is installed; APPLIANCE_ALLOW_CPU_TRITON=1 is the explicit way past it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
L4T = ("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, "
       "DATE: Wed Jan  8 01:49:37 UTC 2025\n")


def _install(tmp_path: Path, triton: Path, **env: str) -> subprocess.CompletedProcess[str]:
    tegra = tmp_path / "nv_tegra_release"
    tegra.write_text(L4T)
    return subprocess.run([str(REPO / "scripts/install-service.sh")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DESTDIR": str(tmp_path / "root"), "APPLIANCE_TEGRA_RELEASE": str(tegra),
                               "APPLIANCE_TRITON_IGPU": str(triton), **env})


def test_a_jetson_without_triton_is_refused_with_the_fix(tmp_path: Path) -> None:
    result = _install(tmp_path, tmp_path / "no-tritonserver")
    assert result.returncode == 1
    assert "this is a Jetson (# R36 (release), REVISION: 4.3" in result.stderr
    assert "lacks: lib/libtritonserver.so backends/python/libtriton_python.so" in result.stderr
    assert "tritonserver2.49.0-igpu.tar.gz" in result.stderr and "APPLIANCE_ALLOW_CPU_TRITON=1" in result.stderr
    assert not (tmp_path / "root/opt/appliance").exists(), "nothing is copied or installed before the check"


def test_an_incomplete_igpu_tree_names_the_missing_backend(tmp_path: Path) -> None:
    triton = tmp_path / "tritonserver"
    for present in ("lib/libtritonserver.so", "backends/python/libtriton_python.so",
                    "backends/python/triton_python_backend_stub"):
        (triton / present).parent.mkdir(parents=True, exist_ok=True)
        (triton / present).write_bytes(b"")
    result = _install(tmp_path, triton)
    assert result.returncode == 1
    assert "lacks: backends/tensorrt/libtriton_tensorrt.so\n" in result.stderr
