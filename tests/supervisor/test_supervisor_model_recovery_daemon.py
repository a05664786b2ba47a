"""Model failures through the real daemon: `appliance run` as a process with the real detector, a real broker and
a camera playing real images. A Python-backend stub of the running appliance is SIGKILLed (found in /proc by
its parent pid and name); detections must resume after the reload, which the metrics count. Then a model that
cannot come back (its file corrupted in the appliance's materialized repository, its stub killed): the crash
loop must be reported (STATUS=, /healthz, `appliance status`, MQTT health), retried with backoff, and stop
feeding systemd's watchdog; once the file is fixed the next retry brings it back."""

from __future__ import annotations

import os
import re
import signal
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from support.cli import run_appliance
from support.daemon import IMAGES_IN_ORDER, RunningDaemon, make_camera_dir
from support.engineseed import seed_state_dir
from support.httpclient import get
from support.mosquitto import Mosquitto
from support.ports import free_port
from support.processes import stubs_serving
from support.subscriber import Subscriber
from support.wait import wait_until

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    # fails, not skips, without the detector or the darknet images (tests/conftest.py)
    pytest.mark.usefixtures("detector_onnx", "darknet_images"),
]


class Daemon(RunningDaemon):
    """`appliance run` with a notify socket, its health endpoint and its log (tests/support/daemon.py), and a
    subscriber on its topics."""

    def __init__(self, tmp_path: Path, broker: Mosquitto, shm_root: Path, engine_seed: Path, recovery: str,
                 stall_s: int = 20) -> None:
        camera_dir = make_camera_dir(tmp_path)
        self.device = f"rec{uuid.uuid4().hex[:6]}"
        self.port = free_port()
        self.state = tmp_path / "state"
        config = tmp_path / "appliance.yaml"
        config.write_text(f"""
device: {{id: {self.device}}}
paths:
  state_dir: {self.state}
  shm_root: {shm_root}
pipeline:
  watchdog_stall_s: {stall_s}
  recovery: {recovery}
cameras:
  - id: line1
    source: {{type: images, path: {camera_dir}, loop: true, realtime: true}}
    width: 640
    height: 480
    resize: true
    fps: 4
model:
  detector_instances: 1  # the test counts the detector's stubs; the automatic layout picks 2 on a slow host
mqtt:
  host: 127.0.0.1
  port: {broker.port}
health:
  port: {self.port}
""")
        seed_state_dir(self.state, engine_seed)
        self.subscriber = Subscriber(broker, f"appliance/{self.device}/#")
        super().__init__(tmp_path, config, REPO)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text()

    def wait(self, what: str, predicate: Callable[[], Any], timeout: float) -> Any:
        """``predicate``'s first truthy value; fail with the log's tail if the daemon exits or time runs out."""
        def alive_or_done() -> Any:
            value = predicate()
            assert value or self.process.poll() is None, f"the daemon exited waiting for {what}"
            return value

        try:
            return wait_until(alive_or_done, timeout, 0.2, what)
        except AssertionError as failed:
            raise AssertionError(f"{failed}:\n{self.log()[-4000:]}") from None

    def detections(self) -> list[dict]:
        return self.subscriber.of_type("detections")

    def healthz(self) -> tuple[int, dict]:
        reply = get(f"{self.url}/healthz")
        return reply.status, reply.json()

    def metric(self, name: str, **labels: str) -> float:
        text = get(f"{self.url}/metrics", expect=200).text
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            match = re.match(r"^([a-zA-Z_:]+)(?:\{(.*)\})? (\S+)$", line)
            if match and match.group(1) == name:
                got = ",".join(sorted(p for p in (match.group(2) or "").split(",") if p))
                if got == want:
                    return float(match.group(3))
        return 0.0

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=120)
        finally:
            self.close()

    def close(self) -> None:
        super().close()
        self.subscriber.close()


def _check_detection(message: dict) -> None:
    """Frame seq k shows IMAGES_IN_ORDER[(k - 1) % 3]: the detections must say so."""
    image, expected = IMAGES_IN_ORDER[(message["seq"] - 1) % 3]
    names = {d["class_name"] for d in message["detections"]}
    assert expected in names, f"frame {message['seq']} ({image}): expected a {expected}, got {names}"


def test_a_killed_stub_is_reloaded_and_detections_resume(tmp_path: Path, broker: Mosquitto, shm_root: Path,
                                                         engine_seed: Path) -> None:
    daemon = Daemon(tmp_path, broker, shm_root, engine_seed, "{backoff: {initial_s: 0.5, max_s: 5}}")
    try:
        assert daemon.notify.wait_for("READY=1", 240), daemon.log()[-3000:]
        daemon.wait("detections", lambda: len(daemon.detections()) >= 3, 120)
        victims = stubs_serving("detector", daemon.process.pid)
        assert len(victims) == 1, victims
        last_seq = max(m["seq"] for m in daemon.detections())
        os.kill(victims[0], signal.SIGKILL)

        daemon.wait("the reload", lambda: daemon.metric("appliance_model_reloads_total", model="detector",
                                                        result="ok") >= 1, 60)
        after = daemon.wait("detections after the reload",
                            lambda: [m for m in daemon.detections() if m["seq"] > last_seq + 8][:3], 120)
        for message in after:
            _check_detection(message)
        assert daemon.metric("appliance_model_failures_total", model="detector", reason="stub_died") >= 1
        assert daemon.metric("appliance_model_reloads_total", model="detector", result="failed") == 0
        assert daemon.metric("appliance_pipeline_state", state="serving") == 1
        code, health = daemon.wait("healthy again", lambda: (lambda r: r if r[0] == 200 else None)(daemon.healthz()),
                                   60)
        assert health["pipeline"]["state"] == "serving" and health["pipeline"]["reloads"] == 1
        new = stubs_serving("detector", daemon.process.pid)
        assert len(new) == 1 and new != victims
        log = daemon.log()
        assert "model failure: detector" in log and "detector reloaded (attempt 1" in log
        assert daemon.stop() == 0, daemon.log()[-3000:]
    finally:
        daemon.close()


def test_a_model_that_cannot_come_back_is_reported_as_a_crash_loop_with_backoff(
        tmp_path: Path, broker: Mosquitto, shm_root: Path, engine_seed: Path) -> None:
    daemon = Daemon(tmp_path, broker, shm_root, engine_seed,
                    "{backoff: {initial_s: 0.5, max_s: 2}, max_failures: 3, window_s: 600}", stall_s=2)
    try:
        assert daemon.notify.wait_for("READY=1", 240), daemon.log()[-3000:]
        daemon.wait("detections", lambda: len(daemon.detections()) >= 2, 120)
        onnx = daemon.state / "repository" / "detector" / "1" / "model.onnx"
        target = os.readlink(onnx)  # a link into the engine cache: replace the link, never the cached engine
        onnx.unlink()
        onnx.write_bytes(b"this is not an ONNX model")
        for pid in stubs_serving("detector", daemon.process.pid):
            os.kill(pid, signal.SIGKILL)

        status = daemon.wait("a crash loop on STATUS=", lambda: [
            f for f in daemon.notify.fields() if f.startswith("STATUS=") and "CRASH LOOP" in f], 120)
        assert "detector" in status[0]
        code, health = daemon.healthz()
        assert code == 503 and not health["ok"] and health["level"] == "failed"
        assert health["pipeline"]["state"] == "crash_loop" and health["pipeline"]["models"] == ["detector"]
        result = run_appliance("status", "--url", daemon.url, expect=None)
        assert result.returncode == 2 and result.stdout.startswith("CRITICAL: "), result.stdout + result.stderr
        assert re.search(r"^  pipeline +CRASH LOOP \(yolov3-tiny@base\): detector", result.stdout, re.M), result.stdout
        reported = daemon.wait("MQTT health saying so", lambda: [
            m for m in daemon.subscriber.of_type("health") if m["system"].get("pipeline_state") == "crash_loop"], 60)
        assert "detector" in reported[0]["system"]["pipeline_error"]

        # Retried with backoff: 0.5 s after the first failed reload, then every backoff.max_s (2 s), no faster. The
        # log has the first three of each line a minute (repeats are summarized), /healthz every attempt.
        daemon.wait("five reload attempts", lambda: daemon.healthz()[1]["pipeline"]["attempt"] >= 5, 120)
        delays = [float(d) for d in re.findall(r"reloading detector failed \(attempt \d+.*?next reload in ([\d.]+) s",
                                               daemon.log())]
        assert delays[:3] == [0.5, 2.0, 2.0], delays
        assert all(d == 2.0 for d in delays[2:]), delays
        assert daemon.log().count("crash loop:") == 1  # said once, with what to check; the retries are quieter
        assert daemon.metric("appliance_pipeline_state", state="crash_loop") == 1
        assert daemon.metric("appliance_model_reloads_total", model="detector", result="failed") >= 4
        assert daemon.metric("appliance_frames_dropped_total", camera="line1", reason="crash_loop") > 0

        # Broken for longer than watchdog_stall_s (2 s) by now: ticks go on (STATUS=) but never feed the watchdog.
        seen = len(daemon.notify.messages)
        daemon.wait("three more ticks",
                    lambda: sum(1 for m in daemon.notify.messages[seen:] if "STATUS=" in m) >= 3, 60)
        assert not [m for m in daemon.notify.messages[seen:] if "WATCHDOG=1" in m]

        # The cause is fixed: the next retry brings the model back and detections resume.
        last_seq = max(m["seq"] for m in daemon.detections())
        onnx.unlink()
        onnx.symlink_to(target)
        daemon.wait("the pipeline serving again",
                    lambda: daemon.metric("appliance_pipeline_state", state="serving"), 60)
        after = daemon.wait("detections after the fix",
                            lambda: [m for m in daemon.detections() if m["seq"] > last_seq + 8][:3], 120)
        for message in after:
            _check_detection(message)
        assert daemon.stop() == 0, daemon.log()[-3000:]
    finally:
        daemon.close()
