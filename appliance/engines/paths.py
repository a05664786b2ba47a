"""Where profiles, models and the state directory are, on a device and in a source checkout.

Order for each: the explicit argument, an environment variable, a source checkout's own directory (when the
package runs from one), the installed default. Operators override with the environment in the unit file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

CHECKOUT = Path(__file__).resolve().parents[2]


def _in_checkout() -> bool:
    return (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / "appliance").is_dir()


def _pick(explicit: str | Path | None, env_name: str, checkout_rel: str, installed: str,
          environ: Mapping[str, str] | None) -> Path:
    env = os.environ if environ is None else environ
    if explicit:
        return Path(explicit)
    if env.get(env_name):
        return Path(env[env_name])
    if _in_checkout():
        return CHECKOUT / checkout_rel
    return Path(installed)


def state_dir(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    return _pick(explicit, "APPLIANCE_STATE_DIR", ".state", "/var/lib/appliance", environ)


def engines_dir(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    return _pick(explicit, "APPLIANCE_ENGINES_DIR", "engines", "/etc/appliance/engines", environ)


def models_dir(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    return _pick(explicit, "APPLIANCE_MODELS_DIR", ".models", "/var/lib/appliance/models", environ)
