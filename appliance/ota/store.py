"""The OTA state directory and the crash-safe active-model pointer.

The pointer only ever names a version that has ``verified.json`` (or null) and is replaced atomically (temp file,
fsync, rename, fsync the directory), and ``recover()`` removes versions without it, so after a SIGKILL or a power
cut at any point ``serving()`` is a complete, verified model: the old one or the new one. The directory's layout:
docs/ota.md, "Crash safety"."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from appliance.durable import fsync_path, sha256_file, write_json_durably
from appliance.ota.errors import OtaRejected
from appliance.ota.manifest import MANIFEST_NAME, Manifest, parse_manifest, version_order

log = logging.getLogger(__name__)
POINTER = "active.json"
VERIFIED = "verified.json"
JOURNAL = "update.json"
FLOOR = "floor.json"


@dataclass(frozen=True)
class Pointer:
    """What to serve, and the versions served before it (oldest first; None = the base model)."""

    version: str | None
    history: tuple[str | None, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {"format": 1, "version": self.version, "history": list(self.history)}


class OtaStore:
    def __init__(self, state_dir: Path) -> None:
        self.root = Path(state_dir) / "ota"
        self.versions_dir = self.root / "versions"
        self.staging_dir = self.root / "staging"

    def ensure(self) -> "OtaStore":
        for d in (self.root, self.versions_dir, self.staging_dir):
            d.mkdir(parents=True, exist_ok=True)
        return self

    @contextlib.contextmanager
    def lock(self, blocking: bool = True) -> Iterator[None]:
        """One update at a time across processes (the kernel drops the lock of a killed holder)."""
        self.ensure()
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                raise OtaRejected("busy", "another update is in progress") from None
            yield
        finally:
            os.close(fd)  # closing releases the flock

    # -- the pointer -------------------------------------------------------------------------------------
    def read_pointer(self) -> Pointer:
        path = self.root / POINTER
        try:
            doc = json.loads(path.read_text())
            return Pointer(doc["version"], tuple(doc.get("history", ())))
        except FileNotFoundError:
            return Pointer(None)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Cannot happen through write_pointer (rename is atomic); a hand-edited file is not trusted.
            log.error("OTA pointer %s is unreadable (%s); serving the base model", path, exc)
            return Pointer(None)

    def write_pointer(self, pointer: Pointer) -> None:
        if pointer.version is not None and not self.is_verified(pointer.version):
            raise ValueError(f"refusing to point at {pointer.version!r}: it is not a complete, verified version")
        self.ensure()
        write_json_durably(self.root / POINTER, pointer.to_json())

    # -- the anti-rollback floor -------------------------------------------------------------------------
    def read_floor(self) -> str | None:
        """The newest version ever made active here (None: none yet). An unreadable file is an error, not "no
        floor": that would let an old bundle back in."""
        path = self.root / FLOOR
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ValueError(f"OTA version floor {path} is unreadable: {exc}") from None
        version = doc.get("version") if isinstance(doc, dict) else None
        if not isinstance(version, str) or version_order(version) is None:
            raise ValueError(f"OTA version floor {path} is unreadable: {doc!r}")
        return version

    def raise_floor(self, version: str) -> str:
        """Raise the floor to ``version`` if it is newer (durably: temp, fsync, rename); return the floor now."""
        order, current = version_order(version), self.read_floor()
        if order is None:
            raise ValueError(f"version {version!r} cannot be ordered; the floor stays at {current}")
        if current is not None and order <= (version_order(current) or ()):
            return current
        self.ensure()
        write_json_durably(self.root / FLOOR, {"format": 1, "version": version})
        return version

    # -- the update journal ------------------------------------------------------------------------------
    def write_journal(self, status: dict[str, Any]) -> None:
        """Record the install in progress (its latest status) so that a restart can say how it ended."""
        self.ensure()
        write_json_durably(self.root / JOURNAL, status)

    def read_journal(self) -> dict[str, Any] | None:
        """The interrupted install's last status; None when no install was in progress."""
        path = self.root / JOURNAL
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:  # written atomically: only a hand edit or a bad disk gets here
            log.error("OTA update journal %s is unreadable (%s)", path, exc)
            return {}
        return doc if isinstance(doc, dict) else {}

    def clear_journal(self) -> None:
        try:
            (self.root / JOURNAL).unlink()
        except FileNotFoundError:
            return
        fsync_path(self.root)

    # -- versions ----------------------------------------------------------------------------------------
    def version_dir(self, version: str) -> Path:
        return self.versions_dir / version

    def is_verified(self, version: str) -> bool:
        return (self.version_dir(version) / VERIFIED).is_file()

    def manifest(self, version: str) -> Manifest:
        return parse_manifest((self.version_dir(version) / MANIFEST_NAME).read_bytes())

    def verified_record(self, version: str) -> dict[str, Any]:
        return json.loads((self.version_dir(version) / VERIFIED).read_text())

    def mark_verified(self, version: str, record: dict[str, Any]) -> None:
        write_json_durably(self.version_dir(version) / VERIFIED, record)

    def check_files(self, version: str) -> str | None:
        """None when every file of the version matches its signed manifest, else what is wrong."""
        try:
            manifest = self.manifest(version)
        except (OSError, OtaRejected) as exc:
            return f"manifest: {exc}"
        for name, entry in manifest.files.items():
            path = self.version_dir(version) / name
            if not path.is_file() or path.stat().st_size != entry.size or sha256_file(path) != entry.sha256:
                return f"{name} is missing or differs from the manifest"
        return None

    def installed(self) -> list[str]:
        """Verified versions, oldest install first."""
        if not self.versions_dir.is_dir():
            return []
        found = [(self.verified_record(d.name).get("installed_seq", 0), d.name)
                 for d in self.versions_dir.iterdir() if d.is_dir() and (d / VERIFIED).is_file()]
        return [name for _, name in sorted(found)]

    def remove_version(self, version: str) -> None:
        path = self.version_dir(version)
        if path.exists():
            trash = self.staging_dir / f"{version}.removing"
            shutil.rmtree(trash, ignore_errors=True)
            self.staging_dir.mkdir(parents=True, exist_ok=True)
            os.replace(path, trash)  # gone from versions/ in one step, then deleted
            fsync_path(self.versions_dir)
            shutil.rmtree(trash, ignore_errors=True)

    def serving(self) -> str | None:
        """The version to serve now: the pointer's if it is complete and intact, else the newest intact one
        in its history, else None (the base model)."""
        pointer = self.read_pointer()
        for version in (pointer.version, *reversed(pointer.history)):
            if version is None:
                return None
            if self.is_verified(version):
                problem = self.check_files(version)
                if problem is None:
                    return version
                log.error("OTA version %s is damaged (%s); falling back", version, problem)
        return None

    def recover(self) -> str | None:
        """At start: drop staging leftovers and incomplete versions; return what to serve (see serving())."""
        self.ensure()
        for entry in self.staging_dir.iterdir():
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        pointer = self.read_pointer()
        for d in self.versions_dir.iterdir():
            if d.is_dir() and not (d / VERIFIED).is_file() and d.name != pointer.version:
                log.warning("OTA: removing incomplete version %s (interrupted update)", d.name)
                shutil.rmtree(d, ignore_errors=True)
        for name in (POINTER, FLOOR):
            for leftover in self.root.glob(f".{name}.*"):
                leftover.unlink(missing_ok=True)
        return self.serving()

    def prune(self, keep: int, protect: set[str | None]) -> list[str]:
        """Keep the newest ``keep`` verified versions (and the protected ones); return what was removed."""
        versions = self.installed()
        removable = [v for v in versions[: max(0, len(versions) - keep)] if v not in protect]
        for version in removable:
            self.remove_version(version)
        return removable
