"""The engine cache under the state directory: atomic install, per-key build locks, validation, GC.

An entry ``<model>/<key>`` appears only through rename(2) of a fully written, fsynced temporary directory, so a
crash mid-build leaves at most a ``.tmp`` entry, which the next holder of the key's lock deletes; a present entry
is still checked against its manifest's sha256 before use. The layout: docs/engines.md, "The cache"."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from appliance.durable import fsync_path, sha256_file, write_file_durably
from appliance.errors import ApplianceError

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


class CacheError(ApplianceError, RuntimeError):
    """The state directory cannot hold the cache (permissions, full disk); the message names the path."""


@dataclass(frozen=True)
class CacheEntry:
    model: str
    key: str
    directory: Path
    manifest: dict[str, Any]

    @property
    def engine_path(self) -> Path:
        return self.directory / str(self.manifest["engine_file"])




class EngineCache:
    def __init__(self, state_dir: Path) -> None:
        self.root = Path(state_dir) / "engines"

    # -- layout ----------------------------------------------------------------------------------------------
    def entry_dir(self, model: str, key: str) -> Path:
        return self.root / model / key

    @property
    def tmp_root(self) -> Path:
        return self.root / ".tmp"

    @property
    def timing_dir(self) -> Path:
        return self.root / "timing"

    def _ensure_dirs(self) -> None:
        try:
            for d in (self.root, self.tmp_root, self.root / ".locks", self.timing_dir):
                d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheError(f"cannot create the engine cache at {self.root}: {exc.strerror}") from exc

    # -- lookup ----------------------------------------------------------------------------------------------
    def lookup(self, model: str, key: str, check_hash: bool = True) -> CacheEntry | None:
        """The installed entry for ``key`` if complete and intact; None if absent. Raises nothing for corrupt
        entries: they are reported through :meth:`problem` and treated as absent by callers."""
        entry, _ = self.inspect(model, key, check_hash)
        return entry

    def inspect(self, model: str, key: str, check_hash: bool = True) -> tuple[CacheEntry | None, str | None]:
        """(entry, None) when usable; (None, reason) when present but unusable; (None, None) when absent."""
        directory = self.entry_dir(model, key)
        if not directory.is_dir():
            return None, None
        try:
            manifest = json.loads((directory / MANIFEST).read_text())
        except (OSError, ValueError) as exc:
            return None, f"unreadable manifest ({exc})"
        if manifest.get("key") != key or manifest.get("model") != model:
            return None, "manifest describes a different engine"
        if not (manifest.get("verification") or {}).get("passed"):
            return None, "manifest records a failed verification"
        engine = directory / str(manifest.get("engine_file", ""))
        try:
            size = engine.stat().st_size
        except OSError:
            return None, f"engine file {engine.name!r} is missing"
        if size != manifest.get("engine_size"):
            return None, f"engine file is {size} bytes, manifest says {manifest.get('engine_size')}"
        if check_hash and sha256_file(engine) != manifest.get("engine_sha256"):
            return None, "engine file's sha256 does not match the manifest (corrupt)"
        return CacheEntry(model, key, directory, manifest), None

    def entries(self, model: str) -> list[CacheEntry]:
        """Installed entries for a model (manifest readable), newest build first."""
        out: list[CacheEntry] = []
        base = self.root / model
        if not base.is_dir():
            return out
        for directory in base.iterdir():
            try:
                manifest = json.loads((directory / MANIFEST).read_text())
            except (OSError, ValueError):
                manifest = {"built_at": ""}
            out.append(CacheEntry(model, directory.name, directory, manifest))
        out.sort(key=lambda e: str(e.manifest.get("built_at", "")), reverse=True)
        return out

    # -- locking ---------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, model: str, key: str, on_wait: Callable[[str], object] | None = None) -> Iterator[None]:
        """Exclusive per-key build lock (flock; released by the kernel if the holder dies)."""
        self._ensure_dirs()
        path = self.root / ".locks" / f"{model}-{key}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                if on_wait:
                    on_wait(f"another process (pid {holder}) is building this engine; waiting for it")
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)  # closing drops the flock

    # -- building --------------------------------------------------------------------------------------------
    def clean_stale(self, model: str, key: str) -> list[Path]:
        """Delete leftovers of killed builds of this key. Call only while holding the key's lock."""
        removed = []
        if self.tmp_root.is_dir():
            for leftover in self.tmp_root.glob(f"{model}-{key}-*"):
                shutil.rmtree(leftover, ignore_errors=True)
                removed.append(leftover)
        for p in removed:
            log.warning("%s: removed %s left by an interrupted build", model, p)
        return removed

    def new_build_dir(self, model: str, key: str) -> Path:
        self._ensure_dirs()
        path = self.tmp_root / f"{model}-{key}-{os.getpid()}-{secrets.token_hex(4)}"
        path.mkdir()
        return path

    def install(self, model: str, key: str, build_dir: Path, engine_file: str, manifest: dict[str, Any]) -> CacheEntry:
        """Hash and fsync the engine, write the manifest, fsync, then rename the directory into place."""
        engine = build_dir / engine_file
        manifest = dict(manifest)
        manifest.update(
            manifest_version=MANIFEST_VERSION,
            model=model,
            key=key,
            engine_file=engine_file,
            engine_size=engine.stat().st_size,
            engine_sha256=sha256_file(engine),
        )
        for item in build_dir.iterdir():
            if item.is_file():
                fsync_path(item)
        write_file_durably(build_dir / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True).encode())
        fsync_path(build_dir)
        final = self.entry_dir(model, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():  # a corrupt entry we decided to replace: move it aside first, atomically
            trash = self.tmp_root / f"{model}-{key}-{os.getpid()}-replaced-{secrets.token_hex(4)}"
            os.rename(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        os.rename(build_dir, final)
        fsync_path(final.parent)
        return CacheEntry(model, key, final, manifest)

    def discard(self, model: str, key: str, reason: str) -> None:
        """Remove an unusable entry (under the key's lock) so a rebuild can take its place."""
        final = self.entry_dir(model, key)
        if final.exists():
            log.warning("%s: discarding cached engine %s: %s", model, key, reason)
            trash = self.tmp_root / f"{model}-{key}-{os.getpid()}-discard-{secrets.token_hex(4)}"
            self._ensure_dirs()
            os.rename(final, trash)
            shutil.rmtree(trash, ignore_errors=True)

    # -- garbage collection ----------------------------------------------------------------------------------
    def gc(self, model: str, keep: int, protect: str) -> list[str]:
        """Keep the ``keep`` newest entries of ``model`` (always including ``protect``); remove the rest.

        An entry whose key lock is held (a build or install in progress) is skipped.
        """
        removed: list[str] = []
        others = [e for e in self.entries(model) if e.key != protect]
        for entry in others[max(keep - 1, 0):]:
            # Lock files are never unlinked: unlinking one another process has open would let two builders
            # "hold" the same key on different inodes.
            lock_path = self.root / ".locks" / f"{model}-{entry.key}.lock"
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # being rebuilt or installed right now
                trash = self.tmp_root / f"{model}-{entry.key}-{os.getpid()}-gc-{secrets.token_hex(4)}"
                os.rename(entry.directory, trash)
                shutil.rmtree(trash, ignore_errors=True)
                removed.append(entry.key)
            finally:
                os.close(fd)
        if removed:
            log.info("%s: garbage-collected %d old engine(s): %s", model, len(removed), ", ".join(removed))
        return removed
