"""A real publisher process for crash tests: streams detections for N cameras and reports each one that
publish_detections() returned for (i.e. durable in the spool) as ``durable <camera> <seq>`` on stdout.

    python mqtt_child_publisher.py CONFIG_JSON SPOOL_PATH --cameras 4 --start-seq 0 --rate 50

The tests SIGKILL it; it never stops on its own unless --count is given.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from appliance.detections import Detections
from appliance.mqtt.config import MqttConfig
from appliance.mqtt.messages import DetectionsMessage, ModelInfo
from appliance.mqtt.publisher import MqttPublisher


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("config_json")
    parser.add_argument("spool")
    parser.add_argument("--cameras", type=int, default=4)
    parser.add_argument("--start-seq", type=int, default=0)
    parser.add_argument("--count", type=int, default=0, help="frames per camera; 0: until killed")
    parser.add_argument("--rate", type=float, default=50.0, help="frames per second per camera")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="child %(levelname)s %(name)s: %(message)s")
    config = MqttConfig.model_validate(json.loads(args.config_json))
    publisher = MqttPublisher(config, Path(args.spool))
    publisher.start()
    print("started", flush=True)
    if publisher.wait_connected(2.0):
        print("connected", flush=True)
    model = ModelInfo("yolov3-tiny", "1", "sha256:" + "cd" * 32)
    seq = args.start_seq
    period = 1.0 / args.rate
    next_t = time.monotonic()
    while args.count == 0 or seq < args.start_seq + args.count:
        for cam in range(args.cameras):
            msg = DetectionsMessage(camera_id=f"cam{cam}", seq=seq, capture_time=time.time(), model=model,
                                    image_width=640, image_height=480,
                                    detections=Detections.untracked([(1.0, 2.0, 30.0, 40.0)], [0.9], [0],
                                                                    ("person",)),
                                    latency_ms={"queue": 1.0, "inference": 11.0, "total": 12.0})
            publisher.publish_detections(msg)
            print(f"durable cam{cam} {seq}", flush=True)
        seq += 1
        next_t += period
        time.sleep(max(0.0, next_t - time.monotonic()))
    publisher.wait_idle(30)
    publisher.stop()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
