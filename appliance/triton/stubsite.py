"""The *stub site*: a directory holding numpy<2 for Triton's Python-backend stub.

The Triton 2.51 stub was built with a pybind11 that predates NumPy 2: with NumPy 2 it reads a dtype's
item size as 0, so ``pb_utils.Tensor`` outputs come out empty and inputs get zero strides. The appliance's
virtualenv uses NumPy 2 (OpenCV requires it), so the stub gets its own numpy<2, installed with pip into a
directory that the Python-model path hook puts *in front of* the virtualenv. Compiled packages that the
models use (onnxruntime, cv2) import fine against NumPy 1.26.

Location: ``$APPLIANCE_TRITON_STUB_SITE`` or ``<sys.prefix>/triton-stub-site`` (inside the virtualenv, so
it always matches the interpreter's Python version). Provision it with ``python -m appliance.triton.stubsite``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from appliance.errors import ApplianceError

ENV_VAR = "APPLIANCE_TRITON_STUB_SITE"
REQUIREMENT = "numpy>=1.24,<2"


class StubSiteMissing(ApplianceError, RuntimeError):
    """NumPy 2 is in use but the numpy<2 stub site was not provisioned."""


def location(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env[ENV_VAR]) if env.get(ENV_VAR) else Path(sys.prefix) / "triton-stub-site"


def needed(stub: Path | None = None) -> bool:
    """True when this interpreter's numpy is 2.x or newer and the stub cannot use it.

    Without ``stub`` we assume it cannot (the provisioned 2.51 stub). Given the stub binary, one built with
    a NumPy-2-aware pybind11 (>= 2.12, which names ``numpy._core``) needs no stub site.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        if int(version("numpy").split(".")[0]) < 2:
            return False
    except PackageNotFoundError:
        return False
    return stub is None or not handles_numpy2(stub)


def handles_numpy2(stub: Path) -> bool:
    """Whether the stub binary was built with a pybind11 that knows NumPy 2's module layout."""
    return b"numpy._core" in Path(stub).read_bytes()


def _numpy_major(site_dir: Path) -> int | None:
    for info in site_dir.glob("numpy-*.dist-info"):
        try:
            return int(info.name.split("-")[1].split(".")[0])
        except (IndexError, ValueError):
            return None
    return None


def is_provisioned(site_dir: Path) -> bool:
    return (site_dir / "numpy" / "__init__.py").is_file() and _numpy_major(site_dir) == 1


def require(env: Mapping[str, str] | None = None) -> Path:
    site_dir = location(env)
    if not is_provisioned(site_dir):
        raise StubSiteMissing(
            f"Triton's Python-backend stub needs numpy<2 but {site_dir} does not hold it (this environment "
            f"has NumPy 2, which the 2.51 stub mis-reads). Run `{sys.executable} -m appliance.triton.stubsite` "
            f"(scripts/setup.sh does it), or set {ENV_VAR} to a directory containing numpy<2."
        )
    return site_dir


def ensure(site_dir: Path | None = None, python: str = sys.executable) -> Path:
    """Install numpy<2 into ``site_dir`` with pip unless already there; atomic (built beside, renamed)."""
    site_dir = location() if site_dir is None else Path(site_dir)
    if is_provisioned(site_dir):
        return site_dir
    site_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".stub-site-", dir=site_dir.parent))
    try:
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "--no-deps", "--target", str(staging), REQUIREMENT],
            check=True,
        )
        if site_dir.exists():
            shutil.rmtree(site_dir)
        os.replace(staging, site_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return site_dir


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=None, help=f"default: {location()}")
    args = parser.parse_args(argv)
    print(ensure(args.dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
