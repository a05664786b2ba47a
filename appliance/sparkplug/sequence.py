"""Sparkplug's two counters.

- ``seq``: on every message of the edge node's session (NBIRTH, NDATA, DBIRTH, DDATA, DDEATH); 0 on each NBIRTH
  (a rebirth too: the spec says every NBIRTH carries seq 0), then +1 per message, 255 wrapping to 0.
- ``bdSeq``: one per MQTT CONNECT, carried by the will's NDEATH and by the NBIRTH of that connection, so a host
  can tell which session a death ends; 0..255, wrapping. Kept in a file in the state directory, written before
  the CONNECT that uses it, so a restart (or a crash) never reuses the value of the previous connection.
"""

from __future__ import annotations

import logging
from pathlib import Path

from appliance.durable import write_file_durably

log = logging.getLogger(__name__)

MODULUS = 256


class SeqCounter:
    """The message sequence number of one edge node session. ``start`` sets where it starts (tests start near
    the wrap)."""

    def __init__(self, start: int = 0) -> None:
        self._next = start % MODULUS

    def reset(self) -> None:
        self._next = 0

    def take(self) -> int:
        """This message's seq; the next one gets +1 (mod 256)."""
        value = self._next
        self._next = (value + 1) % MODULUS
        return value


class BdSeqStore:
    """The last bdSeq used, in ``path`` (one decimal number)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def last(self) -> int | None:
        """The value written last; None when there is none (first start) or the file is unreadable."""
        try:
            text = self.path.read_text("ascii").strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("sparkplug: cannot read bdSeq from %s (%s); starting again at 0", self.path, exc)
            return None
        if not text.isdigit() or int(text) >= MODULUS:
            log.warning("sparkplug: %s holds %r, not a bdSeq (0..255); starting again at 0", self.path, text[:20])
            return None
        return int(text)

    def next(self) -> int:
        """The bdSeq for the next CONNECT (the last one + 1, mod 256; 0 first), written before it is returned."""
        last = self.last()
        value = 0 if last is None else (last + 1) % MODULUS
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_file_durably(self.path, f"{value}\n".encode("ascii"))
        return value
