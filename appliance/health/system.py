"""System readings from /proc and /sys: CPU, memory, thermal zones, and Jetson power rails (INA3221).

The filesystem root is a constructor argument so tests read fixture trees instead of this machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from appliance import diskspace


@dataclass(frozen=True)
class SystemReading:
    cpu_percent: float | None
    mem_total_bytes: int | None
    mem_available_bytes: int | None
    temperatures_c: dict[str, float] = field(default_factory=dict)
    power_w: dict[str, float] = field(default_factory=dict)
    state_dir_free_bytes: int | None = None  # the state dir's filesystem (engines, spool, OTA versions)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


class SystemMonitor:
    """Reads the system; CPU percent is the busy share since the previous call (None on the first)."""

    def __init__(self, root: Path = Path("/"), state_dir: Path | None = None) -> None:
        """``state_dir``: whose filesystem's free space to read (None: not read)."""
        self.root = root
        self.state_dir = state_dir
        self._last_cpu: tuple[int, int] | None = None

    def read(self) -> SystemReading:
        total, available = self._memory()
        free = diskspace.free_bytes(self.state_dir) if self.state_dir is not None else None
        return SystemReading(self._cpu_percent(), total, available, self._temperatures(), self._power(), free)

    def _cpu_percent(self) -> float | None:
        text = _read(self.root / "proc/stat")
        if not text or not text.startswith("cpu "):
            return None
        values = [int(v) for v in text.splitlines()[0].split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        busy_total = (sum(values), idle)
        previous, self._last_cpu = self._last_cpu, busy_total
        if previous is None or busy_total[0] == previous[0]:
            return None
        elapsed = busy_total[0] - previous[0]
        return 100.0 * (1 - (busy_total[1] - previous[1]) / elapsed)

    def _memory(self) -> tuple[int | None, int | None]:
        text = _read(self.root / "proc/meminfo") or ""
        fields = {}
        for line in text.splitlines():
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                fields[name] = int(parts[0]) * 1024
        return fields.get("MemTotal"), fields.get("MemAvailable")

    def _temperatures(self) -> dict[str, float]:
        temps: dict[str, float] = {}
        for zone in sorted((self.root / "sys/class/thermal").glob("thermal_zone*")):
            name, raw = _read(zone / "type"), _read(zone / "temp")
            if name and raw and raw.lstrip("-").isdigit():
                temps[name] = int(raw) / 1000.0  # millidegrees
        return temps

    def _power(self) -> dict[str, float]:
        """Jetson INA3221 rails exposed through hwmon: inN_label, inN_input (mV), currN_input (mA)."""
        power: dict[str, float] = {}
        for hwmon in sorted((self.root / "sys/class/hwmon").glob("hwmon*")):
            if _read(hwmon / "name") != "ina3221":
                continue
            for label_file in sorted(hwmon.glob("in*_label")):
                channel = label_file.name[2:].split("_")[0]
                label = _read(label_file)
                millivolts = _read(hwmon / f"in{channel}_input")
                milliamps = _read(hwmon / f"curr{channel}_input")
                if label and millivolts and milliamps and millivolts.isdigit() and milliamps.isdigit():
                    power[label] = int(millivolts) * int(milliamps) / 1e6
        return power
