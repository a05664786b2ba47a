"""The errors of the capture rings, under one base class (:class:`RingError`)."""

from __future__ import annotations

from pathlib import Path

from appliance.errors import ApplianceError


class RingError(ApplianceError):
    """Base of every ring error."""


class RingBusyError(RingError):
    """Another live process already owns (or writes) this ring."""


class RingFormatError(RingError):
    """The file is not a ring this code understands."""


class RingForeignError(RingError):
    """Something that is not this appliance's own ring file sits where a ring must go (a directory, a link,
    another user's file); it is never opened for writing, adopted or removed."""


class RingNotFoundError(RingError):
    """No ring file for that camera (its capture was never started, or it was retired)."""


class ShmSpaceError(RingError):
    """Not enough free space in the shared-memory filesystem; carries the numbers."""

    def __init__(self, root: Path, needed: int, free: int, what: str) -> None:
        self.root, self.needed, self.free = root, needed, free
        super().__init__(
            f"{what} needs {needed / 2**20:.1f} MiB in {root} but only {free / 2**20:.1f} MiB is free; "
            f"enlarge it (docker run --shm-size=..., or `mount -o remount,size=<bytes> {root}`) "
            f"or lower ring_slots / width / height"
        )
