"""Metric aliases: a number per metric, unique across the edge node's whole set (its own metrics and every
device's), announced with the name in NBIRTH/DBIRTH and sent alone in NDATA/DDATA, as Sparkplug B allows, so a
data message does not repeat every name. ``Node Control/Rebirth`` and ``bdSeq`` get none: the spec forbids an
alias for the rebirth metric, and a host finds ``bdSeq`` by name in the NDEATH."""

from __future__ import annotations

from typing import Optional


class AliasTable:
    """Aliases handed out from 1 upwards and never taken back, so a metric keeps its alias through rebirths and
    a device's death and return, and no two metrics ever share one."""

    def __init__(self) -> None:
        self._by_metric: dict[tuple[Optional[str], str], int] = {}
        self._by_alias: dict[int, tuple[Optional[str], str]] = {}

    def alias(self, device: Optional[str], name: str) -> int:
        """The alias of ``name`` on the node (``device`` None) or on a device; a new one the first time."""
        key = (device, name)
        found = self._by_metric.get(key)
        if found is None:
            found = len(self._by_metric) + 1
            self._by_metric[key] = found
            self._by_alias[found] = key
        return found

    def metric(self, alias: int) -> Optional[tuple[Optional[str], str]]:
        """(device or None, name) of an alias handed out; None for one never announced."""
        return self._by_alias.get(alias)
