"""Each camera's zones and lines: from the config file, or from the operator's page (a layout file in the state
directory, appliance.analytics.overlay) which replaces them. Applying a page edit validates it as
``check-config`` would, keeps it in the state directory, and hands it to the running analytics stage (tracks
keep their ids); every applied edit is logged with who and when."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.analytics.config import AnalyticsConfig
from appliance.analytics.overlay import (
    Classes,
    LayoutProblem,
    OverlayError,
    layout_yaml,
    overlaid,
    read_overlay,
    with_layout,
    write_overlay,
)
from appliance.capture.config import CameraConfig
from appliance.pipeline.eventstage import CameraAnalytics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Applied:
    """The outcome of an edit: the config now in force, or the problems that kept it out."""

    config: AnalyticsConfig | None
    problems: list[LayoutProblem]
    source: str = ""


class Layouts:
    """The cameras' analytics sections as they run, and where each camera's zones and lines come from."""

    def __init__(self, cameras: Sequence[CameraConfig], state_dir: Path, class_names: Callable[[], Sequence[str]], *,
                 clock: Callable[[], float] = time.time) -> None:
        """``class_names``: the served model's classes now (they change with an OTA switch)."""
        self._cameras = {c.id: c for c in cameras if c.analytics is not None}
        self._state_dir, self.class_names, self._clock = state_dir, class_names, clock
        self._lock = threading.Lock()  # an Apply from the page against another
        self._sources = {camera_id: "config" for camera_id in self._cameras}
        self._anonymous = dict(self._sources)  # the same without who applied it (for /healthz, served without login)
        self._files: dict[str, Path] = {}  # camera -> the layout file it runs, to notice one removed meanwhile
        self._current: dict[str, AnalyticsConfig] = {}
        for camera in self._cameras.values():
            self._current[camera.id] = self._initial(camera)
        self.stages: Mapping[str, CameraAnalytics] = {}

    def _initial(self, camera: CameraConfig) -> AnalyticsConfig:
        assert camera.analytics is not None
        try:
            overlay = read_overlay(self._state_dir, camera.id)
            if overlay is None:
                return camera.analytics
            config = overlaid(camera.analytics, overlay, *camera.frame_size)
        except OverlayError as exc:
            log.error("camera %s: %s; running the config file's zones and lines", camera.id, exc)
            return camera.analytics
        self._sources[camera.id], self._anonymous[camera.id] = overlay.describe(), overlay.describe(who=False)
        self._files[camera.id] = overlay.path
        log.info("camera %s: zones and lines from %s", camera.id, overlay.describe())
        return config

    def set_camera(self, camera: CameraConfig) -> CameraConfig:
        """A camera a reload added or changed: ``camera`` with its analytics as they run from now on (a page's
        layout keeps priority over the file's, as at start); ``stages`` is the caller's to update."""
        with self._lock:
            self.remove_camera(camera.id)
            if camera.analytics is None:
                return camera
            self._cameras[camera.id] = camera
            self._sources[camera.id] = self._anonymous[camera.id] = "config"
            self._current[camera.id] = self._initial(camera)
            return camera.model_copy(update={"analytics": self._current[camera.id]})

    def remove_camera(self, camera_id: str) -> None:
        self._cameras.pop(camera_id, None)
        self._sources.pop(camera_id, None)
        self._anonymous.pop(camera_id, None)
        self._files.pop(camera_id, None)
        self._current.pop(camera_id, None)

    def cameras(self, configs: Sequence[CameraConfig]) -> list[CameraConfig]:
        """``configs`` with each camera's analytics as it starts (a page's layout in place of the file's)."""
        return [c.model_copy(update={"analytics": self._current[c.id]}) if c.id in self._current else c
                for c in configs]

    def source(self, camera_id: str) -> str | None:
        """"config", or the layout file and who applied it when; None for a camera without analytics."""
        return self._removed(camera_id, self._sources.get(camera_id))

    def anonymous_source(self, camera_id: str) -> str | None:
        """:meth:`source` without who applied the layout."""
        return self._removed(camera_id, self._anonymous.get(camera_id))

    def _removed(self, camera_id: str, source: str | None) -> str | None:
        """``source``, or what runs once its layout file was removed (the camera keeps it until a restart)."""
        path = self._files.get(camera_id)
        if source is None or path is None or path.exists():
            return source
        return (f"{path} was removed: the config file's zones and lines from the next restart (until then those "
                f"of the removed file, {source.removeprefix(str(path)).strip()})")

    def current(self, camera_id: str) -> AnalyticsConfig | None:
        return self._current.get(camera_id)

    def frame_size(self, camera_id: str) -> tuple[int, int] | None:
        camera = self._cameras.get(camera_id)
        return camera.frame_size if camera is not None else None

    def yaml(self, camera_id: str) -> str:
        config = self._current.get(camera_id)
        return layout_yaml(config) if config is not None else ""

    def apply(self, camera_id: str, zones: Sequence[Any], lines: Sequence[Any], who: str,
              classes: Classes = "keep") -> Applied:
        """Validate, keep, and run ``zones``, ``lines`` and ``classes`` for the camera from its next frame on."""
        camera, stage = self._cameras.get(camera_id), self.stages.get(camera_id)
        if camera is None or camera.analytics is None or stage is None:
            return Applied(None, [LayoutProblem((), f"camera {camera_id!r} has no analytics section")])
        with self._lock:
            config, problems = with_layout(self._current[camera_id], zones, lines, *camera.frame_size,
                                           self.class_names(), camera_id, classes)
            if config is None:
                log.info("camera %s: layout from %s not applied: %s", camera_id, who,
                         "; ".join(f"{'.'.join(map(str, p.path))}: {p.message}" for p in problems))
                return Applied(None, problems)
            overlay = write_overlay(self._state_dir, camera_id, config, who, self._clock())
            stage.apply_layout(config)
            self._current[camera_id] = config
            self._sources[camera_id], self._anonymous[camera_id] = overlay.describe(), overlay.describe(who=False)
            self._files[camera_id] = overlay.path
        log.info("camera %s: zones and lines applied on the page by %s (%d zone(s): %s; %d line(s): %s); kept "
                    "in %s", camera_id, who, len(config.zones), ", ".join(z.name for z in config.zones) or "-",
                    len(config.lines), ", ".join(ln.name for ln in config.lines) or "-", overlay.path)
        return Applied(config, [], overlay.describe())
