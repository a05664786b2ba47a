"""Where the source tree, profiles, models and the state directory are, on a device and in a source checkout.

``CHECKOUT`` is the directory that holds the ``appliance`` package (a git checkout, or /opt/appliance/src on a
device), so the Triton repository templates and the model profiles are always read from ``CHECKOUT /
"repository"``. The state, engines and models directories: the explicit argument, the environment, the installed
layout (``installed.json``), a source checkout's own, then the device default (docs/engines.md, "Running it").
Ground floor: the standard library only, so triton/ and detector/ find their roots here."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

CHECKOUT = Path(__file__).resolve().parents[1]
# Written into the installed source tree (/opt/appliance/src) by scripts/install-service.sh: where the installed
# config, state, engines and models are ({"config": ..., "state_dir": ..., "engines_dir": ..., "models_dir": ...}).
INSTALL_MARKER = "installed.json"


def in_checkout() -> bool:
    """True when ``CHECKOUT`` is a source tree (pyproject.toml beside the package; /opt/appliance/src is one too)."""
    return _is_source_tree(CHECKOUT)


def _is_source_tree(root: Path) -> bool:
    return (root / "pyproject.toml").is_file() and (root / "appliance").is_dir()


def repository_templates_dir() -> Path:
    """The Triton model-repository templates (``repository/`` of the source tree)."""
    return CHECKOUT / "repository"


def profiles_dir() -> Path:
    """The shipped model profiles (``repository/profiles/<model>.yaml``)."""
    return repository_templates_dir() / "profiles"


def triton_checkout_home() -> Path:
    """``.triton`` in the source tree, where scripts/provision_triton.py puts Triton in development."""
    return CHECKOUT / ".triton"


def installed_layout(checkout: Path | None = None) -> dict[str, Path]:
    """The installed paths named by ``<checkout>/installed.json`` (empty when the tree was not installed)."""
    marker = (CHECKOUT if checkout is None else checkout) / INSTALL_MARKER
    try:
        data = json.loads(marker.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"cannot read {marker} (written by scripts/install-service.sh): {exc}") from exc
    return {key: Path(value) for key, value in data.items() if isinstance(value, str) and value}


def installed_config(checkout: Path | None = None) -> Path | None:
    """The config file of an installed device (/etc/appliance/appliance.yaml), or None in a source checkout."""
    return installed_layout(checkout).get("config")


def _pick(explicit: str | Path | None, env_name: str, key: str, checkout_rel: str, installed: str,
          environ: Mapping[str, str] | None, checkout: Path | None) -> Path:
    env = os.environ if environ is None else environ
    if explicit:
        return Path(explicit)
    if env.get(env_name):
        return Path(env[env_name])
    root = CHECKOUT if checkout is None else checkout
    layout = installed_layout(root)
    if key in layout:
        return layout[key]
    if _is_source_tree(root):
        return root / checkout_rel
    return Path(installed)


def state_dir(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None,
              checkout: Path | None = None) -> Path:
    return _pick(explicit, "APPLIANCE_STATE_DIR", "state_dir", ".state", "/var/lib/appliance", environ, checkout)


def engines_dir(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None,
                checkout: Path | None = None) -> Path:
    return _pick(explicit, "APPLIANCE_ENGINES_DIR", "engines_dir", "engines", "/etc/appliance/engines", environ,
                 checkout)


def models_dir(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None,
               checkout: Path | None = None) -> Path:
    return _pick(explicit, "APPLIANCE_MODELS_DIR", "models_dir", ".models", "/var/lib/appliance/models", environ,
                 checkout)
