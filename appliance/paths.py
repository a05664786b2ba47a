"""Where the source tree, profiles, models and the state directory are, on a device and in a source checkout.

``CHECKOUT`` is the directory that holds the ``appliance`` package: a git checkout in development, and
/opt/appliance/src on a device (scripts/install-service.sh copies the tree there and installs it editable), so
the Triton repository templates and the model profiles are always read from ``CHECKOUT / "repository"``.

For the state, engines and models directories the order is: the explicit argument, an environment variable, a
source checkout's own directory (when the package runs from one), the installed default. Operators override
with the environment in the unit file (systemd/appliance.service sets all three).

Ground floor: the standard library only, so triton/, modelrepo/ and engines/ all find their roots here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

CHECKOUT = Path(__file__).resolve().parents[1]


def in_checkout() -> bool:
    """True when ``CHECKOUT`` is a source tree (pyproject.toml beside the package; /opt/appliance/src is one too)."""
    return (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / "appliance").is_dir()


def repository_templates_dir() -> Path:
    """The Triton model-repository templates (``repository/`` of the source tree)."""
    return CHECKOUT / "repository"


def profiles_dir() -> Path:
    """The shipped model profiles (``repository/profiles/<model>.yaml``)."""
    return repository_templates_dir() / "profiles"


def triton_checkout_home() -> Path:
    """``.triton`` in the source tree, where scripts/provision_triton.py puts Triton in development."""
    return CHECKOUT / ".triton"


def _pick(explicit: str | Path | None, env_name: str, checkout_rel: str, installed: str,
          environ: Mapping[str, str] | None) -> Path:
    env = os.environ if environ is None else environ
    if explicit:
        return Path(explicit)
    if env.get(env_name):
        return Path(env[env_name])
    if in_checkout():
        return CHECKOUT / checkout_rel
    return Path(installed)


def state_dir(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    return _pick(explicit, "APPLIANCE_STATE_DIR", ".state", "/var/lib/appliance", environ)


def engines_dir(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    return _pick(explicit, "APPLIANCE_ENGINES_DIR", "engines", "/etc/appliance/engines", environ)


def models_dir(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    return _pick(explicit, "APPLIANCE_MODELS_DIR", ".models", "/var/lib/appliance/models", environ)
