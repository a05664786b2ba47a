"""Warm-up on the real embedded Triton and the real YOLOv3-tiny pipeline: ``TritonSwitcher.load`` sends the
planned inferences through the new ensemble before it returns, so traffic (``route``) only ever moves to a warm
model: at start (``OtaManager.start_serving``) and after a model reload (``TritonReloader``). Counted with
Triton's model statistics, never timed (the cold/warm latencies: ``appliance bench warmup``). Triton updates a
model's statistics just after it answers, so a count is waited for; at the moment traffic moves, the warm-up
shows as inferences already counted (none without it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.wait import wait_until

from appliance.detector.repository.materialize import RepositoryOptions
from appliance.detector.serving.errors import LoadFailed
from appliance.detector.serving.probe import ModelProbe
from appliance.detector.serving.reload import TritonReloader
from appliance.detector.serving.router import Route, Router
from appliance.detector.serving.switcher import ModelSpec, TritonSwitcher
from appliance.detector.serving.warmup import FrameShape, WarmupPlan
from appliance.ota.manager import OtaManager
from appliance.ota.signing import TrustedKeys

OPTIONS = RepositoryOptions(preprocess_instances=1, intra_op_threads=1)
PLAN = WarmupPlan(frames=2, shapes=(FrameShape(480, 640, "BGR"), FrameShape(240, 320, "RGB")), concurrency=3)
PLANNED = 2 * 2 * (1 + 3)  # rounds x shapes x (one alone + three at once)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(live_server: tuple[Any, Path], base_spec: ModelSpec) -> tuple[Any, Path, ModelSpec]:
    return (*live_server, base_spec)


def _inferences(server: Any, model: str) -> int:
    return int(server.model_statistics(model)["model_stats"][0]["inference_count"])


def _settles_at(server: Any, model: str, count: int) -> None:
    wait_until(lambda: _inferences(server, model) >= count, timeout_s=10, message=f"{count} inferences of {model}")
    assert _inferences(server, model) == count


class RecordingRouter(Router):
    """A real router that notes, when traffic moves to an ensemble, how many inferences that ensemble has had."""

    def __init__(self, server: Any) -> None:
        super().__init__()
        self.server = server
        self.switched_at: list[tuple[str, int]] = []

    def set(self, route: Route) -> Route | None:
        self.switched_at.append((route.ensemble, _inferences(self.server, route.ensemble)))
        return super().set(route)


def _version(spec: ModelSpec, version: str) -> ModelSpec:
    return dataclasses.replace(spec, version=version)


def test_load_warms_every_frame_shape_before_it_returns_and_routes_nothing(served) -> None:
    server, repo, base = served
    router = Router()
    switcher = TritonSwitcher(server, repo, router, options=OPTIONS, warmup=PLAN)
    route = switcher.load(_version(base, "1"))
    try:
        assert router.current() is None  # loading never moves traffic
        assert _inferences(server, route.ensemble) > 0  # already when load returns
        _settles_at(server, route.ensemble, PLANNED)
        detector = next(m for m in route.models if m.endswith("detector"))
        _settles_at(server, detector, PLANNED)  # every frame went all the way through
    finally:
        switcher.retire(route)


def test_no_warmup_frames_means_no_inference(served) -> None:
    server, repo, base = served
    switcher = TritonSwitcher(server, repo, Router(), options=OPTIONS, warmup=WarmupPlan(frames=0))
    route = switcher.load(_version(base, "2"))
    try:
        assert _inferences(server, route.ensemble) == 0
        server.infer(route.ensemble, {"IMAGE": np.zeros((48, 64, 3), np.uint8)}, timeout_s=60)
        _settles_at(server, route.ensemble, 1)  # the count would show a warm-up: it counts
    finally:
        switcher.retire(route)


def test_start_serving_moves_traffic_only_to_a_warmed_up_model(served, tmp_path: Path) -> None:
    server, repo, base = served
    router = RecordingRouter(server)
    switcher = TritonSwitcher(server, repo, router, options=OPTIONS, warmup=PLAN)
    manager = OtaManager(tmp_path / "state", TrustedKeys.from_paths([]), switcher, base_spec=lambda: base)
    route = manager.start_serving()
    try:
        [(ensemble, counted)] = router.switched_at
        assert ensemble == route.ensemble and counted > 0  # the new model had inferences before traffic moved
        _settles_at(server, route.ensemble, PLANNED)  # all of them warm-up: nothing else was sent
    finally:
        Router.set(router, Route("nothing", (), "nothing", None, ()))
        switcher.retire(route)


def test_a_model_that_cannot_take_the_camera_frames_is_load_failed_and_unloaded(served) -> None:
    server, repo, base = served
    small = base.profile.model_copy(update={"limits": base.profile.limits.model_copy(update={"max_width": 320})})
    switcher = TritonSwitcher(server, repo, Router(), options=OPTIONS,
                              warmup=WarmupPlan(frames=1, shapes=(FrameShape(480, 640),)))
    with pytest.raises(LoadFailed) as info:
        switcher.load(dataclasses.replace(base, version="3", profile=small))
    assert info.value.message.startswith("yolov3-tiny@3 loaded but does not serve: warm-up inference of a "
                                         "640x480 BGR frame failed: ")
    assert not [p.name for p in repo.iterdir() if p.name.startswith("ota-3-")]
    assert not [m["name"] for m in server.model_index(ready_only=True) if m["name"].startswith("ota-3-")]


def test_a_reload_warms_the_route_up_before_frames_flow_again(served) -> None:
    server, repo, base = served
    router = Router()
    switcher = TritonSwitcher(server, repo, router, options=OPTIONS, warmup=PLAN)
    route = switcher.load(_version(base, "4"))
    switcher.route(route)
    try:
        detector = next(m for m in route.models if m.endswith("detector"))  # not reloaded: its count goes on
        _settles_at(server, detector, PLANNED)
        reload = TritonReloader(server, ModelProbe(server), router.current, switcher.model_control,
                                warm=switcher.warm)
        preprocess = next(m for m in route.models if m.endswith("preprocess"))
        reload(route, [preprocess])
        assert _inferences(server, detector) > PLANNED  # already when the reload returns
        _settles_at(server, detector, 2 * PLANNED)
    finally:
        router.set(Route("nothing", (), "nothing", None, ()))
        switcher.retire(route)
