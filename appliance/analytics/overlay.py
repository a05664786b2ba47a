"""Zones and lines edited on the operator's page: one JSON file per camera in the state directory,
``<state>/layouts/<camera>.json``, that replaces that camera's ``zones``, ``lines`` and ``classes`` from the
config file (everything else of its ``analytics:`` still comes from the file). Removing the file reverts to the config;
an OTA update never touches it. docs/ui.md, "Edits and the config file"."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import ValidationError

from appliance.analytics.check import check_analytics
from appliance.analytics.config import AnalyticsConfig
from appliance.config.base import ConfigFieldError
from appliance.config.shown import QUOTE_CHARS, shown
from appliance.config.validate import describe_error
from appliance.durable import write_json_durably
from appliance.errors import ApplianceError

LAYOUT_DIR = "layouts"
MAX_PROBLEMS = 10  # a layout's problems named; the rest are counted
# The camera's class filter (``classes``: name -> minimum score; None: every class at ``min_score``), or "keep":
# the config file's.
Classes = Union[dict[str, float], None, Literal["keep"]]


class OverlayError(ApplianceError, ValueError):
    """A layout file that cannot be read or no longer fits its camera; the message names the file."""


@dataclass(frozen=True)
class LayoutProblem:
    """One problem of an edited layout: ``path`` inside the analytics section, e.g. ("zones", 0, "points")."""

    path: tuple[str | int, ...]
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"path": list(self.path), "message": self.message}


@dataclass(frozen=True)
class Overlay:
    """A camera's zones and lines as last applied on the page, by whom and when (UTC seconds)."""

    camera: str
    zones: list[dict[str, Any]]
    lines: list[dict[str, Any]]
    edited_by: str
    edited_at: float
    path: Path
    classes: Classes = "keep"

    def describe(self, *, who: bool = True) -> str:
        """The file and when it was applied; ``who``: and by whom (not for what is served without a login)."""
        by = f" by {self.edited_by}" if who else ""
        return f"{self.path} (applied on the page{by} at {_utc(self.edited_at)})"


def _utc(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def overlay_path(state_dir: Path, camera: str) -> Path:
    return state_dir / LAYOUT_DIR / f"{camera}.json"


def read_overlay(state_dir: Path, camera: str) -> Overlay | None:
    """The camera's layout file, None when there is none; OverlayError when it cannot be read."""
    path = overlay_path(state_dir, camera)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise OverlayError(f"{path}: cannot read the page's layout: {exc}") from exc
    try:
        classes = doc.get("classes", "keep")
        return Overlay(camera, list(doc["zones"]), list(doc["lines"]), str(doc["edited_by"]),
                       float(doc["edited_at"]), path, dict(classes) if isinstance(classes, dict) else classes)
    except (KeyError, TypeError, ValueError) as exc:
        raise OverlayError(f"{path}: not a layout file (zones, lines, edited_by, edited_at): {exc}") from exc


def write_overlay(state_dir: Path, camera: str, config: AnalyticsConfig, who: str, now: float) -> Overlay:
    """Keep ``config``'s zones and lines as the camera's layout (written durably: the old file or the new one)."""
    zones = [z.model_dump(mode="json", exclude_defaults=True) for z in config.zones]
    lines = [ln.model_dump(mode="json", exclude_defaults=True) for ln in config.lines]
    path = overlay_path(state_dir, camera)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_durably(path, {"camera": camera, "zones": zones, "lines": lines, "classes": config.classes,
                              "edited_by": who, "edited_at": now})
    return Overlay(camera, zones, lines, who, now, path, config.classes)


def with_layout(base: AnalyticsConfig, zones: Sequence[Any], lines: Sequence[Any], width: int | None,
                height: int | None, class_names: Sequence[str] | None, camera: str = "",
                classes: Classes = "keep") -> tuple[AnalyticsConfig | None, list[LayoutProblem]]:
    """``base`` with its zones and lines replaced, validated as ``check-config`` validates the file (the models'
    checks, then :func:`check_analytics` against the frame and the classes; ``class_names`` None: the classes are
    not checked): (config, []) or (None, problems)."""
    doc = base.model_dump(mode="json")
    doc.update(zones=list(zones), lines=list(lines))
    if classes != "keep":
        doc["classes"] = classes
    try:
        config = AnalyticsConfig.model_validate(doc)
    except ValidationError as exc:
        problems = []
        for error in exc.errors()[:MAX_PROBLEMS]:
            loc = tuple(error["loc"])
            cause = (error.get("ctx") or {}).get("error")
            if isinstance(cause, ConfigFieldError):
                loc = loc + tuple(cause.path)
            problems.append(LayoutProblem(_short_path(loc), describe_error(error)))
        if exc.error_count() > MAX_PROBLEMS:
            problems.append(LayoutProblem((), f"and {exc.error_count() - MAX_PROBLEMS} more problems"))
        return None, problems
    found = check_analytics(width, height, config, class_names, camera=camera)
    if found:
        return None, [LayoutProblem(_short_path(p.path), f"{shown(p.name)}: {p.reason}")
                      for p in found[:MAX_PROBLEMS]]
    return config, []


def _short_path(path: tuple[Any, ...]) -> tuple[str | int, ...]:
    return tuple(part if isinstance(part, int) or len(str(part)) <= QUOTE_CHARS else shown(str(part))
                 for part in path)


def overlaid(base: AnalyticsConfig, overlay: Overlay, width: int | None, height: int | None) -> AnalyticsConfig:
    """``base`` with the overlay's zones and lines; OverlayError naming the file when they no longer fit the frame.
    A class the served model lacks does not refuse it (as in the config file, that entry is inactive)."""
    config, problems = with_layout(base, overlay.zones, overlay.lines, width, height, None, overlay.camera,
                                   overlay.classes)
    if config is None:
        detail = "; ".join(f"{'.'.join(map(str, p.path))}: {p.message}" for p in problems)
        raise OverlayError(f"{overlay.path}: the page's layout for camera {overlay.camera!r} does not fit: {detail}")
    return config


def layout_yaml(config: AnalyticsConfig) -> str:
    """The ``classes:``, ``zones:`` and ``lines:`` keys of a camera's ``analytics:`` section (Copy YAML)."""
    out = [f"classes: {json.dumps(config.classes) if config.classes is not None else 'null'}"]
    for key, items in (("zones", config.zones), ("lines", config.lines)):
        out.append(f"{key}:" if items else f"{key}: []")
        for item in items:
            out.append(f"  - {json.dumps(item.model_dump(mode='json', exclude_defaults=True))}")
    return "\n".join(out) + "\n"
