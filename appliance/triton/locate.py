"""Find the Triton distribution (server library, Python backend, optional server binary).

Search order: an explicit ``home`` argument, the ``APPLIANCE_TRITON_HOME`` environment variable, an installed
device's Triton (``triton_home`` in ``installed.json``, scripts/install-service.sh), ``/opt/tritonserver`` (the
Triton igpu image on Jetson), then ``.triton`` in the source checkout
(laid out by ``scripts/provision_triton.py``). An explicit home or the environment variable is
authoritative: if it is set but incomplete we report that instead of silently using another one.

Every path is resolved with ``os.path.realpath``: the provisioned binaries find their libraries through
``$ORIGIN``-relative RPATHs, which break when loaded through the ``lib -> ...`` symlinks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.paths import installed_layout, triton_checkout_home

ENV_VAR = "APPLIANCE_TRITON_HOME"
SYSTEM_HOME = Path("/opt/tritonserver")
FIX_HINT = (
    "Provision a CPU-host build with `python scripts/provision_triton.py --dest .triton` (or run "
    "scripts/setup.sh), set APPLIANCE_TRITON_HOME to a directory laid out like /opt/tritonserver, "
    "or pass --triton-home."
)


class TritonNotFound(ApplianceError, RuntimeError):
    """No usable Triton distribution. ``problems`` lists, per place looked at, what was missing."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"no usable Triton distribution found:\n{lines}\n{FIX_HINT}")


@dataclass(frozen=True)
class TritonDistribution:
    """A Triton installation laid out like ``/opt/tritonserver``; all paths are real (symlink-free)."""

    home: Path
    library: Path  # libtritonserver.so
    backend_dir: Path  # contains python/libtriton_python.so
    python_stub: Path  # backends/python/triton_python_backend_stub
    bin_dir: Path | None  # contains the tritonserver binary, when shipped
    source: str  # how it was found: "argument", "environment", "system", "checkout"
    version: str | None = None  # from PROVISIONED.json when provisioned by our script

    @property
    def server_binary(self) -> Path | None:
        return None if self.bin_dir is None else self.bin_dir / "tritonserver"

    def to_dict(self) -> dict[str, str | None]:
        """What ``appliance triton-info --json`` prints: the same rows as :meth:`describe`, null where absent."""
        return {"home": str(self.home), "found_via": self.source, "version": self.version,
                "library": str(self.library), "backends": str(self.backend_dir), "python_stub": str(self.python_stub),
                "server_binary": str(self.server_binary) if self.server_binary else None}

    def describe(self) -> str:
        rows = [
            ("home", str(self.home)),
            ("found via", self.source),
            ("version", self.version or "unknown (not provisioned by scripts/provision_triton.py)"),
            ("library", str(self.library)),
            ("backends", str(self.backend_dir)),
            ("python stub", str(self.python_stub)),
            ("server binary", str(self.server_binary) if self.server_binary else "not shipped"),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def inspect(home: Path, source: str) -> TritonDistribution:
    """Validate one candidate directory; raise TritonNotFound naming exactly what is missing there."""
    home = Path(home).expanduser()
    if not home.is_dir():
        raise TritonNotFound([f"{home} ({source}): directory does not exist"])
    missing = []
    library = home / "lib" / "libtritonserver.so"
    backend_dir = home / "backends"
    python_backend = backend_dir / "python" / "libtriton_python.so"
    stub = backend_dir / "python" / "triton_python_backend_stub"
    for path, what in (
        (library, "the server library"),
        (python_backend, "the Python backend"),
        (stub, "the Python-backend stub"),
    ):
        if not path.is_file():
            missing.append(f"{path} ({source}): {what} is missing")
    if stub.is_file() and not os.access(stub, os.X_OK):
        missing.append(f"{stub} ({source}): the Python-backend stub is not executable")
    if missing:
        raise TritonNotFound(missing)
    binary = home / "bin" / "tritonserver"
    version = None
    marker = home / "PROVISIONED.json"
    if marker.is_file():
        try:
            version = str(json.loads(marker.read_text())["triton"])
        except (ValueError, KeyError, TypeError):
            version = None  # a damaged marker does not make the libraries unusable
    return TritonDistribution(
        home=_real(home),
        library=_real(library),
        backend_dir=_real(backend_dir),
        python_stub=_real(stub),
        bin_dir=_real(binary.parent) if binary.is_file() else None,
        source=source,
        version=version,
    )


def locate(
    home: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    system_home: Path = SYSTEM_HOME,
    checkout: Path | None = None,
) -> TritonDistribution:
    """Return the first usable distribution in the search order, or raise TritonNotFound.

    ``env``, ``system_home`` and ``checkout`` exist so tests can point the search at fixture trees.
    """
    env = os.environ if env is None else env
    if home is not None and str(home) != "":
        return inspect(Path(home), "argument")
    if env.get(ENV_VAR):
        return inspect(Path(env[ENV_VAR]), f"environment {ENV_VAR}")
    problems: list[str] = []
    installed = installed_layout(checkout.parent if checkout is not None else None).get("triton_home")
    candidates = [(installed, "installed.json")] if installed is not None else []
    candidates += [(system_home, "system"), (checkout or triton_checkout_home(), "checkout")]
    for candidate, source in candidates:
        try:
            return inspect(candidate, source)
        except TritonNotFound as exc:
            problems.extend(exc.problems)
    raise TritonNotFound(problems)
