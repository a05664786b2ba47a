"""Event clips through the real appliance: `appliance run` with a recording file camera (vtest's people walking,
re-encoded to H.264 as a camera sends it), the real detector, a real mosquitto, the health port, the CLI and a
real Chromium. One run checks:

- each event carries its planned clip, and a `clip` message (schema-valid) follows once the footage is written;
- GET /events/<id>.mp4 answers range requests; its first frame (ffprobe) is a keyframe at or before event time
  minus pre_capture, and it lasts to at least event time plus post_capture;
- the clip's frame that best matches the event's snapshot (the frame the detector saw) is the one at event time;
- two overlapping events' clips are larger together than the kept segments they were cut from;
- /metrics counts the clips and the footage; `appliance clips list|export` finds and writes them;
- the overview page's event list plays a clip in Chromium (readyState >= 2, currentTime advancing).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import cv2
import numpy as np
import pytest
from selenium.webdriver.common.by import By
from support.browser import chromium
from support.cli import run_appliance
from support.daemon import RunningDaemon
from support.engineseed import seed_state_dir
from support.httpclient import get
from support.mosquitto import Mosquitto
from support.ports import free_port
from support.schemas import validate_message
from support.subscriber import Subscriber
from support.wait import wait_until

REPO = Path(__file__).resolve().parents[2]
VTEST = REPO / ".models" / "vtest" / "vtest.avi"
PRE = POST = 2.0
FPS = 5

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("detector_onnx")]


def _camera_video(tmp_path: Path) -> Path:
    """40 s of vtest at 5 fps as H.264 with a keyframe every second."""
    path = tmp_path / "hall.mp4"
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", str(VTEST), "-t", "40", "-r", str(FPS),
                    "-c:v", "libx264", "-preset", "ultrafast", "-g", str(FPS), "-pix_fmt", "yuv420p", str(path)],
                   check=True, timeout=120)
    return path


def _config(tmp_path: Path, video: Path, broker: Mosquitto, shm_root: Path, device: str, port: int) -> Path:
    path = tmp_path / "appliance.yaml"
    path.write_text(f"""
device: {{id: {device}}}
paths: {{state_dir: {tmp_path / 'state'}, shm_root: {shm_root}}}
cameras:
  - id: hall
    source: {{type: file, path: {video}, loop: true, realtime: true}}
    width: 768
    height: 576
    record: {{enabled: true, pre_capture_s: {PRE}, post_capture_s: {POST}, segment_s: 1, min_free_gb: 0}}
    analytics:
      classes: {{person: 0.3}}
      zones:
        - {{name: floor, units: normalized, points: [[0, 0.55], [1, 0.55], [1, 1], [0, 1]]}}
      snapshots: {{max_width: 768, jpeg_quality: 95, keep: 500}}
mqtt: {{host: 127.0.0.1, port: {broker.port}}}
health: {{port: {port}}}
""")
    return path


def _frames(path: Path) -> tuple[list[np.ndarray], bool]:
    """The clip's frames, and whether ffprobe says the first is a keyframe."""
    probe = json.loads(subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v", "-show_entries",
                                       "frame=key_frame", "-of", "json", str(path)],
                                      capture_output=True, text=True, check=True, timeout=60).stdout)
    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    return frames, probe["frames"][0]["key_frame"] == 1


def _duration(path: Path) -> float:
    out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", str(path)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return float(out)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, engine_seed: Path):
    """The appliance after clips of a few events are complete: (tmp, port, config, events, clips, subscriber)."""
    from support.shm import private_shm_dir

    tmp = tmp_path_factory.mktemp("clips")
    shm = private_shm_dir()
    broker = Mosquitto(tmp / "broker").start()
    device, port = f"cl{uuid.uuid4().hex[:6]}", free_port()
    config = _config(tmp, _camera_video(tmp), broker, next(shm), device, port)
    seed_state_dir(tmp / "state", engine_seed)
    subscriber = Subscriber(broker, f"appliance/{device}/#")
    daemon = RunningDaemon(tmp, config, REPO)
    try:
        assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
        daemon.wait(lambda: len([c for c in subscriber.of_type("clip") if c["status"] == "complete"]) >= 3, 180,
                    "three complete clips")
        yield tmp, port, config, daemon, subscriber
        assert daemon.terminate() == 0, daemon.tail()
    finally:
        daemon.close()
        subscriber.close()
        broker.stop()
        next(shm, None)


def _pairs(subscriber: Subscriber) -> list[tuple[dict, dict]]:
    events = {e["event_id"]: e for e in subscriber.of_type("event")}
    clips = {c["event_id"]: c for c in subscriber.of_type("clip") if c["status"] == "complete"}
    return [(events[i], clips[i]) for i in clips if i in events]


def test_events_get_clips_that_cover_pre_and_post_capture_and_show_the_event_frame(run) -> None:
    tmp, port, _config_path, _daemon, subscriber = run
    pairs = _pairs(subscriber)
    assert len(pairs) >= 3
    for event, clip in pairs:
        validate_message("event", event)
        validate_message("clip", clip)
        assert event["clip"]["url"] == clip["url"] == f"/events/{event['event_id']}.mp4"
        assert event["clip"]["start_ms"] == event["capture_time_ms"] - PRE * 1000
    event, clip = pairs[0]
    ranged = get(f"http://127.0.0.1:{port}{clip['url']}", headers={"Range": "bytes=0-99"}, timeout=30)
    part = ranged.body
    assert ranged.status == 206 and len(part) == 100 and ranged.headers["content-range"].startswith("bytes 0-99/")
    whole = get(f"http://127.0.0.1:{port}{clip['url']}", timeout=30)
    body = whole.body
    assert whole.status == 200 and whole.headers["content-type"] == "video/mp4" and body.startswith(part)
    path = tmp / "event.mp4"
    path.write_bytes(body)
    frames, keyframe_first = _frames(path)
    assert keyframe_first and len(frames) == clip["frames"]
    assert clip["start_ms"] <= event["capture_time_ms"] - PRE * 1000
    assert clip["start_ms"] + _duration(path) * 1000 >= event["capture_time_ms"] + POST * 1000 - 1000 / FPS
    jpeg = get(f"http://127.0.0.1:{port}/events/{event['event_id']}.jpg", timeout=30, expect=200).body
    snapshot = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    scores = [cv2.PSNR(frame, snapshot) for frame in frames]
    expected = (event["capture_time_ms"] - clip["start_ms"]) / 1000 * FPS
    assert abs(int(np.argmax(scores)) - expected) <= 1.5, (int(np.argmax(scores)), expected, max(scores))


def test_overlapping_events_share_footage_and_metrics_and_cli_see_the_clips(run) -> None:
    tmp, port, config, _daemon, subscriber = run
    pairs = sorted(_pairs(subscriber), key=lambda p: p[0]["capture_time_ms"])
    a, b = next((x, y) for x, y in zip(pairs, pairs[1:]) if y[0]["capture_time_ms"] - x[0]["capture_time_ms"] < 3000)
    sizes = [len(get(f"http://127.0.0.1:{port}{p[1]['url']}", timeout=30, expect=200).body) for p in (a, b)]
    union = [f for f in (tmp / "state" / "recordings" / "hall").glob("[0-9]*-[0-9]*.mp4")
             if int(f.stem.split("-")[1]) > a[1]["start_ms"] and int(f.stem.split("-")[0]) < b[1]["end_ms"]]
    assert union and sum(f.stat().st_size for f in union) < sum(sizes)

    def counted() -> bool:  # the keeper reports every two seconds
        metrics = get(f"http://127.0.0.1:{port}/metrics", timeout=30, expect=200).text
        written = [float(line.split()[-1]) for line in metrics.splitlines()
                   if line.startswith('appliance_clips_written_total{camera="hall"}')]
        return bool(written) and written[0] >= 3 and 'appliance_recording{camera="hall"} 1.0' in metrics

    wait_until(counted, 30, 0.5, "the clip metrics")
    listed = run_appliance("clips", "list", "--config", str(config), "--json")
    assert {a[0]["event_id"], b[0]["event_id"]} <= {e["event_id"] for e in json.loads(listed.stdout)}
    out = tmp / "export.mp4"
    run_appliance("clips", "export", a[0]["event_id"], "--config", str(config), "-o", str(out))
    assert len(_frames(out)[0]) == a[1]["frames"]


def test_the_overview_page_plays_a_clip_in_chromium(run) -> None:
    _tmp, port, _config_path, _daemon, subscriber = run
    event_id = _pairs(subscriber)[0][0]["event_id"]
    browser = chromium()
    try:
        browser.get(f"http://127.0.0.1:{port}/")
        button = f'li[data-event="{event_id}"] .play-clip'
        wait_until(lambda: browser.execute_script(f"return !!document.querySelector('{button}')"), 30, 0.2,
                   "the event's play button")
        browser.find_element(By.CSS_SELECTOR, button).click()  # a real click: the page plays on a user's gesture
        video = f'li[data-event="{event_id}"] video'
        wait_until(lambda: browser.execute_script(f"const v = document.querySelector('{video}');"
                                                  "return v && v.readyState >= 2"), 30, 0.2, "the clip to load")
        state = f"const v = document.querySelector('{video}'); return [v.currentTime, v.paused, v.ended, v.duration]"
        first = browser.execute_script(state)
        try:
            wait_until(lambda: browser.execute_script(state)[0] > first[0] + 0.3, 30, 0.2, "the clip to play")
        except AssertionError as failed:
            raise AssertionError(f"{failed}: (currentTime, paused, ended, duration) went from {first} to "
                                 f"{browser.execute_script(state)}") from None
    finally:
        browser.quit()
