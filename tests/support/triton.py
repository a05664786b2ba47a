"""Start a real in-process Triton server on a model repository, for tests of any area.

    from support.triton import started_server

    def test_something(tmp_path):
        repo = copy_models(tmp_path / "repo", [MY_MODELS / "preprocess"])
        with started_server(repo, models=["preprocess"]) as server:
            result = server.infer("preprocess", {"IMAGE": frame})

Models are Python-backend models whose model.py starts with ``import _appliance_site`` (docs/triton.md);
the server writes that hook into the repository, so point it at a copy (``copy_models``), not at files under
version control. The server is always stopped on exit, leaving no stub process behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from appliance.triton import stubsite
from appliance.triton.server import Server, ServerOptions
from appliance.triton.stubs import StubScanner


def make_dist(root: Path, *, binary: bool = True, stub_mode: int = 0o755, version: str | None = "2.51.0") -> Path:
    """A fixture tree laid out like /opt/tritonserver (empty files: the locator does not load them)."""
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "libtritonserver.so").write_bytes(b"")
    py = root / "backends" / "python"
    py.mkdir(parents=True)
    (py / "libtriton_python.so").write_bytes(b"")
    (py / "triton_python_backend_stub").write_bytes(b"")
    (py / "triton_python_backend_stub").chmod(stub_mode)
    if binary:
        (root / "bin").mkdir()
        (root / "bin" / "tritonserver").write_bytes(b"")
    if version:
        (root / "PROVISIONED.json").write_text(json.dumps({"triton": version}))
    return root


def ensure_stub_site() -> Path | None:
    """Provision the numpy<2 directory the Python-backend stub needs (pip, first use only)."""
    return stubsite.ensure() if stubsite.needed() else None


def copy_models(dest: Path, model_dirs: Sequence[Path]) -> Path:
    """Copy model directories into a fresh repository ``dest`` and return it."""
    dest.mkdir(parents=True, exist_ok=True)
    for model in model_dirs:
        shutil.copytree(model, dest / Path(model).name,
                        ignore=shutil.ignore_patterns("__pycache__", "_appliance_site.py"))
    return dest


def kill_stubs_under(repo: Path, scanner: StubScanner | None = None) -> list[int]:
    """SIGKILL stubs serving models under ``repo`` whatever their parent (a crashed child leaves them orphaned),
    remove their shared-memory regions, and return their pids: for tests that run a server in a child process."""
    scanner = scanner or StubScanner()
    killed = []
    for stub in scanner.under(repo):
        try:
            os.kill(stub.pid, signal.SIGKILL)
            killed.append(stub.pid)
        except ProcessLookupError:
            continue
        scanner.remove_region(stub.region)
    return killed


@contextmanager
def started_server(
    repository: Path | Sequence[Path],
    models: Sequence[str] = (),
    *,
    start_timeout: float = 180.0,
    stop_timeout: float = 60.0,
    **options: Any,
) -> Iterator[Server]:
    """A running server on ``repository`` (one or several) with ``models`` loaded; stopped on exit.

    Extra keyword arguments go to ``ServerOptions`` (e.g. ``backend_config``, ``log_info=True``).
    """
    ensure_stub_site()
    repos = [Path(repository)] if isinstance(repository, str | Path) else [Path(r) for r in repository]
    server = Server(ServerOptions(repositories=repos, startup_models=list(models), **options))
    server.start(timeout=start_timeout)
    try:
        yield server
    finally:
        server.stop(timeout=stop_timeout)
