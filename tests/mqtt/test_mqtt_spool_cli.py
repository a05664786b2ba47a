"""`appliance spool list|requeue`: an operator puts messages the broker refused back in the queue, and the next
publisher on that spool delivers them to a real broker."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from mqtt_helpers import make_config
from support.cli import run_appliance
from support.mosquitto import Mosquitto

from appliance.mqtt.config import SpoolConfig
from appliance.mqtt.publisher import MqttPublisher
from appliance.mqtt.spool import Spool, SpoolRecord

TOPIC = "plant/dev1/cam0/detections"


def _config(tmp_path: Path, broker: Mosquitto) -> Path:
    path = tmp_path / "appliance.yaml"
    path.write_text(f"""
device: {{id: dev1}}
paths: {{state_dir: {tmp_path / 'state'}}}
cameras:
  - id: cam0
    source: {{type: file, path: {tmp_path / 'video.mp4'}}}
    width: 640
    height: 480
mqtt: {{host: {broker.host}, port: {broker.port}, topic_prefix: plant}}
""")
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_appliance("spool", *args, expect=None)


def _spool_with_one_set_aside(path: Path) -> None:
    spool = Spool(path, SpoolConfig())
    spool.open()
    spool.append([SpoolRecord(TOPIC, json.dumps({"seq": i}).encode(), 1) for i in range(3)])
    assert spool.set_aside(2, "broker closed the connection 5 times in a row")
    spool.close()


def test_list_then_requeue_and_the_next_publisher_delivers_it(tmp_path: Path, broker: Mosquitto,
                                                               subscriber_factory: Any) -> None:
    config = _config(tmp_path, broker)
    spool_path = tmp_path / "state" / "mqtt-spool.sqlite3"
    _spool_with_one_set_aside(spool_path)

    listed = _cli("list", "--config", str(config), "--payload")
    assert listed.returncode == 0, listed.stderr
    (line,) = listed.stdout.splitlines()
    assert line.startswith("2\t") and TOPIC in line and "closed the connection" in line and '{"seq": 1}' in line

    requeued = _cli("requeue", "--config", str(config), "--id", "2")
    assert requeued.returncode == 0 and "requeued 1 message(s)" in requeued.stdout, requeued.stderr
    assert _cli("list", "--config", str(config)).stdout == ""

    sub = subscriber_factory(broker, [TOPIC])
    publisher = MqttPublisher(make_config(broker), spool_path)
    publisher.start()
    try:
        assert sub.wait_for(lambda ms: len(ms) >= 3), [m.payload for m in sub.messages]
    finally:
        publisher.stop()
    assert [json.loads(m.payload)["seq"] for m in sub.on_topic("detections")] == [0, 2, 1]  # requeued: at the end


def test_requeue_refused_list_read_while_the_appliance_holds_the_spool_and_unknown_ids(tmp_path: Path,
                                                                                       broker: Mosquitto) -> None:
    config = _config(tmp_path, broker)
    spool_path = tmp_path / "state" / "mqtt-spool.sqlite3"
    assert "no spool at" in _cli("list", "--config", str(config)).stderr
    _spool_with_one_set_aside(spool_path)

    unknown = _cli("requeue", "--config", str(config), "--id", "99")
    assert unknown.returncode == 1 and "no set-aside message with id 99" in unknown.stderr

    running = Spool(spool_path, SpoolConfig())  # what the running appliance holds
    running.open()
    try:
        busy = _cli("requeue", "--config", str(config))
        assert busy.returncode == 1 and "stop the appliance first" in busy.stderr
        assert "Traceback" not in busy.stderr
        assert running.set_aside(3, "a second one, set aside while it runs")  # committed by the holder
        beside = _cli("list", "--config", str(config))  # list reads beside the running appliance
        assert beside.returncode == 0, beside.stderr
        assert [line.split("\t")[0] for line in beside.stdout.splitlines()] == ["2", "3"], beside.stdout
    finally:
        running.close()
    assert [m.id for m in _still_set_aside(spool_path)] == [2, 3]  # nothing moved


def test_a_broken_config_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("device: {id: dev1}\ncameras: []\nmqtt: {host: h}\n")
    result = _cli("list", "--config", str(bad))
    assert result.returncode == 2 and f"{bad}:2: cameras" in result.stderr


def _still_set_aside(path: Path) -> list:
    spool = Spool(path, SpoolConfig())
    spool.open()
    try:
        return spool.set_aside_messages()
    finally:
        spool.close()


def test_a_relative_spool_path_is_found_under_the_state_directory(tmp_path: Path, broker: Mosquitto) -> None:
    config = _config(tmp_path, broker)
    config.write_text(config.read_text().replace("topic_prefix: plant}", "topic_prefix: plant, spool: {path: q/s.db}}"))
    _spool_with_one_set_aside(tmp_path / "state" / "q" / "s.db")  # where the daemon puts it (MqttConfig.spool_path)
    listed = _cli("list", "--config", str(config))
    assert listed.returncode == 0 and listed.stdout.startswith("2\t"), listed.stderr


def test_list_as_json_says_what_the_text_list_says(tmp_path: Path, broker: Mosquitto) -> None:
    config = _config(tmp_path, broker)
    _spool_with_one_set_aside(tmp_path / "state" / "mqtt-spool.sqlite3")
    (line,) = _cli("list", "--config", str(config)).stdout.splitlines()
    listed = _cli("list", "--config", str(config), "--payload", "--json")
    assert listed.returncode == 0, listed.stderr
    (message,) = json.loads(listed.stdout)
    assert line.split("\t") == [str(message["id"]), message["set_at"], message["topic"], f"{message['bytes']} bytes",
                                message["reason"]]
    assert message["id"] == 2 and json.loads(message["payload"]) == {"seq": 1}
