"""A real edge node process for the SIGKILL tests: EdgeNode with two cameras whose fps changes every sample; cam1 is
away for samples 20 to 29 (its DDEATH, then its DBIRTH again). Prints ``up <bdSeq>`` once its NBIRTH is out; runs
until killed.

    python sparkplug_child_node.py CONFIG_JSON STATE_DIR
"""

from __future__ import annotations

import itertools
import json
import logging
import sys
import time
from pathlib import Path

from appliance.mqtt.config import MqttConfig
from appliance.sparkplug.node import EdgeNode
from appliance.sparkplug.payload import DataType
from appliance.sparkplug.reports import Readings


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="child %(levelname)s %(name)s: %(message)s")
    config = MqttConfig.model_validate(json.loads(sys.argv[1]))
    ticks = itertools.count()

    def readings() -> Readings:
        tick = next(ticks)
        fps = float(tick % 30)
        cameras = ("cam0",) if 20 <= tick < 30 else ("cam0", "cam1")
        return Readings(node={"Model/Version": (DataType.String, "base"), "Inference/Rate": (DataType.Double, fps),
                              "Inference/Latency p50 ms": (DataType.Double, None)},
                        devices={cam: {"State": (DataType.String, "streaming"), "Capture/FPS": (DataType.Double, fps),
                                       "Capture/Frames": (DataType.Int64, tick)} for cam in cameras})

    node = EdgeNode(config, readings, Path(sys.argv[2])).start()
    if not node.wait_connected(30):
        print("never connected", flush=True)
        return 1
    print(f"up {node.bd_seq}", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
