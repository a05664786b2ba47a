"""The payload examples in docs/mqtt.md are real: each validates against the schema it is labelled with."""

from __future__ import annotations

import json
import re
from pathlib import Path

from appliance.mqtt.schema import MESSAGE_TYPES
from mqtt_helpers import validate

EXAMPLE = re.compile(r"<!-- schema: (\w+) -->\s*```json\n(.*?)```", re.S)


def test_every_documented_example_validates(repo_root: Path) -> None:
    text = (repo_root / "docs" / "mqtt.md").read_text()
    examples = EXAMPLE.findall(text)
    assert {name for name, _ in examples} == set(MESSAGE_TYPES)  # every message type is documented
    for name, body in examples:
        validate(name, json.loads(body))
