"""Is the served pipeline still there? Cheap checks run once per supervisor tick, never per frame.

Triton does not notice a Python-backend stub process that died (SIGKILL, the OOM killer, a crash in a native
library): the model still reads READY, and every request to it fails after about a second with
``[INTERNAL] Stub process '<model>_<group>_<instance>' is not healthy.`` (inside an ensemble the message starts
with ``in ensemble '<name>', ``; verified with Triton 2.51). So besides asking Triton whether each model of the
route is ready, the probe counts each Python model's live stub processes against its instance count, and the
frame path turns such request errors into faults (``fault_from_error``).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from appliance.detector.serving.router import Route
from appliance.triton.errors import TritonError

log = logging.getLogger(__name__)

_STUB_UNHEALTHY = re.compile(r"Stub process '([^']+)' is not healthy")
_UNKNOWN_MODEL = re.compile(r"Request for unknown model: '([^']+)'")


@dataclass(frozen=True)
class Fault:
    model: str
    kind: str    # metric label: "not_ready" or "stub_died"
    detail: str  # for the operator


class ModelServer(Protocol):
    """What the probe needs from ``appliance.triton.Server``."""

    def model_ready(self, name: str) -> bool: ...
    def model_config(self, name: str) -> dict[str, Any]: ...
    def stub_counts(self) -> dict[str, int]: ...


def expected_stubs(config: Mapping[str, Any]) -> int:
    """Stub processes a loaded model runs: one per Python-backend instance (KIND_GPU: per listed GPU)."""
    if config.get("backend") != "python":
        return 0
    total = 0
    for group in config.get("instance_group") or []:
        count = int(group.get("count", 1))
        gpus = group.get("gpus") or []
        total += count * (len(gpus) if group.get("kind") == "KIND_GPU" and gpus else 1)
    return total


def _model_of_instance(instance: str, models: Sequence[str]) -> str | None:
    """Triton names instances ``<model>_<group>_<index>``; model names may hold '_', so match the route's."""
    for name in sorted(models, key=len, reverse=True):
        if instance.startswith(f"{name}_") and re.fullmatch(r"\d+_\d+", instance[len(name) + 1:]):
            return name
    return None


def fault_from_error(error: BaseException | None, route: Route) -> Fault | None:
    """The fault a failed request shows, when it means a model of ``route`` is gone (else None: a timeout or
    a bad frame is not the model's death)."""
    if error is None:
        return None
    text = str(error)
    match = _STUB_UNHEALTHY.search(text)
    if match:
        model = _model_of_instance(match.group(1), route.models)
        if model is not None:
            return Fault(model, "stub_died", f"requests fail: {match.group(0)}")
    match = _UNKNOWN_MODEL.search(text)
    if match and match.group(1) in route.models:
        return Fault(match.group(1), "not_ready", f"requests fail: {text}")
    return None


class ModelProbe:
    """Faults of the models of a route right now: not ready, or fewer live stubs than instances."""

    def __init__(self, server: ModelServer) -> None:
        self._server = server
        self._expected: dict[str, int] = {}
        self._route_key: str | None = None

    def _expected_stubs(self, name: str) -> int:
        if name not in self._expected:
            self._expected[name] = expected_stubs(self._server.model_config(name))
        return self._expected[name]

    def faults(self, route: Route) -> list[Fault]:
        if route.ensemble != self._route_key:  # another version serves: its models may differ under one name
            self._expected.clear()
            self._route_key = route.ensemble
        found: list[Fault] = []
        counts: dict[str, int] | None = None
        for name in route.models:
            try:
                if not self._server.model_ready(name):
                    found.append(Fault(name, "not_ready", "Triton reports it not ready"))
                    continue
                expected = self._expected_stubs(name)
            except TritonError as exc:  # unloaded meanwhile, or the server is stopping
                found.append(Fault(name, "not_ready", f"Triton: {exc}"))
                continue
            if expected:
                counts = self._server.stub_counts() if counts is None else counts
                live = counts.get(name, 0)
                if live < expected:
                    found.append(Fault(name, "stub_died", f"{live} of {expected} stub process(es) running"))
        return found
