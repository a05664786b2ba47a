"""A model reload and an OTA switch never interleave: both hold the switcher's model-control lock, so a reload
that waited for a switch finds its route retired and leaves Triton alone (it would load a retired model back)."""

from __future__ import annotations

import threading
from pathlib import Path

from appliance.detector.serving.errors import RouteChanged
from appliance.detector.serving.reload import TritonReloader
from appliance.detector.serving.router import Route, Router
from appliance.detector.serving.switcher import TritonSwitcher


class ModelControlLog:
    """Records the Triton model-control calls it receives (the race is about their order, not their effect)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def reload_model(self, name: str) -> None:
        self.calls.append(("reload", name))

    def load_model(self, name: str) -> None:
        self.calls.append(("load", name))

    def model_ready(self, name: str) -> bool:
        return True

    def unload_model(self, name: str, wait: bool = True, timeout: float = 60.0) -> None:
        self.calls.append(("unload", name))


class NoFaults:
    def faults(self, route: Route) -> list:
        return []


def _route(version: str) -> Route:
    prefix = f"ota-{version}-"
    models = tuple(prefix + m for m in ("preprocess", "detector", "postprocess", "detect"))
    return Route(prefix + "detect", models, "yolov3-tiny", version, ("person",), "key")


def test_a_reload_waiting_for_an_ota_switch_finds_its_route_retired_and_touches_nothing(tmp_path: Path) -> None:
    old, new = _route("1"), _route("2")
    server = ModelControlLog()
    router = Router(old)
    switcher = TritonSwitcher(server, tmp_path, router)
    reloader = TritonReloader(server, NoFaults(), router.current, switcher.model_control)
    outcome: list[BaseException | None] = []

    with switcher.model_control:  # the OTA switch is under way: routes the new version, unloads the old
        thread = threading.Thread(target=lambda: outcome.append(_run(reloader, old)))
        thread.start()
        thread.join(0.5)
        assert thread.is_alive(), "the reload did not wait for the switch"
        switcher.route(new)
        switcher.retire(old)
    thread.join(10)
    assert isinstance(outcome[0], RouteChanged)
    assert all(kind == "unload" for kind, _ in server.calls), server.calls  # no reload of a retired model


def test_a_reload_of_the_routed_version_goes_ahead(tmp_path: Path) -> None:
    route = _route("1")
    server = ModelControlLog()
    router = Router(route)
    control = TritonSwitcher(server, tmp_path, router).model_control
    reloader = TritonReloader(server, NoFaults(), router.current, control)
    reloader(route, ["ota-1-detector"])
    assert server.calls == [("reload", "ota-1-detector")]


def _run(reloader: TritonReloader, route: Route) -> BaseException | None:
    try:
        reloader(route, list(route.models))
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        return exc
    return None

