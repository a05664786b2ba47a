"""The OPC UA server's parts without the appliance: its config section's defaults and checks, password hashes
(checked against hashlib's scrypt directly), the users file, the feed the frame path hands values to, and how
readings map onto variables and the vision state."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path

import pytest
import yaml
from asyncua import ua
from pydantic import ValidationError
from support.cli import run_appliance

from appliance.events import Event
from appliance.opcua.config import OpcUaConfig
from appliance.opcua.feed import Feed
from appliance.opcua.passwords import PasswordFileError, hash_password, read_users_file, verify_password
from appliance.opcua.values import CameraLayout, count_values, last_event_values, state_path, vision_state
from appliance.web.config import UserConfig


def test_the_defaults_refuse_anonymous_and_unencrypted_sessions() -> None:
    config = OpcUaConfig()
    assert config.allow_anonymous is False and config.allow_unencrypted is False
    assert config.security_policies == ["Basic256Sha256", "Aes256Sha256RsaPss"]
    assert config.users == [] and config.port == 4840


def test_a_password_in_clear_or_a_duplicate_user_is_refused() -> None:
    with pytest.raises(ValidationError, match="not a password hash"):
        OpcUaConfig.model_validate({"users": [{"name": "plc", "password_hash": "hunter2"}]})
    stored = hash_password("a-password")
    with pytest.raises(ValidationError, match="duplicate user 'plc'"):
        OpcUaConfig.model_validate({"users": [{"name": "plc", "password_hash": stored},
                                              {"name": "plc", "password_hash": stored}]})
    with pytest.raises(ValidationError, match="Input should be 'Basic256Sha256' or 'Aes256Sha256RsaPss'"):
        OpcUaConfig.model_validate({"security_policies": ["Basic128Rsa15"]})


def test_the_hash_is_scrypt_of_the_password_and_salt() -> None:
    salt = bytes(range(16))
    stored = hash_password("correct horse", salt=salt)
    expected = hashlib.scrypt(b"correct horse", salt=salt, n=2 ** 14, r=8, p=1, dklen=32)
    assert stored == f"scrypt$16384$8$1${base64.b64encode(salt).decode()}${base64.b64encode(expected).decode()}"
    assert verify_password("correct horse", stored) and not verify_password("correct horsf", stored)
    assert hash_password("correct horse") != stored  # a fresh salt each time


def test_one_hash_serves_the_page_and_opc_ua_and_the_older_opc_ua_layout_is_still_read() -> None:
    from appliance.opcua.access import ApplianceUsers
    from appliance.opcua.passwords import UserEntry
    from appliance.web.auth import check_password
    from appliance.web.auth import hash_password as page_hash

    salt = bytes(range(16))
    digest = hashlib.scrypt(b"older-password", salt=salt, n=2 ** 14, r=8, p=1, dklen=32)
    older = f"scrypt$14$8$1${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"  # log2 N
    for stored, password in ((page_hash("page-password"), "page-password"), (older, "older-password")):
        OpcUaConfig.model_validate({"users": [{"name": "plc", "password_hash": stored}]})
        users = ApplianceUsers([UserEntry("plc", "reader", stored)], allow_anonymous=False, trust=None)
        assert users.get_user(None, "plc", password) is not None and users.get_user(None, "plc", "wrong") is None
        assert check_password(password, stored) and not check_password("wrong", stored)


def test_the_users_file_names_the_bad_line(tmp_path: Path) -> None:
    good = hash_password("one-password")
    path = tmp_path / "users"
    path.write_text(f"# plant floor\nplc:reader:{good}\n\nlead:operator:{good}\n")
    assert [(u.name, u.role) for u in read_users_file(path)] == [("plc", "reader"), ("lead", "operator")]
    path.write_text(f"plc:reader:{good}\nlead:admin:{good}\n")
    with pytest.raises(PasswordFileError, match=f"{path}:2: expected name:role:hash"):
        read_users_file(path)


def test_the_cli_prints_a_hash_that_verifies() -> None:
    result = run_appliance("password", "--user", "plc", input="a-long-password\n")
    name, role, stored = result.stdout.strip().split(":")
    assert (name, role) == ("plc", "reader") and verify_password("a-long-password", stored)
    result = run_appliance("password", "--for", "web", "--user", "olga", "--role", "operator",
                           input="a-long-password\n")
    [item] = yaml.safe_load(result.stdout)
    user = UserConfig.model_validate(item)  # what web.users_file holds
    assert (user.name, user.role) == ("olga", "operator") and verify_password("a-long-password", user.password_hash)


def _event(seq: int, kind: str = "cross", camera: str = "hall") -> Event:
    return Event(event_id=f"{seq:032x}", camera_id=camera, seq=seq, event=kind, track_id=7, class_id=0,
                 class_name="person", score=0.9, capture_time=1_700_000_000.0 + seq, frame_seq=seq,
                 image_width=768, image_height=576, line="door" if kind == "cross" else None,
                 zone=None if kind == "cross" else "floor", direction="in" if kind == "cross" else None)


def test_the_feed_keeps_the_latest_counts_bounds_the_events_and_wakes_once_per_take() -> None:
    feed, wakes = Feed(max_events=3), []
    feed.publish_counts("hall", 1, 2, {"lines": {"door": {"in": 1, "out": 0}}})
    feed.attach(lambda: wakes.append(1))
    feed.publish_counts("hall", 2, 1, {"lines": {"door": {"in": 2, "out": 0}}})
    feed.publish_events([_event(1), _event(2), _event(3), _event(4)])
    assert len(wakes) == 1  # one wake-up until the server takes
    taken = feed.take()
    assert taken.counts == {"hall": (1, {"lines": {"door": {"in": 2, "out": 0}}})}
    assert [e.seq for e in taken.events] == [2, 3, 4] and taken.dropped == 1
    assert feed.take().events == [] and feed.take().counts == {}
    feed.publish_events([_event(5)])
    assert len(wakes) == 2
    feed.attach(None)
    feed.publish_events([_event(6)])  # detached: nobody to wake, and no error
    assert len(wakes) == 2


def test_counts_are_uint64_for_the_configured_zones_and_lines_only() -> None:
    layout = CameraLayout("hall", ("floor",), ("door",))
    values = count_values(layout, 3, {"zones": {"floor": {"current": 1, "entered": 5, "exited": 4},
                                                "gone": {"current": 9, "entered": 9, "exited": 9}},
                                      "lines": {"door": {"in": 6, "out": 2}}})
    assert values == {"Cameras.hall.ActiveTracks": (3, ua.VariantType.UInt64),
                      "Cameras.hall.Zones.floor.Current": (1, ua.VariantType.UInt64),
                      "Cameras.hall.Zones.floor.Entered": (5, ua.VariantType.UInt64),
                      "Cameras.hall.Zones.floor.Exited": (4, ua.VariantType.UInt64),
                      "Cameras.hall.Lines.door.In": (6, ua.VariantType.UInt64),
                      "Cameras.hall.Lines.door.Out": (2, ua.VariantType.UInt64)}
    last = last_event_values(_event(9), 12)
    assert last["Cameras.hall.LastEvent.Line"] == ("door", ua.VariantType.String)
    assert last["Cameras.hall.LastEvent.Zone"] == ("", ua.VariantType.String)
    assert last["Cameras.hall.EventCount"] == (12, ua.VariantType.UInt64)
    assert last["Cameras.hall.LastEvent.Time"][0].timestamp() == 1_700_000_009.0


@pytest.mark.parametrize("summary, started, stopping, state", [
    ({"ok": True}, False, False, "Preoperational"),
    ({"ok": True}, True, False, "Operational"),
    ({"ok": False, "pipeline": {"state": "recovering"}}, True, False, "Error"),
    ({"ok": True, "pipeline": {"state": "crash_loop"}}, True, False, "Error"),
    ({"ok": True}, True, True, "Halted"),
])
def test_the_vision_state_follows_the_appliance(summary: dict, started: bool, stopping: bool, state: str) -> None:
    assert vision_state(summary, started=started, stopping=stopping) == state


def test_the_state_machine_moves_only_along_the_specifications_transitions() -> None:
    assert state_path("Preoperational", "Operational") == ["Operational"]
    assert state_path("Operational", "Error") == ["Error"]
    assert state_path("Error", "Operational") == ["Operational"]
    assert state_path("Halted", "Operational") == ["Preoperational", "Operational"]  # no HaltedToOperational
    assert state_path("Error", "Halted") == ["Halted"] and state_path("Halted", "Halted") == []


def test_check_config_names_a_missing_users_file_at_its_line(tmp_path: Path) -> None:
    from appliance.appconfig.check import check_config

    path = tmp_path / "appliance.yaml"
    path.write_text(f"device: {{id: a}}\ncameras:\n  - id: c\n    source: {{type: file, path: {tmp_path}/v.mp4}}\n"
                    f"    width: 640\n    height: 480\nmqtt: {{host: localhost}}\nopcua:\n"
                    f"  users_file: {tmp_path}/users\n")
    report = check_config(path, environ={})
    assert f"{path}:9: opcua.users_file: file {tmp_path}/users does not exist" in [str(i) for i in report.issues]


def test_a_dead_server_loop_never_reaches_the_frame_path() -> None:
    loop = asyncio.new_event_loop()
    loop.close()  # as after the server's thread ended
    feed, woken = Feed(), []
    feed.attach(lambda: (woken.append(1), loop.call_soon_threadsafe(print)))
    feed.publish_counts("hall", 1, 0, {"lines": {}})  # RuntimeError inside: caught, the feed detaches
    feed.take()
    feed.publish_events([_event(1)])
    assert woken == [1]
