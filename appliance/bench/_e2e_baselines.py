"""The two alternatives ``appliance bench e2e`` measures the appliance against, on the sample video's frames.

- detector alone: ONNX Runtime in a plain loop on preprocessed tensors, batch 1 (the upper bound).
- naive design: one loop, OpenCV decodes, the client preprocesses, ``tritonclient`` sends the tensor over HTTP
  to a separate ``tritonserver`` process, the client decodes + NMS and publishes JSON at QoS 1 with paho.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import numpy as np

from appliance.bench._e2e_subscriber import Received, subscriber, wait_for
from appliance.paths import engines_dir, profiles_dir

PROFILE = profiles_dir() / "yolov3-tiny.yaml"


def video_frames(video: Path, every: int = 1) -> list[np.ndarray]:
    import cv2

    cap = cv2.VideoCapture(str(video))
    frames, i = [], 0
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        if i % every == 0:
            frames.append(frame)
        i += 1
    cap.release()
    if not frames:
        raise SystemExit(f"error: no frames could be read from {video}")
    return frames


def _session(onnx: Path):
    import onnxruntime as ort

    opts = ort.SessionOptions()  # the appliance's detector setting (appliance.detector.repository: ort_spinning off)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(onnx), opts, providers=["CPUExecutionProvider"])


def bench_detector(onnx: Path, tensors: list[np.ndarray], seconds: float, pace_fps: float | None = None
                   ) -> tuple[float, float]:
    """Frames/s and p50 ms of ONNX Runtime alone on preprocessed tensors; ``pace_fps`` sleeps between frames."""
    session = _session(onnx)
    name = session.get_inputs()[0].name
    session.run(None, {name: tensors[0][None]})
    times: list[float] = []
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end:
        t = time.perf_counter()
        session.run(None, {name: tensors[i % len(tensors)][None]})
        times.append(time.perf_counter() - t)
        i += 1
        if pace_fps:
            time.sleep(max(0.0, 1.0 / pace_fps - times[-1]))
    return len(times) / sum(times), statistics.median(times) * 1000


def bench_naive(repo, dist, video: Path, port: int, seconds: float, workdir: Path) -> tuple[float, list[float]]:
    """The naive design's results/s and capture→subscriber latencies."""
    import cv2
    import paho.mqtt.client as paho
    import tritonclient.http as httpclient

    from appliance.bench.triton import BinaryServer
    from appliance.detector.prepost.pipeline import Postprocessor, Preprocessor
    from appliance.detector.profile import load_profile

    profile = load_profile(PROFILE)
    pre, post = Preprocessor(profile), Postprocessor(profile)
    binary = BinaryServer(dist.server_binary, dist.backend_dir, repo.path, workdir / "tritonserver.log",
                          model=repo.detector)
    received = Received()
    sub = subscriber(port, "bench/naive/#", received)
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="bench-naive")
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        binary.wait_ready(timeout=180)
        http = httpclient.InferenceServerClient(f"127.0.0.1:{binary.http}")
        cap = cv2.VideoCapture(str(video))

        def one(seq: int) -> None:
            ok, frame = cap.read()
            if not ok:  # loop the video like the cameras do
                cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
                ok, frame = cap.read()
            captured_ms = int(time.time() * 1000)
            tensor, letterbox = pre.frame(frame, "BGR")
            inp = httpclient.InferInput("INPUT", [1, *tensor.shape], "FP32")
            inp.set_data_from_numpy(tensor[None], binary_data=True)
            raw = http.infer(repo.detector, [inp]).as_numpy("OUTPUT")
            found = post(raw[0], letterbox)
            payload = json.dumps({"seq": seq, "capture_time_ms": captured_ms, "detections": [
                {"class_id": int(c), "score": float(s), "box": [float(v) for v in b]}
                for b, s, c in zip(found.boxes, found.scores, found.class_ids)]})
            client.publish("bench/naive/cam0/detections", payload, qos=1)

        for seq in range(5):  # warm-up
            one(seq)
        time.sleep(0.5)
        start_count = received.count()
        start, seq = time.perf_counter(), 5
        while time.perf_counter() - start < seconds:
            one(seq)
            seq += 1
        elapsed = time.perf_counter() - start
        sent = seq - 5
        wait_for(lambda: received.count() - start_count >= sent, 10)
        http.close()
        cap.release()
        return sent / elapsed, received.since(start_count)
    finally:
        client.loop_stop()
        client.disconnect()
        sub.loop_stop()
        sub.disconnect()
        binary.close()


def python_stages_engines(workdir: Path) -> Path:
    """A copy of the engine profiles with ``in_graph: false``: the appliance with the Python pre/post stages."""
    out = workdir / "engines-python-stages"
    out.mkdir()
    for profile in sorted(engines_dir().glob("*.yaml")):
        (out / profile.name).write_text(profile.read_text() + "\nin_graph: false\n")
    return out
