"""Status events of an update: one callback gets every step (the supervisor maps them to MQTT ota/status,
metrics and logs)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

STATES = ("received", "verifying", "staging", "building", "checking", "switching", "watching", "active",
          "rolled_back", "rejected")
FINAL_STATES = frozenset({"active", "rolled_back", "rejected"})  # each ends an update


@dataclass(frozen=True)
class OtaStatus:
    state: str                 # one of STATES
    message: str
    version: str | None = None
    model: str | None = None
    percent: float | None = None   # building: the engine build's progress
    code: str | None = None        # rejected: OtaRejected.code; rolled_back: "health" or "manual"
    request_id: str | None = None
    rollout_id: str | None = None  # the fleet rollout that asked for this update (appliance.ota.follower)
    missing_classes: tuple[str, ...] | None = None  # the config's filter classes the new model lacks
    time: float = 0.0              # the manager's wall clock (epoch seconds)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if v is not None}


StatusCallback = Callable[[OtaStatus], None]
