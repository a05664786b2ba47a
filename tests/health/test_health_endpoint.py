"""Health: system readings from fixture /proc and /sys trees, and the real HTTP endpoint."""

from __future__ import annotations

import json
import logging
import socket
import threading
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.httpclient import get
from support.wait import wait_until

from appliance.health.metrics import ApplianceMetrics
from appliance.health.routes import health_routes
from appliance.health.system import SystemMonitor
from appliance.webserver.limits import Limits
from appliance.webserver.server import WebServer


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def jetson_root(tmp_path: Path) -> Path:
    """A slice of an Orin's /proc and /sys: two thermal zones and an INA3221 with two rails."""
    _write(tmp_path, "proc/stat", "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 50 0 50 350 50 0 0 0 0 0\n")
    _write(tmp_path, "proc/meminfo", "MemTotal:       32000000 kB\nMemAvailable:   20000000 kB\n")
    _write(tmp_path, "sys/class/thermal/thermal_zone0/type", "cpu-thermal\n")
    _write(tmp_path, "sys/class/thermal/thermal_zone0/temp", "48500\n")
    _write(tmp_path, "sys/class/thermal/thermal_zone1/type", "gpu-thermal\n")
    _write(tmp_path, "sys/class/thermal/thermal_zone1/temp", "51250\n")
    _write(tmp_path, "sys/class/hwmon/hwmon0/name", "nvme\n")
    _write(tmp_path, "sys/class/hwmon/hwmon1/name", "ina3221\n")
    _write(tmp_path, "sys/class/hwmon/hwmon1/in1_label", "VDD_IN\n")
    _write(tmp_path, "sys/class/hwmon/hwmon1/in1_input", "5000\n")
    _write(tmp_path, "sys/class/hwmon/hwmon1/curr1_input", "1200\n")
    _write(tmp_path, "sys/class/hwmon/hwmon1/in2_label", "VDD_CPU_GPU_CV\n")
    _write(tmp_path, "sys/class/hwmon/hwmon1/in2_input", "4800\n")
    _write(tmp_path, "sys/class/hwmon/hwmon1/curr2_input", "500\n")
    return tmp_path


def test_system_monitor_reads_jetson_thermal_power_memory_and_cpu(jetson_root: Path) -> None:
    monitor = SystemMonitor(jetson_root)
    first = monitor.read()
    assert first.cpu_percent is None  # no previous sample yet
    assert first.temperatures_c == {"cpu-thermal": 48.5, "gpu-thermal": 51.25}
    assert first.power_w == pytest.approx({"VDD_IN": 6.0, "VDD_CPU_GPU_CV": 2.4})
    assert (first.mem_total_bytes, first.mem_available_bytes) == (32000000 * 1024, 20000000 * 1024)
    # 1000 more jiffies, of which 250 idle+iowait -> 75 % busy
    _write(jetson_root, "proc/stat", "cpu  550 0 400 900 150 0 0 0 0 0\n")
    assert monitor.read().cpu_percent == pytest.approx(75.0)


def test_system_monitor_on_a_bare_root_reads_nothing_and_does_not_fail(tmp_path: Path) -> None:
    reading = SystemMonitor(tmp_path).read()
    assert reading.cpu_percent is None and reading.mem_total_bytes is None
    assert reading.temperatures_c == {} and reading.power_w == {}


def _get(url: str) -> tuple[int, str]:
    reply = get(url)
    return reply.status, reply.text


def test_endpoint_serves_our_metrics_and_triton_text_and_health_status(jetson_root: Path) -> None:
    metrics = ApplianceMetrics()
    metrics.record_system(SystemMonitor(jetson_root).read())
    metrics.camera_fps.labels(camera="line1").set(9.5)
    metrics.stage_latency.labels(stage="detector").observe(0.03)
    triton_text = "# HELP nv_inference_count x\n# TYPE nv_inference_count counter\nnv_inference_count{model=\"d\"} 7\n"
    state = {"ok": True}
    server = WebServer("127.0.0.1", 0, health_routes(lambda: metrics.render() + triton_text.encode(),
                                                     lambda: dict(state)))
    try:
        code, body = _get(f"http://127.0.0.1:{server.port}/metrics")
        assert code == 200
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(body) for s in family.samples}
        assert samples[("appliance_camera_frames_per_second", (("camera", "line1"),))] == 9.5
        assert samples[("appliance_temperature_celsius", (("zone", "gpu-thermal"),))] == 51.25
        assert samples[("appliance_stage_latency_seconds_count", (("stage", "detector"),))] == 1
        # Triton's counter comes through untouched (the parser names counter samples *_total)
        assert samples[("nv_inference_count_total", (("model", "d"),))] == 7
        assert _get(f"http://127.0.0.1:{server.port}/healthz") == (200, '{"ok": true}')
        state["ok"] = False
        assert _get(f"http://127.0.0.1:{server.port}/healthz")[0] == 503
        assert _get(f"http://127.0.0.1:{server.port}/nope")[0] == 404
    finally:
        server.close()


def test_a_failing_collector_gives_a_plain_500_the_detail_goes_to_the_log(caplog: pytest.LogCaptureFixture) -> None:
    calls = {"n": 0}

    def flaky() -> bytes:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("triton metrics unavailable at /opt/secret/path")
        return b"ok 1\n"

    server = WebServer("127.0.0.1", 0, health_routes(flaky, lambda: {"ok": True}))
    try:
        with caplog.at_level(logging.ERROR, logger="appliance.webserver.server"):
            assert _get(f"http://127.0.0.1:{server.port}/metrics") == (500, "internal error: see the appliance's log\n")
        assert _get(f"http://127.0.0.1:{server.port}/metrics") == (200, "ok 1\n")
    finally:
        server.close()
    assert "triton metrics unavailable at /opt/secret/path" in caplog.text  # with its traceback


def test_connections_past_the_limit_get_503_and_silent_ones_time_out() -> None:
    server = WebServer("127.0.0.1", 0, health_routes(lambda: b"", lambda: {"ok": True}),
                       limits=Limits(connections_total=2, head_timeout_s=0.5))
    silent = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(2)]
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as third:
            assert third.recv(100).startswith(b"HTTP/1.0 503")  # the two silent ones hold both slots
        for sock in silent:
            assert sock.recv(100) == b""  # the server hung up on them after its socket timeout
        assert _get(f"http://127.0.0.1:{server.port}/healthz") == (200, '{"ok": true}')  # their slots came back
    finally:
        for sock in silent:
            sock.close()
        server.close()


def test_a_taken_port_is_retried_until_it_is_free(caplog: pytest.LogCaptureFixture) -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    with caplog.at_level(logging.INFO, logger="appliance.webserver.server"):
        server = WebServer("127.0.0.1", port, health_routes(lambda: b"", lambda: {"ok": True}), retry_s=0.05)
        try:
            assert server.port is None
            assert f"cannot listen on 127.0.0.1:{port}" in caplog.text and "trying again every 0.05 s" in caplog.text
            blocker.close()
            wait_until(lambda: server.port == port, 10, 0.02, "the health server to take the freed port")
            assert _get(f"http://127.0.0.1:{port}/healthz") == (200, '{"ok": true}')
        finally:
            server.close()
    assert f"listening on 127.0.0.1:{port} now" in caplog.text


def test_closing_while_the_port_is_taken_stops_the_retries() -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        server = WebServer("127.0.0.1", blocker.getsockname()[1], health_routes(lambda: b"", lambda: {"ok": True}),
                           retry_s=0.05)
        server.close()
        assert server.port is None and not any(t.name == "health-bind" for t in threading.enumerate())


def test_metrics_registries_are_independent() -> None:
    a, b = ApplianceMetrics(), ApplianceMetrics()
    a.camera_fps.labels(camera="x").set(3)
    assert b"camera=\"x\"" in a.render() and b"camera=\"x\"" not in b.render()
    assert json.loads(json.dumps({"ok": True}))  # the health body is plain JSON
