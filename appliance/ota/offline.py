"""The switcher OTA uses while the appliance is stopped (``appliance ota install``): it serves nothing.
The running appliance uses ``appliance.detector.serving.switcher.TritonSwitcher``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from appliance.detections import RawDetections
from appliance.detector.serving.router import HealthSample, Route, Router
from appliance.detector.serving.switcher import ModelSpec, prefix_for
from appliance.ota.errors import OtaRejected


class OfflineSwitcher:
    """No server: load() only describes the route; detect() runs the plain pipeline (ONNX Runtime) on the
    built engine; route() just remembers. For ``appliance ota install`` while the appliance is stopped."""

    def __init__(self, router: Router | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.router = router or Router(clock=clock)
        self._runners: dict[str, Any] = {}

    def current(self) -> Route | None:
        return self.router.current()

    def load(self, spec: ModelSpec) -> Route:
        from appliance.detector.engines.builders.ort import reference_session

        if spec.profile is None:  # the base model, when only the pointer moves (offline rollback)
            return Route("detect", (), "base", None, ())
        route = Route(f"{prefix_for(spec.version)}detect", (), spec.profile.name, spec.version,
                      tuple(spec.profile.classes), spec.engine.key)
        if spec.engine.triton_kind == "onnxruntime":
            self._runners[route.ensemble] = (spec.profile, reference_session(Path(spec.engine.engine_path)),
                                             spec.engine.in_graph)
        return route

    def detect(self, route: Route, frame: np.ndarray) -> RawDetections:
        from appliance.detector.prepost.pipeline import Postprocessor, Preprocessor

        if route.ensemble not in self._runners:
            raise OtaRejected("golden_mismatch", f"{route.label}: golden frames need ONNX Runtime offline "
                                                 "(TensorRT engines are checked by the running appliance)")
        profile, session, in_graph = self._runners[route.ensemble]
        if in_graph:  # the engine takes the letterboxed uint8 frame and answers final boxes, as the stages feed it
            canvas, lb = Preprocessor(profile).canvas(frame, "BGR")
            names = [o.name for o in session.get_outputs()]
            y = dict(zip(names, session.run(names, {session.get_inputs()[0].name: canvas[None]})))
            return Postprocessor(profile).final(y["BOXES"], y["SCORES"], y["CLASSES"], y["COUNT"], lb)
        tensor, lb = Preprocessor(profile).frame(frame, "BGR")
        raw = session.run(None, {session.get_inputs()[0].name: tensor.reshape(1, *tensor.shape[-3:])})[0]
        return Postprocessor(profile)(raw[0], lb)

    def route(self, route: Route) -> None:
        self.router.set(route)

    def retire(self, route: Route) -> None:
        self._runners.pop(route.ensemble, None)

    def health(self, route: Route, since: float, until: float | None = None) -> HealthSample:
        return self.router.stats(route.ensemble, since, until)
