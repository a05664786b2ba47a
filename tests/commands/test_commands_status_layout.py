"""`appliance status` says where each camera's zones and lines come from: the config file, or the layout the
operator's page applied (docs/ui.md)."""

from __future__ import annotations

from appliance.commands.status import format_status


def _analytics(layout: str) -> dict:
    return {"ok": True, "status": "1/1 cameras streaming", "analytics": {"hall": {
        "zones": {}, "lines": {"aisle": {"in": 2, "out": 1}}, "active_tracks": 3, "events_by_type": {"cross": 3},
        "layout": layout}}}


def test_status_names_the_pages_layout_file_or_the_config_file() -> None:
    page = "/var/lib/appliance/layouts/hall.json (applied on the page by olga at 2026-11-25T21:45:16Z)"
    assert f"  hall: zones and lines from {page}" in format_status(_analytics(page)).splitlines()
    assert "  hall: zones and lines from the config file" in format_status(_analytics("config")).splitlines()
