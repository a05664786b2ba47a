"""What the operator's page reads and changes of the running appliance (appliance.web.routes.Site)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from appliance.analytics.overlay import Classes
from appliance.pipeline.layouts import Layouts


class ApplianceSite:
    """``device``: id and name; ``health``: the health summary (Appliance.health_summary)."""

    def __init__(self, device: dict[str, Any], health: Callable[[], dict[str, Any]], layouts: Layouts,
                 camera_ids: Sequence[str] | Callable[[], Sequence[str]] = ()) -> None:
        """``camera_ids``: the cameras, or what says which run now (a reload adds and removes cameras)."""
        self._device, self._health, self._layouts = device, health, layouts
        self._camera_ids = camera_ids

    def camera_ids(self) -> list[str]:
        return list(self._camera_ids() if callable(self._camera_ids) else self._camera_ids)

    def overview(self) -> dict[str, Any]:
        return {"device": self._device, **self._health()}

    def counts(self, camera_id: str) -> dict[str, Any] | None:
        stage = self._layouts.stages.get(camera_id)
        return {"camera": camera_id, "analytics": stage.summary() if stage is not None else None,
                "layout_source": self._layouts.source(camera_id)}

    def layout(self, camera_id: str) -> dict[str, Any] | None:
        config, size = self._layouts.current(camera_id), self._layouts.frame_size(camera_id)
        if config is None or size is None:
            return None
        return {"camera": camera_id, "width": size[0], "height": size[1], "anchor": config.anchor,
                "zones": [z.model_dump(mode="json") for z in config.zones],
                "lines": [ln.model_dump(mode="json") for ln in config.lines],
                "source": self._layouts.source(camera_id), "yaml": self._layouts.yaml(camera_id),
                "class_filter": config.classes, "min_score": config.min_score,
                "classes": list(self._layouts.class_names())}

    def apply_layout(self, camera_id: str, zones: list[Any], lines: list[Any], who: str,
                     classes: Classes = "keep") -> dict[str, Any]:
        applied = self._layouts.apply(camera_id, zones, lines, who, classes)
        return {"applied": applied.config is not None, "problems": [p.as_dict() for p in applied.problems],
                "source": applied.source, "yaml": self._layouts.yaml(camera_id)}
