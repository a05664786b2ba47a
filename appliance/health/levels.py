"""The appliance's health level and its reasons, from plain readings: ``failed`` (it cannot serve), ``degraded``
(it serves, but not everything it should), ``ok``.

A model switch is neither: traffic moves to the new version per request and the frame path keeps progressing, so
Triton's server-wide readiness (false while the old version unloads) does not count; the served model's does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Level = Literal["ok", "degraded", "failed"]
LEVELS: tuple[Level, ...] = ("ok", "degraded", "failed")


@dataclass(frozen=True)
class Readings:
    """What the level is judged on. ``progressing``: the frame path's verdict (the watchdog's); ``serving``: the
    served model is ready in Triton; ``pipeline_error``: the model recovery's line while it is not serving;
    ``cameras``: each camera's health summary entry (``state``, and ``waiting_for`` or ``detail``);
    ``results``: reasons results are being held or dropped now; ``disk``: the state dir's low-space reason."""

    progressing: bool
    serving: bool
    pipeline_error: str | None = None
    cameras: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    results: Sequence[str] = ()
    disk: str | None = None


def assess(readings: Readings) -> tuple[Level, list[str]]:
    """The level and the reasons for it, most serious first (empty when ``ok``)."""
    failed = []
    if readings.pipeline_error:
        failed.append(f"pipeline: {readings.pipeline_error}")
    elif not readings.serving:
        failed.append("the served model is not ready in Triton")
    if not readings.progressing:
        failed.append("the frame path is not progressing")
    degraded = [camera_reason(camera_id, cam) for camera_id, cam in sorted(readings.cameras.items())
                if cam.get("state") != "streaming"]
    degraded += list(readings.results)
    if readings.disk:
        degraded.append(readings.disk)
    level: Level = "failed" if failed else "degraded" if degraded else "ok"
    return level, failed + degraded


def camera_reason(camera_id: str, cam: Mapping[str, Any]) -> str:
    why = cam.get("waiting_for") or cam.get("detail")
    return f"camera {camera_id} is {cam.get('state') or 'not started'}" + (f": {why}" if why else "")
