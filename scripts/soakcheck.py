"""The soak's checks as pure functions (soak.py beside it runs the appliance;
tests/supervisor/test_supervisor_soakcheck.py tests these): lost and duplicated detections messages per camera, and
RSS / file-descriptor growth.

Messages are checked against the per-camera counter contract (docs/mqtt.md, "Telling a lost message from a skipped
frame"): per (camera_id, boot_id) the ``message_seq`` values received must be 1..N with no gap; a repeat is a
duplicate, and a redelivery (QoS 1 at-least-once) when it carries the same ``message_id`` as the first copy. Gaps in
the frame number ``seq`` must be explained by ``frames_skipped``.

Messages without ``message_seq`` (from an appliance that does not send it) fall back to the frame number:
redeliveries are repeated ``message_id`` values, and every gap in ``seq`` counts as lost, although a frame skipped
under load (latest frame wins) makes the same gap: in that mode ``lost`` is an upper bound, and the report says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Seen:
    """One detections message as the subscriber received it, in arrival order."""

    camera_id: str
    seq: int
    message_id: str | None = None
    boot_id: str | None = None
    message_seq: int | None = None
    frames_skipped: int | None = None

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> "Seen":
        return cls(camera_id=str(payload["camera_id"]), seq=int(payload["seq"]),
                   message_id=payload.get("message_id"), boot_id=payload.get("boot_id"),
                   message_seq=payload.get("message_seq"), frames_skipped=payload.get("frames_skipped"))


@dataclass
class CameraCheck:
    """What the messages of one camera show. ``counter`` is ``message_seq`` (the contract) or ``seq`` (the
    fallback: ``lost`` counts seq gaps, which are lost OR skipped frames)."""

    camera_id: str
    counter: str
    received: int = 0
    lost: int = 0
    duplicates: int = 0  # receptions of a message already received
    redeliveries: int = 0  # of those, copies with the first copy's message_id (QoS 1 may do that)
    boots: int = 0
    unexplained_seq_gaps: int = 0  # contract only: seq jumps that frames_skipped does not account for
    missing: list[tuple[str, int, int]] = field(default_factory=list)  # (boot or segment, first, last) lost


def check_contract(messages: Sequence[Seen]) -> CameraCheck:
    """Messages of one camera that all carry ``boot_id`` and ``message_seq``."""
    check = CameraCheck(messages[0].camera_id if messages else "", "message_seq", received=len(messages))
    by_boot: dict[str, dict[int, Seen]] = {}
    for m in messages:
        assert m.boot_id is not None and m.message_seq is not None, m
        first = by_boot.setdefault(m.boot_id, {})
        if m.message_seq in first:
            check.duplicates += 1
            check.redeliveries += int(m.message_id is not None and m.message_id == first[m.message_seq].message_id)
        else:
            first[m.message_seq] = m
    check.boots = len(by_boot)
    for boot, got in by_boot.items():
        numbers = sorted(got)
        check.lost += numbers[-1] - len(numbers)  # 1..max with none missing has exactly max values
        expected = 1
        for n in numbers:
            if n > expected:
                check.missing.append((boot, expected, n - 1))
            expected = n + 1
        for a, b in zip(numbers, numbers[1:]):
            if b != a + 1:
                continue  # a lost message in between: its frames are not ours to explain
            skipped = got[b].frames_skipped or 0
            if got[b].seq - got[a].seq - 1 != skipped:
                check.unexplained_seq_gaps += 1
    return check


def check_fallback(messages: Sequence[Seen]) -> CameraCheck:
    """Messages of one camera without the counter: repeated message_id values are redeliveries, then seq gaps
    within each run of increasing seq (a decrease starts a new run: the capture or the daemon restarted)."""
    check = CameraCheck(messages[0].camera_id if messages else "", "seq", received=len(messages))
    ids: set[str] = set()
    segment, previous = 0, None
    for m in messages:
        if m.message_id is not None:
            if m.message_id in ids:
                check.duplicates += 1
                check.redeliveries += 1
                continue
            ids.add(m.message_id)
        if previous is not None and m.seq == previous:
            check.duplicates += 1  # the same frame published twice under another message_id
            continue
        if previous is None or m.seq < previous:
            segment += 1
        elif m.seq > previous + 1:
            check.lost += m.seq - previous - 1
            check.missing.append((f"run{segment}", previous + 1, m.seq - 1))
        previous = m.seq
    check.boots = segment
    return check


def check_camera(messages: Sequence[Seen]) -> list[CameraCheck]:
    """One camera's messages, in arrival order: the contract check for those with the counter, the fallback
    for those without (both when an appliance was updated mid-run)."""
    with_counter = [m for m in messages if m.boot_id is not None and m.message_seq is not None]
    without = [m for m in messages if m.boot_id is None or m.message_seq is None]
    return ([check_contract(with_counter)] if with_counter else []) + ([check_fallback(without)] if without else [])


def check_messages(messages: Iterable[Seen]) -> dict[str, list[CameraCheck]]:
    """Every camera's checks, by camera id (sorted)."""
    per_camera: dict[str, list[Seen]] = {}
    for m in messages:
        per_camera.setdefault(m.camera_id, []).append(m)
    return {camera: check_camera(per_camera[camera]) for camera in sorted(per_camera)}


@dataclass(frozen=True)
class Sample:
    """One reading of a daemon process: seconds since it was READY, resident memory (KiB) and open fds."""

    t_s: float
    rss_kib: int
    fds: int


def growth(samples: Sequence[Sample], warmup_s: float = 60.0) -> tuple[float, int] | None:
    """(RSS growth in MiB, fd growth) from the first sample at or after ``warmup_s`` (the first full minute:
    start-up allocations are not a leak) to the last; None with fewer than two such samples."""
    steady = [s for s in samples if s.t_s >= warmup_s]
    if len(steady) < 2:
        return None
    first, last = steady[0], steady[-1]
    return (last.rss_kib - first.rss_kib) / 1024.0, last.fds - first.fds


def parse_status_rss_kib(status_text: str) -> int | None:
    """VmRSS in KiB from the text of /proc/<pid>/status (None if absent: a zombie or a kernel thread)."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None
