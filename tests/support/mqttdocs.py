"""What docs/mqtt.md promises, read from it for tests of any area: the commands it lists as registered, and the
subscriber-side check of detections messages it shows (the code itself, run as a subscriber would paste it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

MQTT_DOC = Path(__file__).resolve().parents[2] / "docs" / "mqtt.md"

CheckCamera = Callable[..., list[str]]


def documented_commands(doc: Path = MQTT_DOC) -> set[str]:
    """The command names in the first column of the table after ``<!-- commands: registered -->``."""
    text = doc.read_text()
    table = text.split("<!-- commands: registered -->", 1)[1].strip().split("\n\n", 1)[0]
    names = {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", table, re.M)}
    assert names, "docs/mqtt.md: no command table after <!-- commands: registered -->"
    return names


def subscriber_check(doc: Path = MQTT_DOC) -> CheckCamera:
    """``check_camera(messages, joined_late=False) -> problems`` from the python block after
    ``<!-- subscriber-check -->``."""
    match = re.search(r"<!-- subscriber-check -->\s*```python\n(.*?)```", doc.read_text(), re.S)
    assert match, "docs/mqtt.md: no python block after <!-- subscriber-check -->"
    namespace: dict[str, Any] = {}
    exec(compile(match.group(1), f"{doc}:subscriber-check", "exec"), namespace)
    check: CheckCamera = namespace["check_camera"]
    return check
