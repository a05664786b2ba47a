"""Open a bundle safely: check the tar's shape, verify the signature over the manifest, then extract only the
files the signed manifest lists, hashing while writing. Nothing is trusted before the signature is checked."""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from appliance.ota.errors import OtaRejected, out_of_space
from appliance.ota.manifest import MANIFEST_NAME, SIGNATURE_NAME, Manifest, parse_manifest
from appliance.ota.signing import TrustedKeys

MAX_MANIFEST_BYTES = 1 << 20
FreeSpace = Callable[[Path], int]


def disk_free(path: Path) -> int:
    return shutil.disk_usage(path).free


@dataclass(frozen=True)
class OpenedBundle:
    manifest: Manifest
    manifest_bytes: bytes
    signature: bytes
    key_id: str


def _members(tar: tarfile.TarFile, max_bytes: int) -> dict[str, tarfile.TarInfo]:
    members: dict[str, tarfile.TarInfo] = {}
    total = 0
    for info in tar:
        if not info.isfile():
            raise OtaRejected("corrupt", f"member {info.name!r} is not a regular file")
        if info.name in members:
            raise OtaRejected("corrupt", f"member {info.name!r} appears twice")
        # Header blocks too (GNU long names, PAX records: ``offset`` is where the first of them starts): they are
        # read into memory, and an archive of headers alone must not pass as small.
        total += (info.offset_data - info.offset) + info.size
        if total > max_bytes:
            raise OtaRejected("too_large", f"bundle contents exceed the limit of {max_bytes} bytes")
        members[info.name] = info
    return members


def _read_small(tar: tarfile.TarFile, info: tarfile.TarInfo) -> bytes:
    if info.size > MAX_MANIFEST_BYTES:
        raise OtaRejected("corrupt", f"{info.name} is {info.size} bytes (limit {MAX_MANIFEST_BYTES})")
    f = tar.extractfile(info)
    assert f is not None
    return f.read()


def verify_bundle(path: Path, trusted: TrustedKeys, max_bytes: int) -> OpenedBundle:
    """Check the archive and the signature; no files are written. Raises OtaRejected."""
    try:
        with tarfile.open(path, mode="r:") as tar:
            members = _members(tar, max_bytes)
            if MANIFEST_NAME not in members:
                raise OtaRejected("corrupt", f"no {MANIFEST_NAME} in the bundle")
            manifest_bytes = _read_small(tar, members[MANIFEST_NAME])
            signature = _read_small(tar, members[SIGNATURE_NAME]) if SIGNATURE_NAME in members else None
    except (tarfile.TarError, EOFError) as exc:
        raise OtaRejected("corrupt", f"{path.name} is not a readable tar archive: {exc}") from None
    except OSError as exc:
        raise OtaRejected("delivery", f"cannot read {path}: {exc.strerror}") from None
    kid = trusted.verify(manifest_bytes, signature)
    manifest = parse_manifest(manifest_bytes)
    listed, present = set(manifest.files), set(members) - {MANIFEST_NAME, SIGNATURE_NAME}
    if listed - present:
        raise OtaRejected("corrupt", f"files listed in the manifest are missing: {sorted(listed - present)}")
    if present - listed:
        raise OtaRejected("corrupt", f"files not covered by the manifest: {sorted(present - listed)}")
    for name, entry in manifest.files.items():
        if members[name].size != entry.size:
            raise OtaRejected("hash_mismatch", f"{name}: {members[name].size} bytes, the manifest says {entry.size}")
    assert signature is not None
    return OpenedBundle(manifest, manifest_bytes, signature, kid)


def extract_verified(path: Path, opened: OpenedBundle, dest: Path, free_space: FreeSpace = disk_free,
                     reserve_bytes: int = 0) -> None:
    """Extract the listed files into the (new, empty) ``dest``, checking each SHA-256 while writing.

    ``reserve_bytes``: space that must remain after staging (e.g. for the engine build). A lack of space,
    found up front or as ENOSPC while writing, is ``OtaRejected('disk_full')``; the caller removes ``dest``.
    """
    need = sum(e.size for e in opened.manifest.files.values()) + reserve_bytes
    free = free_space(dest)
    if free < need:
        raise OtaRejected("disk_full", f"staging needs {need} bytes in {dest.parent}, {free} are free")
    try:
        with tarfile.open(path, mode="r:") as tar:
            for info in tar:
                entry = opened.manifest.files.get(info.name)
                if entry is None:
                    continue
                target = dest / info.name
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(info)
                assert src is not None
                h = hashlib.sha256()
                with open(target, "wb") as out:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        h.update(block)
                        out.write(block)
                    out.flush()
                    os.fsync(out.fileno())
                if h.hexdigest() != entry.sha256:
                    raise OtaRejected("hash_mismatch", f"{info.name}: SHA-256 {h.hexdigest()[:16]}... differs "
                                                       f"from the signed manifest's {entry.sha256[:16]}...")
    except OSError as exc:
        if out_of_space(exc):
            raise OtaRejected("disk_full", f"ran out of space staging into {dest.parent}: {exc.strerror}") from None
        raise
    except (tarfile.TarError, EOFError) as exc:
        raise OtaRejected("corrupt", f"{path.name}: archive damaged while extracting: {exc}") from None
