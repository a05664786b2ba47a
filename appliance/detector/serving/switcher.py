"""The switch boundary: what a model update (OTA) or a rollback needs from whoever serves models.

``TritonSwitcher`` implements it over the embedded server (explicit model control): each version is
materialized under its own prefix into the live repository, loaded while the old one serves, routed to
atomically, and the old one is unloaded once its in-flight requests drained. Each loaded version is warmed up
(``warmup``: real inferences of the configured frame sizes) before ``load`` returns it, so no frame is routed to
a cold model. A version that cannot be loaded, or whose warm-up fails, raises ``LoadFailed``. Model recovery
(``appliance.detector.serving.reload``) shares its ``model_control`` lock.
(``appliance.ota.offline.OfflineSwitcher`` is the other implementation, for OTA while the daemon is stopped.)
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from appliance.detections import RawDetections
from appliance.detector.serving.errors import LoadFailed
from appliance.detector.serving.router import HealthSample, Route, Router
from appliance.detector.serving.warmup import FrameShape, WarmupPlan, WarmupResult, warm_up
from appliance.durable import sha256_file

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSpec:
    """A complete model version: its pre/post profile and its built engine
    (appliance.detector.engines.InstalledEngine)."""

    version: str | None
    profile: Any   # appliance.detector.profile.ModelProfile
    engine: Any    # appliance.detector.engines.InstalledEngine


class ModelSwitcher(Protocol):
    """What OTA drives: ``load`` raises ``ServingError`` (``LoadFailed``) when a version cannot be served."""

    def current(self) -> Route | None: ...
    def load(self, spec: ModelSpec) -> Route: ...
    def detect(self, route: Route, frame: np.ndarray) -> RawDetections: ...
    def route(self, route: Route) -> None: ...
    def retire(self, route: Route) -> None: ...
    def health(self, route: Route, since: float, until: float | None = None) -> HealthSample: ...


def _refuse_a_damaged_engine(spec: ModelSpec, engine_sha256: str) -> None:
    """Refuse an engine file that no longer matches its manifest before Triton sees it.

    Triton 2.51 can kill the process when it deletes a model whose instance failed to initialize (SIGSEGV in
    ``TritonModelInstance::TritonBackendThread::StopBackendThread`` on its model-deleter thread, seen in 2 of 17 looped
    runs of tests/ota/test_ota_serving_errors.py), so a file damaged on disk since its build must never reach it."""
    manifest_path = getattr(spec.engine, "manifest_path", None)
    if manifest_path is None or not Path(manifest_path).is_file():
        return
    try:
        expected = json.loads(Path(manifest_path).read_text()).get("engine_sha256")
    except (OSError, ValueError):
        expected = None
    if expected != engine_sha256:
        label = f"{spec.profile.name}@{spec.version or 'base'}"
        raise LoadFailed(f"cannot load {label}: the engine file {spec.engine.engine_path} does not match "
                         f"its manifest {manifest_path} (damaged since it was built); not handed to Triton")


def prefix_for(version: str | None) -> str:
    return "" if version is None else f"ota-{version}-"


class TritonSwitcher:
    def __init__(self, server: Any, repository_dir: Path, router: Router, *, options: Any = None,
                 drain_timeout_s: float = 30.0, unload_timeout_s: float = 60.0,
                 warmup: WarmupPlan | None = None) -> None:
        self.server = server
        self.repository_dir = Path(repository_dir)
        self.router = router
        self.options = options  # repository.materialize.RepositoryOptions (prefix is set per version)
        self.drain_timeout_s = drain_timeout_s
        self.unload_timeout_s = unload_timeout_s
        self.warmup = warmup if warmup is not None else WarmupPlan()
        self._inputs: dict[str, FrameShape] = {}  # ensemble -> its profile's input size (the default warm-up frame)
        # Held while the routed model changes or a route's models are unloaded. The supervisor's model recovery
        # (serving.reload) takes it too, so a reload never brings back a route being retired.
        self.model_control = threading.RLock()

    def current(self) -> Route | None:
        return self.router.current()

    def load(self, spec: ModelSpec) -> Route:
        from appliance.detector.engines.devicerepo import materialize_for_device
        from appliance.detector.repository.materialize import RepositoryOptions

        opts = (self.options or RepositoryOptions()).model_copy(update={"prefix": prefix_for(spec.version)})
        engine_sha256 = sha256_file(spec.engine.engine_path)
        _refuse_a_damaged_engine(spec, engine_sha256)
        repo = materialize_for_device(spec.engine, self.repository_dir, model_profile=spec.profile, options=opts)
        route = Route(repo.ensemble, tuple(repo.models), spec.profile.name, spec.version,
                      tuple(spec.profile.classes), spec.engine.key, "sha256:" + engine_sha256)
        try:
            # Loading the ensemble loads its steps once (loading the steps first made Triton load them twice).
            self.server.load_model(repo.ensemble)
            not_ready = [name for name in repo.models if not self.server.model_ready(name)]
            if not_ready:
                raise RuntimeError(f"not ready after loading: {not_ready}")
        except Exception as exc:
            self._unload(route, list(repo.models))
            raise LoadFailed(f"Triton could not load {route.label}: {exc}") from exc
        self._inputs[route.ensemble] = FrameShape(spec.profile.input.height, spec.profile.input.width)
        try:
            self.warm(route)
        except Exception as exc:
            self._unload(route, list(repo.models))
            raise LoadFailed(f"{route.label} loaded but does not serve: {exc}") from exc
        return route

    def warm(self, route: Route) -> WarmupResult:
        """Warm-up inferences through ``route`` (after ``load``, and after model recovery reloaded its models);
        raises ``WarmupFailed`` when one fails."""
        default = self._inputs.get(route.ensemble, FrameShape(416, 416))
        return warm_up(self.server, route.ensemble, self.warmup, default, route.label)

    def detect(self, route: Route, frame: np.ndarray) -> RawDetections:
        out = self.server.infer(route.ensemble, {"IMAGE": np.ascontiguousarray(frame)},
                                ["BOXES", "SCORES", "CLASSES"]).outputs
        return RawDetections(out["BOXES"], out["SCORES"], out["CLASSES"])

    def route(self, route: Route) -> None:
        with self.model_control:
            self.router.set(route)

    def retire(self, route: Route) -> None:
        if self.router.current() is not None and self.router.current().ensemble == route.ensemble:  # type: ignore[union-attr]
            raise ValueError(f"{route.label} is still routed; route another model first")
        if not self.router.wait_idle(route.ensemble, self.drain_timeout_s):
            log.warning("%s still has %d request(s) in flight after %.0f s; unloading anyway", route.label,
                        self.router.inflight(route.ensemble), self.drain_timeout_s)
        self._unload(route, list(route.models))

    def _unload(self, route: Route, names: list[str]) -> None:
        with self.model_control:
            for name in reversed(names):  # ensemble first: it holds the others
                try:
                    self.server.unload_model(name, wait=True, timeout=self.unload_timeout_s)
                except Exception as exc:
                    log.warning("unloading %s (%s) failed: %s", name, route.label, exc)
            for name in route.models:
                shutil.rmtree(self.repository_dir / name, ignore_errors=True)
            self._inputs.pop(route.ensemble, None)

    def health(self, route: Route, since: float, until: float | None = None) -> HealthSample:
        return self.router.stats(route.ensemble, since, until)

