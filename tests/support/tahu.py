"""Eclipse Tahu's JavaScript Sparkplug B codec (npm ``sparkplug-payload``, installed into tests/sparkplug/interop by
scripts/setup-test.d/61-sparkplug-interop.sh) as the tests' independent decoder: one node process per codec, driven by
tests/sparkplug/interop/tahu.js one JSON line at a time. Missing node or the package fails the test.

``decode`` returns Tahu's payload object with 64-bit integers as Python ints: ``{"timestamp", "seq", "metrics":
[{"name", "alias", "type", "value", "timestamp"}...]}`` (keys absent when the payload leaves them out)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any, Optional

INTEROP = Path(__file__).resolve().parents[1] / "sparkplug" / "interop"
SETUP = "scripts/setup-test.d/61-sparkplug-interop.sh"


def _ints(value: Any) -> Any:
    """tahu.js's {"long": "<decimal>"} as an int, everywhere in a decoded document."""
    if isinstance(value, dict):
        if set(value) == {"long", "unsigned"}:
            return int(value["long"])
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


class TahuCodec:
    def __init__(self) -> None:
        node = shutil.which("node")
        assert node is not None, f"node is not installed: run {SETUP}"
        assert (INTEROP / "node_modules" / "sparkplug-payload").is_dir(), \
            f"npm package sparkplug-payload missing in {INTEROP}: run {SETUP}"
        self._proc = subprocess.Popen([node, str(INTEROP / "tahu.js")], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, cwd=INTEROP)
        self._lock = threading.Lock()

    def _ask(self, request: dict[str, Any]) -> Any:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        with self._lock:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        assert line, "tahu.js ended"
        answer = json.loads(line)
        if isinstance(answer, dict) and "error" in answer:
            raise ValueError(answer["error"])
        return answer

    def decode(self, payload: bytes, datatypes: Optional[dict[int, int]] = None) -> dict[str, Any]:
        """``datatypes``: alias -> datatype from the births, for DATA metrics sent by alias alone (Tahu reads a
        value only through its metric's datatype)."""
        request = {"op": "decode", "payload": base64.b64encode(payload).decode("ascii"),
                   "datatypes": {str(k): v for k, v in (datatypes or {}).items()}}
        return dict(_ints(self._ask(request)))

    def encode(self, payload: dict[str, Any]) -> bytes:
        """Tahu's encodePayload of its payload object (Int64/UInt64/DateTime values may be given as ints)."""
        doc = json.loads(json.dumps(payload))
        for metric in doc.get("metrics", []):
            if isinstance(metric.get("value"), int) and not isinstance(metric.get("value"), bool) and \
                    metric.get("type") in ("Int64", "UInt64", "DateTime"):
                metric["value"] = str(metric["value"])
        return base64.b64decode(self._ask({"op": "encode", "payload": doc})["payload"])

    def schema(self, proto: Path) -> dict[str, Any]:
        """A .proto as protobufjs parses it (its JSON descriptor)."""
        return dict(self._ask({"op": "schema", "path": str(proto)}))

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(10)
