"""Results the spool could not write (disk full, an I/O error), held in memory in spool order until it can.

Every append goes through here: while anything is held, new results queue behind it, so each camera's messages
still reach the spool (and the broker) in order. Memory is bounded per camera; past the bound a camera's oldest
detections go first, then its events, and each drop is counted per (camera, kind, reason). A camera's dropped
detections become one ``gap`` record in their place (first and last ``message_seq``), written in order with the
rest, so a subscriber can tell a counted drop from a loss (docs/mqtt.md, "Gaps").
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from appliance.mqtt.errors import SpoolError
from appliance.mqtt.messages import SCHEMA_VERSION, time_fields
from appliance.mqtt.spool import Spool, SpoolRecord

log = logging.getLogger(__name__)

RETRY_S = 1.0  # while results are held, the spool is tried at most this often
SUMMARY_S = 60.0  # while it lasts, one log line this often


@dataclass(frozen=True)
class Held:
    """One result waiting for the spool. ``message_seq``: a detections message's; a gap's first missing one."""

    record: SpoolRecord
    camera_id: str
    kind: str  # detections, events or gap
    message_seq: int = 0
    last_seq: int = 0  # a gap's last missing message_seq
    reason: str = ""  # a gap's


def gap_payload(device_id: str, camera_id: str, boot_id: str, first: int, last: int, reason: str,
                now: float) -> dict[str, Any]:
    """A ``gap`` record on a camera's detections topic: message_seq ``first``..``last`` were dropped, counted."""
    payload: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "type": "gap", "device_id": device_id,
                               "camera_id": camera_id, "boot_id": boot_id, "first_message_seq": first,
                               "last_message_seq": last, "count": last - first + 1, "reason": reason}
    payload.update(time_fields(now))
    return payload


GapRecord = Callable[[str, int, int, str], SpoolRecord]  # (camera, first, last, reason) -> the spool record


def reason_of(error: SpoolError) -> str:
    text = str(error).lower()
    return "disk_full" if "full" in text or "no space" in text else "spool_error"


class Holdback:
    """``max_bytes``: what each camera may hold; ``gap_record`` makes a gap's spool record. Thread-safe."""

    def __init__(self, spool: Spool, max_bytes: int, gap_record: GapRecord,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._spool = spool
        self._max_bytes = max_bytes
        self._gap_record = gap_record
        self._clock = clock
        self._lock = threading.Lock()
        self._held: list[Held] = []
        self._bytes: Counter[str] = Counter()
        self.dropped: Counter[tuple[str, str, str]] = Counter()  # (camera, kind, reason) -> results dropped
        self._failing_since: float | None = None
        self._reason = ""
        self._error = ""
        self._next_try = 0.0
        self._last_summary = 0.0

    def append(self, entries: Sequence[Held]) -> int:
        """Write ``entries`` to the spool behind whatever is held, or hold them; returns how many the spool's
        own bounds kept (held ones count as kept)."""
        with self._lock:
            if self._held and not self._flush(force=False):
                self._hold(entries)
                return len(entries)
            try:
                return self._spool.append([e.record for e in entries])
            except SpoolError as exc:
                self._failed(exc)
                self._hold(entries)
                return len(entries)

    def retry(self) -> None:
        """Try the spool again now if results are held (the supervisor's tick: a camera may have stopped)."""
        with self._lock:
            if self._held:
                self._flush(force=True)

    def drop_all(self, reason: str) -> int:
        """At stop, after a last try: count what is still held as dropped; returns how many."""
        with self._lock:
            if self._held:
                self._flush(force=True)
            lost = 0
            for entry in self._held:
                if entry.kind != "gap":
                    self.dropped[(entry.camera_id, entry.kind, reason)] += 1
                    lost += 1
            if lost:
                log.error("MQTT spool %s: %d result(s) still held in memory at stop were dropped (%s)",
                          self._spool.path, lost, self._error)
            self._held.clear()
            self._bytes.clear()
            return lost

    def state(self) -> tuple[int, int, str, float | None]:
        """(results held, bytes held, why: the spool's error, since when: monotonic seconds or None)."""
        with self._lock:
            return len(self._held), sum(self._bytes.values()), self._error, self._failing_since

    def dropped_counts(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            return dict(self.dropped)

    # -- under the lock ---------------------------------------------------------------------------------------

    def _flush(self, force: bool) -> bool:
        now = self._clock()
        if not force and now < self._next_try:
            return False
        try:
            self._spool.append([e.record for e in self._held])
        except SpoolError as exc:
            self._failed(exc)
            return False
        held, dropped = len(self._held), sum(self.dropped.values())
        since = self._failing_since or now
        self._held.clear()
        self._bytes.clear()
        self._failing_since = None
        log.warning("MQTT spool %s is writable again after %.0f s: %d held result(s) written; %d dropped in all "
                    "(each camera's dropped detections announced by a gap record)", self._spool.path, now - since,
                    held, dropped)
        return True

    def _failed(self, exc: SpoolError) -> None:
        now = self._clock()
        self._next_try = now + RETRY_S
        self._error = str(exc)
        if self._failing_since is None:
            self._failing_since = self._last_summary = now
            self._reason = reason_of(exc)
            log.warning("%s: holding results in memory (up to %d bytes per camera, oldest detections dropped first, "
                        "counted) and trying again every %g s", exc, self._max_bytes, RETRY_S)
        elif now - self._last_summary >= SUMMARY_S:
            self._last_summary = now
            log.warning("MQTT spool %s still cannot be written (%s) after %.0f s: %d result(s) held in memory, "
                        "%d dropped so far", self._spool.path, self._reason, now - self._failing_since,
                        len(self._held), sum(self.dropped.values()))

    def _hold(self, entries: Sequence[Held]) -> None:
        for entry in entries:
            self._held.append(entry)
            self._bytes[entry.camera_id] += entry.record.size
            while self._bytes[entry.camera_id] > self._max_bytes and self._drop_oldest(entry.camera_id):
                pass

    def _drop_oldest(self, camera_id: str) -> bool:
        """Drop the camera's oldest detections (into a gap record), else its oldest event; False if neither."""
        gap_at, event_at = -1, -1
        for i, entry in enumerate(self._held):
            if entry.camera_id != camera_id:
                continue
            if entry.kind == "gap":
                gap_at = i
            elif entry.kind == "events" and event_at < 0:
                event_at = i
            elif entry.kind == "detections":
                self.dropped[(camera_id, "detections", self._reason)] += 1
                self._bytes[camera_id] -= entry.record.size
                gap = self._held[gap_at] if gap_at >= 0 else None
                if gap is not None and gap.last_seq + 1 == entry.message_seq:
                    del self._held[i]
                    self._replace(gap_at, replace(gap, last_seq=entry.message_seq))
                else:
                    self._held[i] = Held(SpoolRecord("", b"", 0), camera_id, "gap", entry.message_seq,
                                         entry.message_seq - 1, self._reason)
                    self._replace(i, replace(self._held[i], last_seq=entry.message_seq))
                return True
        if event_at < 0:
            return False
        self.dropped[(camera_id, "events", self._reason)] += 1
        self._bytes[camera_id] -= self._held.pop(event_at).record.size
        return True

    def _replace(self, index: int, gap: Held) -> None:
        """Put ``gap`` at ``index`` with its record made for its range now."""
        old = self._held[index]
        record = self._gap_record(gap.camera_id, gap.message_seq, gap.last_seq, gap.reason)
        self._held[index] = replace(gap, record=record)
        self._bytes[gap.camera_id] += record.size - old.record.size
