"""The whole appliance versus the detector alone and a naive single-loop design, in one run.

``appliance bench appliance``:

- detector alone: ONNX Runtime on already preprocessed tensors, batch 1, as fast as it goes (the upper bound:
  no capture, no pre/post, no publishing);
- naive: one Python loop per process doing everything in turn, as integrators often start: decode the next
  camera frame, letterbox, ONNX Runtime, decode + NMS, publish JSON with paho at QoS 1 (no spool);
- appliance: the real thing (capture processes into shared memory, the scheduler, embedded Triton with the
  pre/post ensemble, the durable MQTT spool to a local broker), cameras offering more frames than the
  machine can infer, so the number is its capacity.

Throughput is results published per second, with cameras offering more frames than the machine can infer
(capacity). Latency is measured separately with one camera well below capacity, so it shows the pipeline's
overhead, not queueing: the p50 capture-to-result time minus the detector's own p50 compute time. Under
saturation a frame's latency is dominated by the frames in flight ahead of it, which ``pipeline.max_inflight``
bounds. Last line: ``appliance_vs_detector=<ratio>``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
IMAGES = Path("/usr/share/darknet/data")
IMAGE_NAMES = ("dog", "person", "horses", "kite", "eagle", "giraffe")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _broker(workdir: Path) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    conf = workdir / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    proc = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return proc, port


def _session(onnx: Path):
    import onnxruntime as ort

    return ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])


def bench_detector(onnx: Path, seconds: float) -> tuple[float, float]:
    """fps and p50 ms of the detector alone on a preprocessed tensor."""
    session = _session(onnx)
    name = session.get_inputs()[0].name
    tensor = np.random.default_rng(0).random((1, 3, 416, 416), dtype=np.float32)
    session.run(None, {name: tensor})
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        session.run(None, {name: tensor})
        times.append(time.perf_counter() - t)
    return len(times) / sum(times), statistics.median(times) * 1000


def bench_naive(onnx: Path, profile_path: Path, frames_dir: Path, port: int, seconds: float) -> float:
    """One loop: decode, letterbox, infer, decode+NMS, publish; results per second."""
    import paho.mqtt.client as paho

    from appliance.models.profile import load_profile
    from appliance.processing.pipeline import Postprocessor, Preprocessor  # what the ensemble's stages run

    profile = load_profile(profile_path)
    pre, post, session = Preprocessor(profile), Postprocessor(profile), _session(onnx)
    input_name = session.get_inputs()[0].name
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="bench-naive")
    client.connect("127.0.0.1", port)
    client.loop_start()
    paths = sorted(frames_dir.glob("*.jpg"))
    done, i = 0, 0
    end = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        frame = cv2.resize(cv2.imread(str(paths[i % len(paths)])), (640, 480))
        tensor, letterbox = pre.frame(frame, "BGR")
        raw = session.run(None, {input_name: tensor[None]})[0]
        found = post(raw[0], letterbox)
        payload = json.dumps({"seq": i, "detections": [
            {"class_id": int(c), "score": float(s), "box": [float(v) for v in b]}
            for b, s, c in zip(found.boxes, found.scores, found.class_ids)]})
        client.publish("bench/naive", payload, qos=1).wait_for_publish(10)
        done += 1
        i += 1
    elapsed = time.perf_counter() - start
    client.loop_stop()
    client.disconnect()
    return done / elapsed


def bench_appliance(workdir: Path, frames_dir: Path, port: int, cameras: int, fps: float,
                    seconds: float) -> tuple[float, float]:
    """Results per second and p50 capture-to-result ms of the real appliance."""
    from appliance.config.app import AppConfig
    from appliance.config.validate import load_config
    from appliance.supervisor.app import Appliance

    shm_root = Path("/dev/shm") / f"appliance-bench-{os.getpid()}"
    shm_root.mkdir(exist_ok=True)
    cams = "".join(f"""
  - id: cam{n}
    source: {{type: images, path: {frames_dir}, loop: true, realtime: true}}
    width: 640
    height: 480
    resize: true
    fps: {fps}
""" for n in range(cameras))
    config_path = workdir / "bench.yaml"
    config_path.write_text(f"""
device: {{id: bench}}
paths: {{state_dir: {workdir / 'state'}, shm_root: {shm_root}}}
cameras:{cams}
mqtt: {{host: 127.0.0.1, port: {port}}}
health: {{enabled: false}}
""")
    app = Appliance(load_config(config_path, AppConfig))
    try:
        app.start()
        time.sleep(3)  # warm-up: models, first batches
        before = sum(s.submitted - s.errors - s.inflight for s in app.scheduler.cameras())
        latencies_before = len(app.latencies_ms)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            app.tick()
            time.sleep(0.5)
        elapsed = time.perf_counter() - t0
        after = sum(s.submitted - s.errors - s.inflight for s in app.scheduler.cameras())
        latencies = list(app.latencies_ms)[latencies_before:]
    finally:
        app.stop()
        shutil.rmtree(shm_root, ignore_errors=True)
    return (after - before) / elapsed, statistics.median(latencies) if latencies else float("nan")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="appliance bench appliance", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring time per alternative")
    parser.add_argument("--cameras", type=int, default=4)
    parser.add_argument("--fps", type=float, default=8.0,
                        help="frames each camera offers per second (together just above what 2 cores infer)")
    parser.add_argument("--latency-fps", type=float, default=4.0, help="the one camera's rate in the latency run")
    parser.add_argument("--quick", action="store_true", help="8 s per alternative")
    args = parser.parse_args(argv)
    seconds = 8.0 if args.quick else args.seconds
    onnx = ROOT / ".models/yolov3-tiny/model.onnx"
    profile = ROOT / "repository/profiles/yolov3-tiny.yaml"
    if not onnx.exists():
        raise SystemExit(f"error: {onnx} is missing; run scripts/setup.sh")
    with tempfile.TemporaryDirectory(prefix="bench-appliance-") as tmp:
        workdir = Path(tmp)
        frames_dir = workdir / "frames"
        frames_dir.mkdir()
        for name in IMAGE_NAMES:
            shutil.copy(IMAGES / f"{name}.jpg", frames_dir / f"{name}.jpg")
        broker, port = _broker(workdir)
        try:
            det_fps, det_p50 = bench_detector(onnx, seconds)
            naive_fps = bench_naive(onnx, profile, frames_dir, port, seconds)
            app_fps, saturated_p50 = bench_appliance(workdir, frames_dir, port, args.cameras, args.fps, seconds)
            _, app_p50 = bench_appliance(workdir, frames_dir, port, 1, args.latency_fps, seconds)
        finally:
            broker.terminate()
            broker.wait()
    print(f"{'alternative':<58}{'results/s':>10}{'p50 ms':>9}")
    print(f"{'detector alone (ONNX Runtime, preprocessed tensor, batch 1)':<58}{det_fps:>10.1f}{det_p50:>9.1f}")
    print(f"{'naive loop (decode, letterbox, infer, NMS, publish QoS 1)':<58}{naive_fps:>10.1f}{'':>9}")
    label = f"appliance ({args.cameras} cameras x {args.fps:g} fps offered, end to end)"
    print(f"{label:<58}{app_fps:>10.1f}{saturated_p50:>9.1f}")
    label = f"appliance (1 camera x {args.latency_fps:g} fps, below capacity)"
    print(f"{label:<58}{'':>10}{app_p50:>9.1f}")
    print(f"appliance_vs_naive={app_fps / naive_fps:.2f}")
    print(f"latency_overhead_p50_ms={app_p50 - det_p50:.1f}")
    print(f"appliance_vs_detector={app_fps / det_fps:.2f}")
    return 0
