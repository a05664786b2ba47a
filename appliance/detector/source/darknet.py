"""Read darknet ``.cfg`` files and ``.weights`` blobs into plain Python/numpy structures."""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from appliance.errors import ApplianceError


class DarknetFormatError(ApplianceError, ValueError):
    """The cfg or weights file is not something this reader understands; the message says where."""


@dataclass
class Section:
    """One ``[name]`` block of a cfg file; ``index`` counts layers from 0 (``[net]`` is -1)."""

    name: str
    index: int
    options: dict[str, str] = field(default_factory=dict)
    line: int = 0

    def int(self, key: str, default: int | None = None) -> int:
        return int(self._get(key, default))

    def float(self, key: str, default: float | None = None) -> float:
        return float(self._get(key, default))

    def str(self, key: str, default: str | None = None) -> str:
        return str(self._get(key, default)).strip()

    # Below the methods named int/float/str, the class body sees those names: annotations say builtins.*.
    def ints(self, key: builtins.str) -> list[builtins.int]:
        return [int(v) for v in self._get(key, None).split(",") if v.strip()]

    def _get(self, key: builtins.str, default: object) -> builtins.str:
        if key in self.options:
            return self.options[key]
        if default is None:
            raise DarknetFormatError(f"[{self.name}] at line {self.line}: missing option {key!r}")
        return str(default)


def parse_cfg(path: Path) -> list[Section]:
    """Sections in file order: ``[net]`` first, then one per layer."""
    sections: list[Section] = []
    for lineno, raw in enumerate(Path(path).read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise DarknetFormatError(f"{path}:{lineno}: malformed section header {raw!r}")
            sections.append(Section(line[1:-1].strip(), len(sections) - 1, line=lineno))
        elif "=" in line and sections:
            key, value = line.split("=", 1)
            sections[-1].options[key.strip()] = value.strip()
        else:
            raise DarknetFormatError(f"{path}:{lineno}: expected 'key=value' inside a section, got {raw!r}")
    if not sections or sections[0].name not in ("net", "network"):
        raise DarknetFormatError(f"{path}: the first section must be [net]")
    return sections


class WeightReader:
    """Sequential float32 reader over a ``.weights`` file (header, then each conv layer's parameters)."""

    def __init__(self, path: Path) -> None:
        data = Path(path).read_bytes()
        major, minor, _revision = np.frombuffer(data[:12], dtype=np.int32)
        # Since darknet 0.2 the "images seen" counter is 64-bit.
        header = 20 if major * 10 + minor >= 2 else 16
        self._values = np.frombuffer(data[header:], dtype=np.float32)
        self._pos = 0
        self._path = path

    def take(self, count: int) -> np.ndarray:
        end = self._pos + count
        if end > self._values.size:
            raise DarknetFormatError(
                f"{self._path}: weights end after {self._values.size} values, the cfg needs more ({end})"
            )
        out = self._values[self._pos:end].copy()
        self._pos = end
        return out

    def remaining(self) -> int:
        return self._values.size - self._pos
