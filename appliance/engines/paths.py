"""The state, engines and models directories for the engines package and its CLI: the resolver itself lives
on the ground floor in appliance/paths.py (triton/ and modelrepo/ need it too); this keeps the names that
engines/, the CLIs and the config check import from here."""

from __future__ import annotations

from appliance.paths import CHECKOUT, engines_dir, models_dir, state_dir

__all__ = ["CHECKOUT", "engines_dir", "models_dir", "state_dir"]
