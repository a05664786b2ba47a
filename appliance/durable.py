"""Files that survive a crash or power cut: hashing and write-fsync-rename, shared by the engine cache,
OTA (the active-model pointer, staged versions) and the model fetcher."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path
from typing import Any


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def fsync_path(path: Path) -> None:
    """fsync a file, or a directory (which makes renames and new entries in it durable)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if Path(path).is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_sibling(path: Path) -> Path:
    """A unique hidden name beside ``path`` (``.<name>.<pid>.<random>``): leftovers match ``.<name>.*``."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")


def write_file_durably(path: Path, data: bytes) -> None:
    """Write to a sibling temporary, fsync, rename over ``path``, fsync the directory: readers see the old
    file or the new one, never a part, whatever happens in between."""
    tmp = temp_sibling(path)
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_path(path.parent)


def write_json_durably(path: Path, doc: Any) -> None:
    write_file_durably(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
