"""The page's logins and its live picture, without a browser: scrypt hashes, expiring sessions, loopback
without a login; frames copied only while someone watches, at most ``fps`` a second."""

from __future__ import annotations

import json

import cv2
import numpy as np

from appliance.detections import Detections
from appliance.mqtt.messages import DetectionsMessage, ModelInfo
from appliance.web.auth import Auth, check_password, hash_password, is_loopback
from appliance.web.config import UserConfig
from appliance.web.live import LiveFrames, encode


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_passwords_are_stored_as_salted_scrypt_hashes() -> None:
    first, second = hash_password("s3cret"), hash_password("s3cret")
    assert first.startswith("scrypt$") and first != second and "s3cret" not in first  # salted
    assert check_password("s3cret", first) and check_password("s3cret", second)
    assert not check_password("S3cret", first) and not check_password("s3cret", "plain")


def test_a_session_expires_and_a_viewer_may_not_edit() -> None:
    clock = Clock()
    users = {"olga": UserConfig(name="olga", role="operator", password_hash=hash_password("pw-o")),
             "victor": UserConfig(name="victor", role="viewer", password_hash=hash_password("pw-v"))}
    auth = Auth(users, open_access=False, session_s=60, clock=clock)
    assert auth.login("olga", "wrong") is None and auth.login("nobody", "pw-o") is None
    assert auth.session(None) is None and auth.session("made-up") is None
    found = auth.login("olga", "pw-o")
    assert found is not None
    token, session = found
    assert auth.session(token) == session and session.can_edit and len(session.csrf) >= 32
    viewer = auth.login("victor", "pw-v")
    assert viewer is not None and not viewer[1].can_edit
    clock.now += 61
    assert auth.session(token) is None  # expired


def test_loopback_needs_no_login_anything_else_does() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.20")
    local = Auth({}, open_access=True, session_s=60).session(None)
    assert local is not None and local.can_edit


def _message(seq: int) -> DetectionsMessage:
    detections = Detections(np.array([[10, 20, 50, 90]], np.float32), np.array([0.9], np.float32),
                            np.array([0]), class_names=("person",), track_ids=np.array([7]))
    model = ModelInfo("m", "base", "sha256:" + "0" * 64)
    return DetectionsMessage("hall", seq, 1_700_000_000.0, model, 160, 120, detections,
                             {"queue": 1.0, "inference": 2.0, "total": 3.0})


def test_frames_are_copied_only_while_watched_and_at_most_fps() -> None:
    clock = Clock()
    live = LiveFrames(fps=5, linger_s=3, clock=clock)
    assert not live.wants("hall")  # nobody watches: the frame path copies nothing
    live.watch("hall")
    assert live.wants("hall") and not live.wants("hall")  # the next frame within 0.2 s is not copied
    clock.now += 0.2
    assert live.wants("hall") and not live.wants("yard")
    pixels = np.zeros((120, 160, 3), np.uint8)
    pixels[:, 80:] = 255
    live.offer("hall", pixels, "bgr", _message(4))
    jpeg, meta = encode(live.latest("hall"), 80)  # type: ignore[arg-type]
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert image.shape == (60, 80, 3) and image[:, :30].mean() < 20 and image[:, 50:].mean() > 235
    assert json.loads(meta)["detections"] == [{"box": [10.0, 20.0, 50.0, 90.0], "class_name": "person",
                                               "score": 0.9, "track_id": 7}]
    clock.now += 3.5  # the viewer left
    assert not live.wants("hall") and live.latest("hall") is None
