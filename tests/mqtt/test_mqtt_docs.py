"""The payload examples in docs/mqtt.md are real: each validates against the schema it is labelled with."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mqtt_helpers import validate
from support.mqttdocs import MQTT_DOC, documented_commands, subscriber_check

from appliance.mqtt.schema import MESSAGE_TYPES

EXAMPLE = re.compile(r"<!-- schema: (\w+) -->\s*```json\n(.*?)```", re.S)


def test_every_documented_example_validates(repo_root: Path) -> None:
    text = (repo_root / "docs" / "mqtt.md").read_text()
    examples = EXAMPLE.findall(text)
    assert {name for name, _ in examples} == set(MESSAGE_TYPES)  # every message type is documented
    for name, body in examples:
        validate(name, json.loads(body))


def _message(seq: int, message_seq: int, frames_skipped: int, boot: str = "a" * 32,
             message_id: str | None = None) -> dict[str, Any]:
    return {"message_id": message_id or f"{boot[:8]}{message_seq:024x}", "camera_id": "cam0", "boot_id": boot,
            "seq": seq, "message_seq": message_seq, "frames_skipped": frames_skipped}


def test_the_documented_subscriber_check_tells_a_lost_message_from_a_skipped_frame() -> None:
    check = subscriber_check()
    # Frames 11, 12 and 15 skipped (said so); a redelivered duplicate; a restart with a new boot_id.
    good = [_message(10, 1, 0), _message(13, 2, 2), _message(14, 3, 0), _message(14, 3, 0), _message(16, 4, 1),
            _message(17, 1, 0, "b" * 32), _message(18, 2, 0, "b" * 32)]
    assert check(good) == []
    lost = good[:2] + good[4:]  # message_seq 3 (frame 14) never arrived
    assert check(lost) == ["lost 1 message(s) before message_seq 4"]
    unexplained = [_message(10, 1, 0), _message(13, 2, 1)]  # three frames between, the message says one
    assert check(unexplained) == ["seq 10 -> 13 skips 2 frame(s), the message says 1"]
    assert check([_message(10, 2, 0)]) == ["lost 1 message(s) before message_seq 2"]
    assert check([_message(10, 2, 0)], joined_late=True) == []
    reordered = [_message(10, 1, 0), _message(12, 3, 0), _message(11, 2, 0)]
    assert check(reordered)[-1] == "message_seq 2 after 3: out of order"


def test_reply_examples_name_documented_commands() -> None:
    text = MQTT_DOC.read_text()
    replies = [json.loads(body) for name, body in EXAMPLE.findall(text) if name == "command_reply"]
    commands = documented_commands()
    assert commands  # the running appliance's list is compared with it: tests/supervisor/test_supervisor_message_seq.py
    for reply in replies:
        if reply["ok"]:
            assert reply["command"] in commands, reply
        else:
            assert reply["error"]["message"].endswith("known: " + ", ".join(sorted(commands))), reply
