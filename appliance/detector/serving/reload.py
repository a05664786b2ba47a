"""Reload the broken models of the served route through Triton's explicit model control, and check the result."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, Callable, Sequence

from appliance.detector.serving.errors import RouteChanged
from appliance.detector.serving.probe import ModelProbe
from appliance.detector.serving.router import Route


class TritonReloader:
    """``reload(route, models)`` for ``PipelineRecovery``: the steps first, then the ensemble when it is not
    ready (unloading a step takes its ensemble down with it); raises unless the probe finds the route whole.

    ``model_control`` is the switcher's lock (``TritonSwitcher.model_control``): held for the whole reload, so an
    OTA switch cannot retire the route between the check that it is still routed and the reload (which would
    load a retired model back). ``warm`` (the switcher's ``TritonSwitcher.warm``) runs warm-up inferences through
    the reloaded route before frames flow again; a failed warm-up fails the reload."""

    def __init__(self, server: Any, probe: ModelProbe, current: Callable[[], Route | None],
                 model_control: AbstractContextManager | None = None,
                 warm: Callable[[Route], object] | None = None) -> None:
        self._server = server  # appliance.triton.Server
        self._probe = probe
        self._current = current
        self._model_control = model_control if model_control is not None else nullcontext()
        self._warm = warm

    def __call__(self, route: Route, models: Sequence[str]) -> None:
        with self._model_control:
            self._reload(route, models)

    def _reload(self, route: Route, models: Sequence[str]) -> None:
        for name in route.models:
            if name == route.ensemble or name not in models:
                continue
            self._check_current(route)
            self._server.reload_model(name)  # also when Triton still calls it READY: its stub may be dead
        self._check_current(route)
        if route.ensemble in models or not self._server.model_ready(route.ensemble):
            self._server.load_model(route.ensemble)
        left = self._probe.faults(route)
        if left:
            raise RuntimeError("still broken after the reload: " + "; ".join(f"{f.model}: {f.detail}" for f in left))
        if self._warm is not None:
            self._warm(route)

    def _check_current(self, route: Route) -> None:
        current = self._current()
        if current is None or current.ensemble != route.ensemble:
            raise RouteChanged(f"{current.label if current else 'nothing'} is routed now, not {route.label}")
