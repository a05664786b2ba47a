"""OTA maps the serving layer's refusals to its own rejections, with the codes and messages ota/status has
always shown: ``rejection_for`` alone, then through ``OtaManager.start_serving`` on the real embedded Triton
(the supervisor's start path: a version that cannot load falls back to the base model; a base model that cannot
load is a rejection the supervisor turns into a start-up error)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Iterator

import pytest
from ota_helpers import REPO  # noqa: E402
from support.engineseed import seed_state_dir  # noqa: E402
from support.otamanager import ota_manager  # noqa: E402
from support.provisioned import require_detector  # noqa: E402

from appliance.detector.serving.errors import SERVING_CODES, LoadFailed, RouteChanged, ServingError
from appliance.detector.serving.router import Router
from appliance.detector.serving.switcher import ModelSpec, TritonSwitcher
from appliance.ota.config import HealthPolicy, OtaConfig
from appliance.ota.errors import REJECT_CODES, OtaRejected, rejection_for
from appliance.ota.manager import OtaManager
from appliance.ota.offline import OfflineSwitcher


def test_a_load_failure_is_rejected_as_load_failed_with_its_message() -> None:
    rejected = rejection_for(LoadFailed("Triton could not load yolov3-tiny@2: failed to load 'ota-2-detector'"))
    assert rejected.code == "load_failed"
    assert rejected.reason == "Triton could not load yolov3-tiny@2: failed to load 'ota-2-detector'"
    assert str(rejected) == "load_failed: Triton could not load yolov3-tiny@2: failed to load 'ota-2-detector'"


def test_a_serving_code_ota_has_no_name_for_is_an_internal_rejection() -> None:
    rejected = rejection_for(RouteChanged("yolov3-tiny@3 is routed now, not yolov3-tiny@2"))
    assert rejected.code == "internal"
    assert rejected.reason == "unexpected RouteChanged: yolov3-tiny@3 is routed now, not yolov3-tiny@2"


def test_every_serving_code_becomes_a_known_rejection_code() -> None:
    for code in SERVING_CODES:
        assert rejection_for(ServingError(code, "x")).code in REJECT_CODES


class Live:
    server: Any
    repo: Path
    base: ModelSpec
    tmp: Path

    def manager(self, state: Path, base: ModelSpec, keys: Any) -> OtaManager:
        from appliance.detector.repository.materialize import RepositoryOptions

        switcher = TritonSwitcher(self.server, self.repo, Router(), options=RepositoryOptions(preprocess_instances=1))
        return ota_manager(state, keys.trusted(), switcher, base_spec=lambda: base, check_golden=False)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, engine_seed: Path) -> Iterator[Live]:
    require_detector()
    from support.triton import started_server

    from appliance.detector.engines import ensure_engines
    from appliance.detector.engines.devicerepo import PROFILES
    from appliance.detector.profile import load_profile

    lv = Live()
    lv.tmp = tmp_path_factory.mktemp("ota-serving-errors")
    seed_state_dir(lv.tmp / "engines", engine_seed)
    (engine,) = ensure_engines(REPO / "engines", state_dir=lv.tmp / "engines", models_root=REPO / ".models",
                               builder="onnxruntime", models=["yolov3-tiny"])
    lv.base = ModelSpec(None, load_profile(PROFILES / "yolov3-tiny.yaml"), engine)
    lv.repo = lv.tmp / "repository"
    lv.repo.mkdir()
    with started_server(lv.repo, model_control="explicit", model_load_retries=0) as server:
        lv.server = server
        yield lv


def _not_a_model(path: Path) -> Path:
    path.write_bytes(b"this is not an ONNX model")
    return path



@pytest.mark.slow
def test_a_base_model_triton_cannot_load_is_rejected_as_load_failed_at_start(live: Live, keys: Any) -> None:
    # Runs before the base model is loaded for real below: both use the live repository's unprefixed names.
    broken = dataclasses.replace(live.base, engine=dataclasses.replace(
        live.base.engine, engine_path=_not_a_model(live.tmp / "broken-base.onnx")))
    manager = live.manager(live.tmp / "state-broken-base", broken, keys)
    with pytest.raises(OtaRejected) as info:
        manager.start_serving()
    assert info.value.code == "load_failed"
    # Refused before Triton sees it (serving/switcher.py: Triton 2.51 can crash deleting a model that failed to load).
    assert info.value.reason.startswith("cannot load yolov3-tiny@base: the engine file ")
    assert "does not match its manifest" in info.value.reason
    assert isinstance(info.value.__cause__, LoadFailed)
    assert manager.switcher.current() is None


@pytest.mark.slow
def test_an_active_version_triton_cannot_load_falls_back_to_the_base_model(
        live: Live, keys: Any, sign: Any, tiny_source: Any, caplog: pytest.LogCaptureFixture) -> None:
    state = live.tmp / "state-fallback"
    offline = OtaManager(state, keys.trusted(), OfflineSwitcher(), config=OtaConfig(
        check_golden=False, builder="onnxruntime", health=HealthPolicy(period_s=0)))
    assert offline.install(sign(tiny_source("2")))["state"] == "active"
    _not_a_model(Path(offline.store.verified_record("2")["engine"]["engine_path"]))

    manager = live.manager(state, live.base, keys)
    with caplog.at_level(logging.ERROR, logger="appliance.ota"):
        route = manager.start_serving()
    assert route.version is None and manager.switcher.current() == route
    assert live.server.model_ready("detect")
    assert any(r.getMessage().startswith("OTA version 2 failed to load at start (load_failed: cannot load tiny@2: "
                                         "the engine file ") and r.getMessage().endswith("; serving the base model")
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert manager.store.read_pointer().version == "2"  # the pointer is left for the next start
