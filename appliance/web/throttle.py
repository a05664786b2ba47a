"""Failed logins slow down: after ``free`` failures from one client address, or for one user name, each next
try must wait a delay that doubles with every failure (up to ``max_delay_s``); a try inside the delay is refused
at once, without checking the password. A success clears the name and the address; ``quiet_s`` without a failure
forgets them. Each burst is logged once when it starts to be held back, and once more, with how many tries were
refused, when a success or the first try after ``quiet_s`` ends it. docs/security.md, "Logins"."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from appliance.config.shown import shown
from appliance.logs import AUDIT

log = logging.getLogger(__name__)

FREE = 5
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 60.0
QUIET_S = 900.0
MAX_KEYS = 10_000  # names and addresses remembered; past this the oldest are forgotten


@dataclass
class _Record:
    failures: int = 0
    last: float = 0.0
    refused: int = 0
    logged: bool = False


class LoginThrottle:
    """Thread-safe. ``wait(client, name)`` before checking a password; ``failed``/``succeeded`` after."""

    def __init__(self, *, free: int = FREE, first_delay_s: float = FIRST_DELAY_S, max_delay_s: float = MAX_DELAY_S,
                 quiet_s: float = QUIET_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._free, self._first, self._max, self._quiet, self._clock = free, first_delay_s, max_delay_s, quiet_s, clock
        self._records: dict[tuple[str, str], _Record] = {}
        self._lock = threading.Lock()

    def _delay(self, record: _Record) -> float:
        over = record.failures - self._free
        return 0.0 if over < 0 else min(self._max, self._first * 2.0 ** over)

    def wait(self, client: str, name: str) -> float:
        """Seconds this try must still wait (0: go ahead and check the password); a refused try is counted."""
        now = self._clock()
        with self._lock:
            longest = 0.0
            for key in (("client", client), ("name", name)):
                record = self._records.get(key)
                if record is None:
                    continue
                if now - record.last > self._quiet:
                    self._end(key, record)
                    continue
                longest = max(longest, record.last + self._delay(record) - now)
            if longest > 0:
                for key in (("client", client), ("name", name)):
                    if key in self._records:
                        self._records[key].refused += 1
            return max(0.0, longest)

    def failed(self, client: str, name: str) -> None:
        now = self._clock()
        with self._lock:
            if len(self._records) > MAX_KEYS:
                for key in sorted(self._records, key=lambda k: self._records[k].last)[:MAX_KEYS // 10]:
                    del self._records[key]
            for key in (("client", client), ("name", name)):
                record = self._records.setdefault(key, _Record())
                record.failures += 1
                record.last = now
                if record.failures >= self._free and not record.logged:
                    record.logged = True
                    log.warning("web: %d failed logins for %s %s; each further try waits longer (up to %g s), "
                                "logged again when it stops", record.failures, key[0], shown(key[1]), self._max,
                                extra=AUDIT)

    def succeeded(self, client: str, name: str) -> None:
        with self._lock:
            for key in (("client", client), ("name", name)):
                record = self._records.get(key)
                if record is not None:
                    self._end(key, record)

    def _end(self, key: tuple[str, str], record: _Record) -> None:
        del self._records[key]
        if record.logged:
            log.warning("web: failed logins for %s %s stopped: %d failed, %d more refused while held back",
                        key[0], shown(key[1]), record.failures, record.refused, extra=AUDIT)
