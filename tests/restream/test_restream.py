"""The restream's parts, driven directly: the one drawing function (zones, lines with counts, boxes), and the real
RTSP server with real ffmpeg clients: nothing drawn or sent while nobody watches, one encoder shared by two
clients of a stream, stopped when they leave. The whole appliance restreaming: tests/web/test_web_page.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import ValidationError
from support.ports import free_port
from support.rtspclients import frames_of, start_grab
from support.wait import wait_until

from appliance.analytics.draw import BOX_BGR, LINE_BGR, ZONE_BGR, DrawnBox, DrawnLine, DrawnZone, Scene, draw_scene
from appliance.detections import Detections
from appliance.mqtt.messages import DetectionsMessage, ModelInfo
from appliance.restream.config import RestreamConfig
from appliance.restream.server import RestreamServer
from appliance.restream.tap import Restream

WIDTH, HEIGHT = 320, 240


def test_the_scene_is_drawn_where_its_frame_pixels_say() -> None:
    scene = Scene(boxes=[DrawnBox((40, 50, 120, 200), 7, "person", 0.9)],
                  zones=[DrawnZone("front", [(200, 120), (300, 120), (300, 230), (200, 230)], 2)],
                  lines=[DrawnLine("door", (160, 20), (160, 220), {"in": 3, "out": 1})])
    image = draw_scene(np.zeros((HEIGHT, WIDTH, 3), np.uint8), scene)
    assert tuple(image[100, 40]) == BOX_BGR and tuple(image[50, 80]) == BOX_BGR  # left and top edges
    assert tuple(image[110, 160]) == LINE_BGR or tuple(image[110, 159]) == LINE_BGR
    assert tuple(image[175, 300]) == ZONE_BGR or tuple(image[175, 299]) == ZONE_BGR
    assert image[150:190, 220:280].max() == 0  # inside the zone: not filled
    half = draw_scene(np.zeros((HEIGHT // 2, WIDTH // 2, 3), np.uint8), scene, scale=0.5)
    assert tuple(half[50, 20]) == BOX_BGR  # the same box on a picture half the size


def _message(seq: int) -> DetectionsMessage:
    detections = Detections(np.array([[40, 50, 120, 200]], np.float32), np.array([0.9], np.float32),
                            np.array([0]), class_names=("person",), track_ids=np.array([7]))
    return DetectionsMessage("hall", seq, 1_700_000_000.0, ModelInfo("m", "base", "sha256:" + "0" * 64),
                             WIDTH, HEIGHT, detections, {"queue": 1.0, "inference": 2.0, "total": 3.0})


@pytest.fixture
def restream() -> Iterator[Restream]:
    """The real RTSP server on loopback (no login), fed 10 gray frames a second as the frame path would."""
    server = RestreamServer(RestreamConfig(enabled=True, port=free_port(), fps=10), "127.0.0.1", ["hall"], None)
    tap, done = Restream(server.start(), {}), threading.Event()

    def feed() -> None:
        seq = 0
        while not done.wait(0.1):
            seq += 1
            if tap.wants("hall"):  # what the frame path asks before it copies a frame
                tap.offer("hall", np.full((HEIGHT, WIDTH, 3), 128, np.uint8), "bgr", _message(seq))

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        yield tap
    finally:
        done.set()
        feeder.join()
        tap.stop()


def test_unwatched_costs_nothing_and_two_clients_share_one_encoder(restream: Restream) -> None:
    server = restream.server
    time.sleep(1.0)  # ten frames offered to nobody
    assert server.watched == {} and restream.sent == 0 and server.encoders_started == 0
    url = f"rtsp://127.0.0.1:{server.port}/hall/annotated"
    first, second = start_grab(url, 20), start_grab(url, 20)
    frames = [frames_of(first, WIDTH, HEIGHT), frames_of(second, WIDTH, HEIGHT)]
    assert [len(f) for f in frames] == [20, 20]
    box_edge = frames[0][-1][100, 38:43].astype(int)  # the box's left edge, green over gray
    assert box_edge[:, 1].max() > 200 and box_edge[:, 2].min() < 60, box_edge
    assert server.encoders_started == 1  # the second client joined the first one's pipeline
    wait_until(lambda: server.watched == {}, 30, 0.1, "the encoder to stop once both clients left")
    sent = restream.sent
    time.sleep(0.5)  # five more
    assert restream.sent == sent


def test_the_documented_section_is_valid_and_unknown_keys_are_refused() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "restream.md").read_text()
    section = yaml.safe_load(doc.split("```yaml\n", 1)[1].split("```", 1)[0])["restream"]
    assert RestreamConfig.model_validate(section) == RestreamConfig(enabled=True)
    with pytest.raises(ValidationError):
        RestreamConfig.model_validate({**section, "bitrate": 2000})  # the key is bitrate_kbps
