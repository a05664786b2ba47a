"""Device fingerprint: what an engine's validity depends on, read from fixture-able filesystem roots.

A TensorRT plan is valid only for the GPU, CUDA/TensorRT and L4T it was built with; an ONNX Runtime model
optimized at level 'all' carries layout transforms for this CPU's instruction set. So the cache key covers
the inputs (ONNX bytes, profile), the builder (name, version) and the device (L4T, JetPack, CUDA, board,
GPU name and compute capability, CPU model and flags). Any change gives a new key, hence a rebuild.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping


@dataclass(frozen=True)
class Fingerprint:
    """Key fields of one engine; ``key`` is a short hash of all of them, used as the cache directory name."""

    fields: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        canonical = json.dumps(dict(self.fields), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:20]

    def diff(self, other: Mapping[str, str]) -> dict[str, tuple[str | None, str | None]]:
        """Fields that differ from another fingerprint's fields: name -> (theirs, ours). Used in rebuild logs."""
        names = set(self.fields) | set(other)
        return {n: (other.get(n), self.fields.get(n)) for n in sorted(names) if other.get(n) != self.fields.get(n)}


class DeviceProbe:
    """Reads the platform facts that invalidate engines. Every path is under ``root`` so tests use fixture trees.

    ``root`` is "/" on a real device; ``machine`` defaults to this interpreter's architecture.
    """

    def __init__(self, root: Path | str = "/", machine: str | None = None) -> None:
        self.root = Path(root)
        self.machine = machine or platform.machine()

    def _read(self, rel: str) -> str | None:
        try:
            return (self.root / rel).read_text(errors="replace")
        except (FileNotFoundError, NotADirectoryError, PermissionError, IsADirectoryError):
            return None

    def l4t_version(self) -> str | None:
        """From /etc/nv_tegra_release: '# R36 (release), REVISION: 3.0, ...' -> '36.3.0'."""
        text = self._read("etc/nv_tegra_release")
        if not text:
            return None
        match = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
        return f"{match.group(1)}.{match.group(2)}" if match else text.splitlines()[0].strip()

    def jetpack_version(self) -> str | None:
        """The installed ``nvidia-jetpack`` (or ``nvidia-l4t-core``) version from the dpkg status database."""
        text = self._read("var/lib/dpkg/status")
        if not text:
            return None
        versions: dict[str, str] = {}
        for stanza in text.split("\n\n"):
            pkg = re.search(r"^Package:\s*(\S+)", stanza, re.M)
            ver = re.search(r"^Version:\s*(\S+)", stanza, re.M)
            status = re.search(r"^Status:\s*(.+)$", stanza, re.M)
            if pkg and ver and status and status.group(1).strip().endswith("installed"):
                versions[pkg.group(1)] = ver.group(1)
        return versions.get("nvidia-jetpack") or versions.get("nvidia-l4t-core")

    def cuda_version(self) -> str | None:
        """From /usr/local/cuda/version.json (CUDA >= 11) or version.txt (older)."""
        text = self._read("usr/local/cuda/version.json")
        if text:
            try:
                return str(json.loads(text)["cuda"]["version"])
            except (ValueError, KeyError, TypeError):
                pass
        text = self._read("usr/local/cuda/version.txt")
        if text:
            match = re.search(r"CUDA Version\s+([\d.]+)", text)
            if match:
                return match.group(1)
        return None

    def board(self) -> str | None:
        """The device-tree model (e.g. 'NVIDIA Jetson AGX Orin Developer Kit'); absent on PCs."""
        text = self._read("proc/device-tree/model")
        return text.replace("\0", "").strip() if text else None

    def cpu(self) -> dict[str, str]:
        """CPU model and feature flags from /proc/cpuinfo (x86 'flags', ARM 'Features' and part numbers)."""
        text = self._read("proc/cpuinfo") or ""
        info: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() not in info:
                info[key.strip()] = value.strip()
        model = info.get("model name") or info.get("Model") or info.get("Hardware")
        if not model and "CPU implementer" in info:
            model = f"implementer {info['CPU implementer']} part {info.get('CPU part', '?')}"
        flags = info.get("flags") or info.get("Features") or ""
        return {"cpu_model": model or "unknown", "cpu_flags": " ".join(sorted(flags.split()))}

    def fields(self) -> dict[str, str]:
        """Every device field that is present; absent ones are left out (not 'None'), so the key is stable."""
        out: dict[str, str] = {"machine": self.machine}
        for name, value in (
            ("l4t", self.l4t_version()),
            ("jetpack", self.jetpack_version()),
            ("cuda", self.cuda_version()),
            ("board", self.board()),
        ):
            if value:
                out[name] = value
        out.update(self.cpu())
        return out


def engine_fingerprint(
    onnx_sha256: str,
    profile_sha256: str,
    builder: str,
    builder_version: str,
    device_fields: Mapping[str, str],
    builder_fields: Mapping[str, str],
) -> Fingerprint:
    """Combine every field into one fingerprint. ``builder_fields`` are the builder's own (GPU name, CC...)."""
    fields = {
        "onnx_sha256": onnx_sha256,
        "profile_sha256": profile_sha256,
        "builder": builder,
        "builder_version": builder_version,
    }
    fields.update(device_fields)
    fields.update(builder_fields)
    return Fingerprint(fields=fields)
