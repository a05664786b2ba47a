"""The OTA tests' fixtures: signing keys and a signer, the tiny real ONNX model and bundle sources made from it,
and a real small tmpfs. The helpers they are built from are in ota_helpers.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
from ota_helpers import Keys, make_tiny_detector, tiny_engine_profile, tiny_model_profile, write_source
from support.bundleserver import Server, serve_directory

from appliance.fleet.bundle import build_bundle


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return Keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture
def sign(keys: Keys, tmp_path: Path):  # type: ignore[no-untyped-def]
    """sign(src_dir, name) -> bundle path, signed with the trusted key (or ``key=`` another private key)."""
    def _sign(src: Path, name: str = "update.bundle", key: Path | None = None) -> Path:
        out = tmp_path / "bundles" / name
        out.parent.mkdir(parents=True, exist_ok=True)
        build_bundle(src, key or keys.private, out)
        return out

    return _sign


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_detector(tmp_path_factory.mktemp("tiny") / "tiny.onnx")


@pytest.fixture
def tiny_source(tmp_path: Path, tiny_onnx: Path):  # type: ignore[no-untyped-def]
    def _make(version: str = "2", name: str | None = None, **kw: Any) -> Path:
        kw.setdefault("model_profile", tiny_model_profile())
        kw.setdefault("engine_profile", tiny_engine_profile())
        return write_source(tmp_path / "src" / (name or version), version=version, onnx=kw.pop("onnx", tiny_onnx), **kw)

    return _make


@pytest.fixture
def small_tmpfs(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real 200 KB tmpfs, for running out of space for real (skips where mounting is not allowed)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)



@pytest.fixture
def bundle_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real HTTP server on loopback serving ``tmp_path/served``: yields (base URL, that directory)."""
    served = tmp_path / "served"
    served.mkdir()
    with serve_directory(served) as url:
        yield url, served


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[Server]:
    """A real HTTP ``Server`` (tests/support/bundleserver.py) serving ``tmp_path/www``."""
    server = Server(tmp_path / "www")
    try:
        yield server
    finally:
        server.close()
