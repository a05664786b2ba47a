"""`appliance status` and the Grafana dashboard against a real running appliance: `appliance run` as a process
with a real broker, the real detector and a camera playing real images at 4 fps, its health endpoint on a real
port. Each fact the status shows is checked against evidence from the same run that does not come from the
summary: the detections a subscriber received, the daemon's log, the Prometheus histogram, a broker outage the
test causes, and an OTA install journal the test leaves as a power cut would."""

from __future__ import annotations

import json
import platform
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.cli import appliance_argv, appliance_env, run_appliance
from support.daemon import device_of, make_camera_dir, write_config
from support.httpclient import get
from support.mosquitto import Mosquitto
from support.ports import free_port
from support.promql import load_dashboard, unknown_metrics
from support.shm import private_shm_dir
from support.subscriber import Subscriber
from support.wait import wait_until

import appliance
from appliance.commands.status import fetch_health
from appliance.harness.notify import NotifySocket
from appliance.ota.status import OtaStatus
from appliance.ota.store import OtaStore
from appliance.triton.locate import TritonDistribution

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "docs" / "grafana" / "appliance.json"

pytestmark = [
    pytest.mark.slow,
    # fails, not skips, without the detector or the darknet images (tests/conftest.py)
    pytest.mark.usefixtures("detector_onnx", "darknet_images"),
]


@dataclass
class Running:
    url: str
    broker: Mosquitto
    daemon: subprocess.Popen
    log: Path
    subscriber: Subscriber
    state_dir: Path
    started: float  # time.monotonic() just before the daemon was started

    def log_tail(self) -> str:
        return self.log.read_text()[-3000:]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, engine_seed: Path) -> Iterator[Running]:
    """One daemon for the module's tests (a start costs a minute on a loaded host)."""
    tmp = tmp_path_factory.mktemp("status-live")
    shm = private_shm_dir("appliance-status", check_leaks=False)
    shm_root = next(shm)
    with Mosquitto(tmp / "broker") as broker:
        config = write_config(tmp, broker, shm_root, make_camera_dir(tmp), engine_seed=engine_seed)
        port = free_port()
        config.write_text(config.read_text().replace("health:\n  port: 0\n", f"health:\n  port: {port}\n"))
        # the journal of an install that a power cut stopped while building version 7 (written as OtaManager
        # does): the daemon reports it at start as rejected, code interrupted
        OtaStore(tmp / "state").write_journal(
            OtaStatus("building", "building", "7", "yolov3-tiny", percent=40.0, time=time.time()).to_dict())
        notify = NotifySocket(tmp / "notify.sock")
        subscriber = Subscriber(broker, f"appliance/{device_of(config)}/#")
        log = tmp / "daemon.log"
        started = time.monotonic()
        daemon = subprocess.Popen(appliance_argv("run", "--config", str(config)), stdout=log.open("w"),
                                  stderr=subprocess.STDOUT, cwd=REPO,
                                  env=appliance_env({"NOTIFY_SOCKET": str(notify.path)}))
        run = Running(f"http://127.0.0.1:{port}", broker, daemon, log, subscriber, tmp / "state", started)
        try:
            assert notify.wait_for("READY=1", 240), run.log_tail()
            wait_until(lambda: len(subscriber.of_type("detections")) >= 8 or daemon.poll() is not None, 120, 0.2,
                       "eight detections")
            assert daemon.poll() is None, run.log_tail()
            # A camera's fps is measured over one-second windows and read by the once-a-second tick: under load the
            # first reading can still be the 0 it starts at when eight frames are already through.
            wait_until(lambda: _summary(run)["cameras"]["line1"]["fps"] > 0, 30, 0.2, "a first fps reading")
            yield run
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=90) == 0, run.log_tail()
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
            subscriber.close()
            notify.close()
            next(shm, None)  # removes the shm directory


def _status(run: Running, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_appliance("status", "--url", run.url, *extra, expect=None)


def _summary(run: Running) -> dict[str, Any]:
    """What `appliance status --json` prints: the raw summary (the waits below read it straight, faster)."""
    return fetch_health(run.url)


_MOVING = ("status", "uptime_s", "cameras", "inference", "spool")  # change between two reads


def _metrics(run: Running) -> str:
    return get(f"{run.url}/metrics", expect=200).text


def _row(text: str, label: str) -> str:
    """The value of one labelled line of `appliance status` ("  latency    p50 ...")."""
    found = [line.split(None, 1)[1] for line in text.splitlines() if line.startswith(f"  {label} ")]
    assert len(found) == 1, (label, text)
    return found[0]


def _latency_bounds_ms(exposition: str) -> tuple[float, float, int]:
    """From the capture_to_result histogram: every latency observed so far is above the largest bucket bound
    that holds none of them, and at most the smallest bound that holds all; and how many there were."""
    buckets = sorted((float(s.labels["le"]), s.value) for f in text_string_to_metric_families(exposition)
                     for s in f.samples if s.name == "appliance_stage_latency_seconds_bucket"
                     and s.labels["stage"] == "capture_to_result")
    count = int(buckets[-1][1])
    lower = max([le for le, n in buckets if n == 0], default=0.0)
    upper = min(le for le, n in buckets if n == count)
    return lower * 1000, upper * 1000, count


def test_status_shows_each_fact_of_the_running_appliance(running: Running) -> None:
    received = running.subscriber.of_type("detections")
    before = time.monotonic()
    result = _status(running)
    assert result.returncode == 0, (result.stdout, result.stderr, running.log_tail())
    text = result.stdout
    raw = _status(running, "--json")
    summary = json.loads(raw.stdout)
    assert raw.returncode == 0 and summary == {**_summary(running), **{k: summary[k] for k in _MOVING}}
    exposition = _metrics(running)  # after the summary: its histogram holds every latency the summary saw
    print("\n" + text)

    # version and uptime: the package's version; up for no longer than the test has run the daemon
    assert summary["version"] == appliance.__version__
    assert 0 < summary["uptime_s"] <= time.monotonic() - running.started
    assert _row(text, "appliance").startswith(f"{appliance.__version__}, up ")
    # the served model and version: what the detections say served them
    served = {(m["model"]["name"], m["model"]["version"]) for m in received}
    assert served == {("yolov3-tiny", "base")}, served
    assert summary["served"] == {"model": "yolov3-tiny", "version": "base"}
    model_row = _row(text, "model")
    assert model_row.startswith("yolov3-tiny, version base; engine onnxruntime ")
    # the engine: built (the log says there was none for its key) or found in the cache; its key is the one of
    # the engine in the cache on disk
    log = running.log.read_text()
    assert ("built in" in model_row) == ("no engine for key" in log), (model_row, log[-3000:])
    cached = [p.name for p in (running.state_dir / "engines" / "yolov3-tiny").iterdir()]
    assert len(summary["engine"]["key"]) == 16 and any(n.startswith(summary["engine"]["key"]) for n in cached)
    # per camera: streaming at about the configured 4 fps; inferred at least what the subscriber received
    camera = summary["cameras"]["line1"]
    assert camera["state"] == "streaming" and 2.0 <= camera["fps"] <= 6.0, camera
    assert camera["inferred"] >= len(received)
    row = next(line for line in text.splitlines() if line.startswith("line1 "))
    cells = row.split()  # CAMERA STATE SIZE FPS INFERRED ...: read a moment before the JSON
    assert cells[:3] == ["line1", "streaming", "640x480"] and camera["size"] == "640x480", (row, camera)
    assert 2.0 <= float(cells[3]) <= 6.0 and int(cells[4]) >= len(received), row
    # the inference rate: frames over uptime, and no faster than the one camera delivers
    inference = summary["inference"]
    assert inference["inferred"] >= len(received)
    assert inference["per_s_since_start"] == pytest.approx(inference["inferred"] / summary["uptime_s"], rel=0.02)
    assert 0 < inference["per_s_since_start"] <= 6.0
    assert 0 < inference["per_s"] <= 6.0  # the 10 s window of a camera at its configured fps
    assert re.fullmatch(r"\d+\.\d/s over the last 10 s \(\d+\.\d/s since start\), \d+ frames", _row(text, "inference"))
    # latency p50 and p99: within what the Prometheus histogram observed in the same run
    latency = inference["latency_ms"]
    lower, upper, count = _latency_bounds_ms(exposition)
    assert len(received) <= latency["frames"] <= count
    assert lower - 0.1 <= latency["p50"] <= latency["p99"] <= upper + 0.1, (latency, lower, upper)
    assert re.fullmatch(r"p50 \d+ ms, p99 \d+ ms, capture to result \(newest \d+ frames\)", _row(text, "latency"))
    # OTA: the interrupted install this test left in the journal, reported by the daemon at start
    assert summary["ota"]["active"] is None
    assert (summary["ota"]["state"], summary["ota"]["code"], summary["ota"]["version"]) == \
        ("rejected", "interrupted", "7"), summary["ota"]
    assert _row(text, "ota").startswith("active base; last update 7: rejected (interrupted): ")
    assert time.monotonic() - before < 30  # the status answers promptly, even on a loaded host

    # the spool backlog: with the broker gone, detections wait on disk and the status says so; they drain after
    running.broker.stop()
    try:
        waiting = wait_until(lambda: (s := _summary(running))["spool"]["backlog"] >= 3 and s, 60, 0.5,
                             "detections to wait in the spool")
        assert waiting["spool"]["mqtt"] != "connected"
        spool_row = _row(_status(running).stdout, "spool")
        backlog = int(spool_row.split()[0])
        assert backlog >= waiting["spool"]["backlog"] and "mqtt CONNECT" in spool_row, spool_row
    finally:
        running.broker.start()
    wait_until(lambda: (spool := _summary(running)["spool"])["mqtt"] == "connected" and spool["backlog"] == 0,
               120, 0.5, "the spool to drain")
    # The camera keeps publishing, so a read can catch the newest message between spool and PUBACK (CI once saw
    # "1 message(s) waiting (1.5 KiB), ..., mqtt connected"): the command's own row must read empty, soon.
    wait_until(lambda: _row(_status(running).stdout, "spool").startswith("0 message(s) waiting (0 B)"), 60, 0.5,
               "appliance status to show the drained spool")
    assert running.daemon.poll() is None, running.log_tail()


def test_build_info_names_what_runs(running: Running, triton_distribution: TritonDistribution) -> None:
    info = [s.labels for f in text_string_to_metric_families(_metrics(running)) for s in f.samples
            if s.name == "appliance_build_info" and s.value == 1]
    assert info == [{"version": appliance.__version__, "python": platform.python_version(),
                     "triton_version": triton_distribution.version, "builder": "onnxruntime",
                     "triton_kind": "onnxruntime", "arch": platform.machine()}]


def test_every_dashboard_query_names_a_metric_of_the_real_metrics(running: Running) -> None:
    exposition = _metrics(running)
    assert "nv_inference_count" in exposition  # Triton's own metrics follow the appliance's
    dashboard = load_dashboard(DASHBOARD)
    assert unknown_metrics(dashboard, exposition) == []
    # the same check fails when a panel names a metric the appliance does not export
    dashboard["panels"][0]["targets"].append({"refId": "Z", "expr": "rate(appliance_camera_frames[5m])"})
    assert unknown_metrics(dashboard, exposition) == [
        f"panel {dashboard['panels'][0]['title']!r} target Z: appliance_camera_frames is not in /metrics "
        "(rate(appliance_camera_frames[5m]))"]
