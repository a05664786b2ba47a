"""``appliance bench mqtt``: sustained QoS 1 publish rate with the durable spool vs. plain paho, in one run.

Every alternative publishes the same detections payload to the same local broker and is timed from the first
publish to the last PUBACK (for the spool: until the spool is empty again). Last line: spool_msgs_per_s=<n>.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from appliance.bench._broker import start_local_broker
from appliance.detections import Detections
from appliance.harness.localbroker import LocalBroker
from appliance.helptext import plain_help
from appliance.mqtt.config import MqttConfig
from appliance.mqtt.messages import DetectionsMessage, ModelInfo, detections_payload, encode, new_message_id
from appliance.mqtt.numbering import MessageCounter
from appliance.mqtt.publisher import MqttPublisher
from appliance.mqtt.spool import Spool, SpoolRecord

CAMERAS = ("cam0", "cam1", "cam2", "cam3")
MODEL = ModelInfo("yolov3-tiny", "1", "sha256:" + "0f" * 32)


def _frame(camera: str, seq: int) -> DetectionsMessage:
    rows = range(5)
    dets = Detections.untracked([(10.0 * i, 20.0, 10.0 * i + 60, 200.0) for i in rows], [0.5 + i / 20 for i in rows],
                                [i % 80 for i in rows], ("person",) * 80)
    return DetectionsMessage(camera, seq, time.time(), MODEL, 1280, 720, dets,
                             {"queue": 3.1, "inference": 21.7, "total": 26.0})


def bench_plain_paho(host: str, port: int, payloads: list[tuple[str, bytes]], window: int,
                     frames: Optional[list[DetectionsMessage]] = None) -> float:
    """Plain paho at QoS 1, same in-flight window, nothing on disk: what the spool costs is measured against
    this. With ``frames``, each payload is built and encoded inside the timed loop, as the spool path does."""
    acked = 0
    done = threading.Event()
    connected = threading.Event()

    def on_publish(client: paho.Client, userdata: object, mid: int, reason: object, props: object) -> None:
        nonlocal acked
        acked += 1
        if acked == len(payloads):
            done.set()

    client = paho.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id="bench-plain")
    client.on_publish = on_publish
    client.on_connect = lambda *a: connected.set()
    client.max_inflight_messages_set(window)
    client.max_queued_messages_set(0)
    client.connect(host, port)
    client.loop_start()
    try:
        if not connected.wait(15):
            raise SystemExit("error: plain paho client could not connect")
        numbers = MessageCounter()  # the baseline numbers each message too, as the publisher does
        start = time.perf_counter()
        if frames is None:
            for topic, payload in payloads:
                client.publish(topic, payload, qos=1)
        else:
            for frame in frames:
                client.publish(f"bench/plain/{frame.camera_id}/detections",
                               encode(detections_payload(frame, "bench", new_message_id(),
                                                        numbers.next(frame.camera_id, frame.seq))), qos=1)
        if not done.wait(300):
            raise SystemExit(f"error: plain paho got {acked} of {len(payloads)} acks")
        return time.perf_counter() - start
    finally:
        client.disconnect()
        client.loop_stop()


def _config(host: str, port: int, window: int, synchronous: str) -> MqttConfig:
    return MqttConfig.model_validate({"host": host, "port": port, "device_id": "bench", "topic_prefix": "bench",
                                      "inflight_window": window, "spool": {"synchronous": synchronous},
                                      "client_id": f"bench-spool-{synchronous}", "clean_session": True,
                                      "health_interval_s": 3600})


def bench_spool_live(host: str, port: int, n: int, window: int, synchronous: str, workdir: Path,
                     producers: int) -> float:
    """MqttPublisher.publish_detections (durable before it returns) from ``producers`` camera threads, until
    every message is acknowledged and deleted from the spool."""
    publisher = MqttPublisher(_config(host, port, window, synchronous), workdir / f"live-{synchronous}.sqlite3")
    frames = [_frame(CAMERAS[i % len(CAMERAS)], i // len(CAMERAS)) for i in range(n)]
    publisher.start()
    try:
        if not publisher.wait_connected(15):
            raise SystemExit(f"error: publisher could not connect: {publisher.stats().last_error}")
        shares = [frames[i::producers] for i in range(producers)]
        start = time.perf_counter()
        threads = [threading.Thread(target=lambda s=s: [publisher.publish_detections(f) for f in s])
                   for s in shares]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if not publisher.wait_idle(300):
            raise SystemExit(f"error: spool did not drain: {publisher.stats()}")
        elapsed = time.perf_counter() - start
        stats = publisher.stats()
        if stats.acked != n:
            raise SystemExit(f"error: {stats.acked} of {n} acknowledged")
        return elapsed
    finally:
        publisher.stop()


def bench_spool_replay(host: str, port: int, n: int, window: int, workdir: Path) -> float:
    """A backlog of n messages left by an outage or crash, drained at start-up."""
    path = workdir / "replay.sqlite3"
    config = _config(host, port, window, "normal")
    spool = Spool(path, config.spool)
    spool.open()
    frames = [_frame(CAMERAS[i % len(CAMERAS)], i // len(CAMERAS)) for i in range(n)]
    numbers = MessageCounter()
    spool.append([SpoolRecord(f"bench/bench/{f.camera_id}/detections",
                              encode(detections_payload(f, "bench", f"{i:032x}", numbers.next(f.camera_id, f.seq))), 1)
                  for i, f in enumerate(frames)])
    spool.close()
    publisher = MqttPublisher(config, path)
    start = time.perf_counter()
    publisher.start()
    try:
        if not publisher.wait_idle(300):
            raise SystemExit(f"error: backlog did not drain: {publisher.stats()}")
        return time.perf_counter() - start
    finally:
        publisher.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="appliance bench mqtt", description=plain_help(__doc__))
    parser.add_argument("--messages", type=int, default=20000, help="messages per alternative (default 20000)")
    parser.add_argument("--quick", action="store_true", help="3000 messages per alternative")
    parser.add_argument("--window", type=int, default=100, help="in-flight window for every alternative")
    parser.add_argument("--producers", type=int, default=1, help="camera threads calling publish_detections")
    parser.add_argument("--host", help="use this broker instead of starting a local mosquitto")
    parser.add_argument("--port", type=int, default=1883)
    args = parser.parse_args(argv)
    n = 3000 if args.quick else args.messages
    # Connect/stop lines from every run would bury the table; warnings and errors still show.
    logging.getLogger("appliance.mqtt").setLevel(logging.WARNING)
    n_full = max(1, n // 4)
    if n < 1 or args.window < 1 or args.producers < 1:
        parser.error("--messages, --window and --producers must be >= 1")

    with tempfile.TemporaryDirectory(prefix="bench-mqtt-") as tmp:
        workdir = Path(tmp)
        broker: Optional[LocalBroker] = None
        host, port = args.host, args.port
        if host is None:
            broker = start_local_broker(workdir)
            host, port = "127.0.0.1", broker.port
        try:
            frames = [_frame(CAMERAS[i % len(CAMERAS)], i // len(CAMERAS)) for i in range(n)]
            numbers = MessageCounter()
            payloads = [(f"bench/plain/{f.camera_id}/detections",
                         encode(detections_payload(f, "bench", f"{i:032x}", numbers.next(f.camera_id, f.seq))))
                        for i, f in enumerate(frames)]
            size = sum(len(p) for _, p in payloads) // n
            runs: list[tuple[str, Callable[[], float]]] = [
                # The baseline does the same work as the spool path (build and encode each payload) minus the
                # spool; the pre-encoded row is the raw client ceiling.
                ("plain paho QoS 1, no spool", lambda: bench_plain_paho(host, port, payloads, args.window, frames)),
                ("plain paho, payloads pre-encoded", lambda: bench_plain_paho(host, port, payloads, args.window)),
                ("spool QoS 1, synchronous=normal", lambda: bench_spool_live(host, port, n, args.window, "normal",
                                                                             workdir, args.producers)),
                # fsync per publish call is ~10x slower: a quarter of the messages keeps the run short.
                ("spool QoS 1, synchronous=full", lambda: bench_spool_live(host, port, n_full, args.window, "full",
                                                                           workdir, args.producers)),
                ("spool backlog replay at start", lambda: bench_spool_replay(host, port, n, args.window, workdir)),
            ]
            print(f"MQTT publish, {n} detections messages of ~{size} B, in-flight window {args.window}, "
                  f"{args.producers} producer thread(s), broker {host}:{port}")
            print("each row: first publish to last PUBACK; all but 'pre-encoded' build and encode every payload")
            print(f"{'alternative':<34}{'msgs':>8}{'seconds':>10}{'msgs/s':>10}{'vs paho':>9}")
            rates: dict[str, float] = {}
            for name, run in runs:
                count = n_full if "full" in name else n
                elapsed = run()
                rates[name] = count / elapsed
                ratio = rates[name] / rates[runs[0][0]]
                print(f"{name:<34}{count:>8}{elapsed:>10.2f}{rates[name]:>10.0f}{ratio:>9.2f}", flush=True)
        finally:
            if broker is not None:
                broker.stop()
    spool_rate = rates[runs[2][0]]
    print(f"spool_vs_plain_paho_ratio={spool_rate / rates[runs[0][0]]:.2f}")
    print(f"spool_msgs_per_s={spool_rate:.0f}")
    return 0
