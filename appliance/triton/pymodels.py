"""Make the appliance's Python packages importable inside Triton Python-backend models.

The stub embeds the system libpython in isolated mode and ignores ``PYTHONPATH``, so every Python model gets a
``_appliance_site.py`` beside its ``model.py``, which ``model.py`` must import first. ``Server.start`` and
``Server.load_model`` write it, so no other code has to remember to (docs/triton.md, "Python models")."""

from __future__ import annotations

import os
import re
import site
import sys
from collections.abc import Sequence
from pathlib import Path

from appliance.paths import CHECKOUT
from appliance.triton import stubsite

HOOK_MODULE = "_appliance_site"
HOOK_FILE = HOOK_MODULE + ".py"
_PYTHON_BACKEND = re.compile(r'^\s*backend\s*:\s*"python"', re.MULTILINE)

_TEMPLATE = '''\
# Written by appliance.triton.pymodels; do not edit (it is rewritten when the environment changes).
# Triton's Python-backend stub ignores PYTHONPATH, so model.py imports this module first to see the
# appliance's packages. Directories are added in front of the stub's own sys.path.
import site as _site
import sys as _sys

_DIRS = {dirs!r}
_before = list(_sys.path)
for _d in _DIRS:
    _site.addsitedir(_d)
_sys.path[:] = [_p for _p in _sys.path if _p not in _before] + _before
'''


def default_site_dirs(stub: Path | None = None) -> list[str]:
    """Directories the stub needs: the numpy<2 stub site (when needed), then this interpreter's site-packages.

    ``stub`` is the stub binary, to tell whether it copes with NumPy 2 (unknown: assume not). Raises
    ``stubsite.StubSiteMissing`` when the stub site is needed but not provisioned.
    """
    dirs: list[str] = []
    if stubsite.needed(stub):
        dirs.append(str(stubsite.require()))
    user_site = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    for d in [*site.getsitepackages(), *user_site]:
        if os.path.isdir(d) and d not in dirs:
            dirs.append(d)
    # Running from a plain checkout (not pip-installed): make its package root visible too.
    root = str(CHECKOUT)
    if not _installed() and root not in dirs:
        dirs.append(root)
    return dirs


def _installed() -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("appliance")
    except PackageNotFoundError:
        return False
    return True


def hook_source(site_dirs: Sequence[str]) -> str:
    return _TEMPLATE.format(dirs=[str(d) for d in site_dirs])


def write_path_hook(model_dir: Path, site_dirs: Sequence[str] | None = None, *, stub: Path | None = None) -> list[Path]:
    """Write ``_appliance_site.py`` into a model directory and each version holding a ``model.py``.

    Idempotent; returns the files, the model directory's first. The stub searches the version directory
    first, so that copy is the one imported and its ``__pycache__`` stays where Triton ignores it (one in
    the model directory draws a warning on every load); the model-directory copy serves models whose
    loader only puts the model directory on ``sys.path``.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model directory {model_dir} does not exist")
    source = hook_source(default_site_dirs(stub) if site_dirs is None else site_dirs)
    versions = sorted(v for v in model_dir.iterdir() if v.is_dir() and v.name.isdigit() and (v / "model.py").is_file())
    return [_write(target / HOOK_FILE, source) for target in (model_dir, *versions)]


def _write(target: Path, source: str) -> Path:
    if target.is_file() and target.read_text() == source:
        return target
    tmp = target.with_name(f".{HOOK_FILE}.{os.getpid()}.tmp")
    try:
        tmp.write_text(source)
        os.replace(tmp, target)
    except PermissionError as exc:
        tmp.unlink(missing_ok=True)
        raise PermissionError(
            f"cannot write the Python-model path hook {target}: {exc.strerror}. Prepare read-only "
            f"repositories at install time with appliance.triton.pymodels.prepare_repository()."
        ) from exc
    return target


def is_python_model(model_dir: Path) -> bool:
    """A model served by the Python backend: its config says so, or a version holds a model.py."""
    config = model_dir / "config.pbtxt"
    if config.is_file() and _PYTHON_BACKEND.search(config.read_text(errors="replace")):
        return True
    return any(v.name.isdigit() and (v / "model.py").is_file() for v in model_dir.iterdir() if v.is_dir())


def prepare_repository(
    repository: Path, site_dirs: Sequence[str] | None = None, *, stub: Path | None = None
) -> list[Path]:
    """Write the path hook into every Python model of a repository; return the hook files.

    ``site_dirs`` defaults to ``default_site_dirs(stub)``.
    """
    repository = Path(repository)
    if not repository.is_dir():
        raise FileNotFoundError(f"model repository {repository} does not exist")
    dirs = default_site_dirs(stub) if site_dirs is None else list(site_dirs)
    return [
        hook
        for model_dir in sorted(repository.iterdir())
        if model_dir.is_dir() and not model_dir.name.startswith(".") and is_python_model(model_dir)
        for hook in write_path_hook(model_dir, dirs)
    ]


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="write the Python-model path hook into a repository")
    parser.add_argument("repository", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for repo in args.repository:
        for hook in prepare_repository(repo):
            print(hook)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
