"""The tests' one OtaManager factory. Its defaults are OtaManager's own (no status callback, no base model to roll
back to, OtaConfig()), on the OfflineSwitcher (no Triton); a test names what it needs differently.

    m = ota_manager(tmp_path / "state", keys.trusted(), events=events)        # statuses into events
    m = ota_manager(state, trusted, base_spec=offline_base, keep_versions=2)  # rollbacks reach the base model
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from appliance.detector.serving.switcher import ModelSpec, ModelSwitcher
from appliance.ota.config import OtaConfig
from appliance.ota.manager import OtaManager
from appliance.ota.offline import OfflineSwitcher
from appliance.ota.signing import TrustedKeys


def offline_base() -> ModelSpec:
    """The base model as the offline switcher serves it: nothing to load (``appliance ota``'s stand-in)."""
    return ModelSpec(None, None, None)


def ota_manager(state: Path, trusted: TrustedKeys, switcher: Optional[ModelSwitcher] = None, *,
                events: Optional[list[Any]] = None, base_spec: Optional[Callable[[], ModelSpec]] = None,
                **config: Any) -> OtaManager:
    """An OtaManager on ``state`` trusting ``trusted``, with ``OtaConfig(**config)``; each status it reports is
    appended to ``events`` when given."""
    return OtaManager(state, trusted, switcher or OfflineSwitcher(), config=OtaConfig(**config),
                      status_cb=events.append if events is not None else None, base_spec=base_spec)
