"""Model recovery against the real embedded Triton and the real YOLOv3-tiny pipeline (Python-backend stubs),
driven the way the supervisor's tick drives it: ModelProbe -> PipelineRecovery -> TritonReloader.

Served is an OTA version ("2": every model name carries the ``ota-2-`` prefix), routed and the base retired as
an update does, so recovery must reload the names being served now, not the base model's."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Iterator

import cv2
import pytest
from support.engineseed import seed_state_dir
from support.processes import stubs_serving

from appliance.backoff import RestartPolicy
from appliance.detector.serving.probe import ModelProbe, fault_from_error
from appliance.detector.serving.recovery import PipelineRecovery, PipelineState
from appliance.detector.serving.reload import TritonReloader
from appliance.detector.serving.router import Route, Router
from appliance.health.metrics import ApplianceMetrics
from appliance.triton.errors import TritonError

REPO = Path(__file__).resolve().parents[2]
DOG = Path("/usr/share/darknet/data/dog.jpg")

pytestmark = [
    pytest.mark.slow,
    # fails, not skips, without the detector or the darknet images (tests/conftest.py)
    pytest.mark.usefixtures("detector_onnx", "darknet_images"),
]


class Live:
    server: Any
    router: Router
    repo: Path


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, engine_seed: Path) -> Iterator[Live]:
    from support.triton import started_server

    from appliance.detector.engines import ensure_engines
    from appliance.detector.engines.devicerepo import PROFILES
    from appliance.detector.profile import load_profile
    from appliance.detector.repository.materialize import RepositoryOptions
    from appliance.detector.serving.switcher import ModelSpec, TritonSwitcher

    state = seed_state_dir(tmp_path_factory.mktemp("recovery") / "state", engine_seed)
    (engine,) = ensure_engines(REPO / "engines", state_dir=state, models_root=REPO / ".models",
                               builder="onnxruntime", models=["yolov3-tiny"])
    profile = load_profile(PROFILES / "yolov3-tiny.yaml")
    repo = state / "repository"
    repo.mkdir(parents=True)
    with started_server(repo, model_control="explicit", model_load_retries=0) as server:
        lv = Live()
        lv.server, lv.router, lv.repo = server, Router(), repo
        switcher = TritonSwitcher(server, repo, lv.router, options=RepositoryOptions(preprocess_instances=2))
        base = switcher.load(ModelSpec(None, profile, engine))
        switcher.route(base)
        v2 = switcher.load(ModelSpec("2", profile, engine))  # an update: load beside, route, retire the old
        switcher.route(v2)
        switcher.retire(base)
        yield lv


def _detect(server: Any, route: Route) -> set[str]:
    out = server.infer(route.ensemble, {"IMAGE": cv2.imread(str(DOG))}, ["BOXES", "SCORES", "CLASSES"],
                       timeout_s=30).outputs
    return {route.class_names[int(c)] for c in out["CLASSES"]}


def _recover(live: Live, metrics: ApplianceMetrics) -> tuple[PipelineRecovery, list[Any]]:
    """Tick until the pipeline serves again (bounded); returns the recovery and the faults the probe saw."""
    probe = ModelProbe(live.server)
    recovery = PipelineRecovery(TritonReloader(live.server, probe, live.router.current),
                                RestartPolicy(initial_backoff_s=0.2, max_backoff_s=1.0, max_restarts=5),
                                metrics=metrics)
    seen: list[Any] = []
    deadline = time.monotonic() + 120
    while True:
        route = live.router.current()
        assert route is not None
        faults = probe.faults(route)
        seen.extend(faults)
        recovery.step(route, faults)
        if seen and recovery.state is PipelineState.SERVING:
            return recovery, seen
        assert time.monotonic() < deadline, recovery.status()
        time.sleep(0.2)


def test_a_killed_stub_of_the_served_version_is_found_and_reloaded(live: Live) -> None:
    route = live.router.current()
    assert route is not None and route.ensemble == "ota-2-detect"
    assert "dog" in _detect(live.server, route)
    victims = stubs_serving("ota-2-detector", os.getpid())
    assert len(victims) == 1
    os.kill(victims[0], signal.SIGKILL)

    # Triton still calls it ready; requests fail, naming the instance whose stub is gone.
    assert live.server.model_ready("ota-2-detector")
    with pytest.raises(TritonError) as failed:
        _detect(live.server, route)
    fault = fault_from_error(failed.value, route)
    assert fault is not None and (fault.model, fault.kind) == ("ota-2-detector", "stub_died"), failed.value

    metrics = ApplianceMetrics()
    recovery, seen = _recover(live, metrics)
    assert {(f.model, f.kind) for f in seen} == {("ota-2-detector", "stub_died")}
    assert metrics.registry.get_sample_value("appliance_model_reloads_total",
                                             {"model": "ota-2-detector", "result": "ok"}) == 1
    assert recovery.status().reloads == 1
    assert "dog" in _detect(live.server, route)  # detections resume
    assert stubs_serving("ota-2-detector", os.getpid()) not in ([], victims)
    # Nothing of the retired base version came back.
    assert not [m for m in live.server.model_index(ready_only=True) if not m["name"].startswith("ota-2-")]


def test_an_unloaded_step_takes_its_ensemble_down_and_both_come_back(live: Live) -> None:
    route = live.router.current()
    assert route is not None
    live.server.unload_model("ota-2-postprocess")
    assert not live.server.model_ready("ota-2-detect")

    metrics = ApplianceMetrics()
    _recovery, seen = _recover(live, metrics)
    assert {(f.model, f.kind) for f in seen} == {("ota-2-postprocess", "not_ready"), ("ota-2-detect", "not_ready")}
    for model in ("ota-2-postprocess", "ota-2-detect"):
        assert metrics.registry.get_sample_value("appliance_model_reloads_total",
                                                 {"model": model, "result": "ok"}) == 1
    assert "dog" in _detect(live.server, route)
