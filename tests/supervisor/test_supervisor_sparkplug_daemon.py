"""`appliance run` as a real process with ``mqtt.sparkplug`` set, the real detector and a real broker: the edge node
is born first, the demo camera becomes a device (DBIRTH) whose frames counter then rises in DDATA, the node's
NDATA names the served model once Triton serves it, and SIGTERM ends with the NDEATH of the NBIRTH's bdSeq.
Decoded with the spec's schema by google.protobuf (tests/support/sparkplug_b.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.daemon import RunningDaemon, device_of, make_camera_dir, write_config
from support.mosquitto import Mosquitto
from support.sparkplug_b import SparkplugSubscriber

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    # fails, not skips, without the detector or the darknet images (tests/conftest.py)
    pytest.mark.usefixtures("detector_onnx", "darknet_images"),
]


def test_the_daemon_is_an_edge_node_and_its_camera_a_device(tmp_path: Path, shm_root: Path,
                                                           broker: Mosquitto, engine_seed: Path) -> None:
    config = write_config(tmp_path, broker, shm_root, make_camera_dir(tmp_path), engine_seed=engine_seed)
    sparkplug = "mqtt:\n  sparkplug: {group_id: plant1, interval_s: 0.5}\n"
    config.write_text(config.read_text().replace("mqtt:\n", sparkplug))
    node = device_of(config)
    sub = SparkplugSubscriber(broker, "spBv1.0/plant1/#")
    daemon = RunningDaemon(tmp_path, config, REPO)
    try:
        assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
        daemon.wait(lambda: [m for m in sub.of("DDATA", "line1") if (m.metrics.get("Inference/Frames") or 0) >= 2],
                    120, "DDATA with inferred frames for line1")
        daemon.wait(lambda: [m for m in sub.of("NDATA") if m.metrics.get("Model/Name") == "yolov3-tiny"], 30,
                    "NDATA naming the served model")
        assert daemon.terminate() == 0, daemon.tail()
        sub.wait_for(lambda m: any(x.kind == "NDEATH" for x in m), message="NDEATH after SIGTERM")
    finally:
        daemon.close()
        sub.stop()
    msgs = sub.snapshot()
    assert sub.undecodable == []
    assert msgs[0].kind == "NBIRTH" and msgs[0].topic == f"spBv1.0/plant1/NBIRTH/{node}" and msgs[0].seq == 0
    bd_seq = msgs[0].metrics["bdSeq"]
    assert msgs[-1].kind == "NDEATH" and msgs[-1].metrics == {"bdSeq": bd_seq}
    for prev, m in zip(msgs[:-1], msgs[1:-1]):
        assert m.seq == (prev.seq + 1) % 256, (prev.topic, prev.seq, m.topic, m.seq)  # type: ignore[operator]
    first_dbirth = next(i for i, m in enumerate(msgs) if m.kind == "DBIRTH" and m.device == "line1")
    first_ddata = next(i for i, m in enumerate(msgs) if m.kind == "DDATA" and m.device == "line1")
    assert first_dbirth < first_ddata
    birth = msgs[first_dbirth].metrics
    assert {"State", "Capture/FPS", "Inference/Frames", "Inference/Errors"} <= set(birth)
    assert {m.name: m.datatype for m in msgs[first_dbirth].payload.metrics}["Inference/Frames"] == 4  # Int64
    frames = [m.metrics["Inference/Frames"] for m in sub.of("DDATA", "line1") if "Inference/Frames" in m.metrics]
    assert frames == sorted(frames)
