"""`appliance status --config FILE` asks the health endpoint that config names (health.host, health.port), and
says which address it tried and where it came from when nothing answers."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import run_appliance
from support.ports import free_port

from appliance.health.routes import health_routes
from appliance.webserver.server import WebServer


def test_status_reads_the_health_address_from_the_config(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "appliance.yaml"
    config.write_text(f"device: {{id: a}}\nmqtt: {{host: localhost}}\nhealth: {{host: 0.0.0.0, port: {port}}}\n"
                      "cameras: [{id: door, source: {type: file, path: /tmp/door.mp4}}]\n")
    silent = run_appliance("status", "--config", str(config), "--json", expect=3)
    assert f"no answer from http://127.0.0.1:{port} (health.host and health.port of {config}" in silent.stderr
    summary = {"ok": True, "status": "asked at the config's port"}
    server = WebServer("127.0.0.1", port, health_routes(lambda: b"", lambda: summary))
    try:
        answered = run_appliance("status", "--config", str(config), "--json", expect=None)
        assert answered.returncode == 0 and json.loads(answered.stdout) == summary, answered.stderr
    finally:
        server.close()
