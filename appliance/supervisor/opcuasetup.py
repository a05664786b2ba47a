"""The OPC UA server (docs/opcua.md) as the appliance starts it: its layout from the config (one object per
camera, zone and line, fixed for the run) and its readings from the appliance."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from appliance.appconfig.app import AppConfig
from appliance.opcua.config import OpcUaConfig
from appliance.opcua.feed import Feed
from appliance.opcua.server import OpcUaServer, Readings
from appliance.opcua.values import CameraLayout


def camera_layouts(config: AppConfig) -> list[CameraLayout]:
    return [CameraLayout(camera.id, tuple(z.name for z in camera.analytics.zones) if camera.analytics else (),
                         tuple(line.name for line in camera.analytics.lines) if camera.analytics else ())
            for camera in config.cameras]


def start_opcua(config: AppConfig, section: OpcUaConfig, state_dir: Path, feed: Feed, *, boot_id: str,
                summary: Callable[[], Mapping[str, Any]], phase: Callable[[], tuple[bool, bool]],
                reset_line: Callable[[str, str], bool]) -> OpcUaServer:
    """``section``: ``config.opcua``. Started: clients can connect when this returns (OpcUaStartError otherwise)."""
    server = OpcUaServer(section, config.device.id, camera_layouts(config), state_dir,
                         Readings(summary, phase, reset_line), feed, boot_id=boot_id, started_at=time.time())
    return server.start()
