"""check-config's free-space warnings: the state dir must hold the engine build (when no engine is cached yet)
and the spool up to its bound, else the appliance meets a full disk later (docs/supervisor.md, "Health levels")."""

from __future__ import annotations

from pathlib import Path

from appliance import diskspace
from appliance.appconfig.app import AppConfig
from appliance.detector.buildprofile import load_profile

BUILD_HEADROOM_BYTES = 16 * diskspace.MB  # as the engine manager's precheck counts it


def space_warnings(config: AppConfig, state_dir: Path, engines_dir: Path, models_dir: Path) -> list[str]:
    """A warning for each of the state dir and the spool's folder that has less free than they need."""
    needs: dict[Path, list[tuple[str, int]]] = {}
    build = _build_need(config, state_dir, engines_dir, models_dir)
    if build:
        needs.setdefault(state_dir, []).append(("the engine build", build))
    spool = config.mqtt.spool_path(state_dir)
    needs.setdefault(spool.parent, []).append(
        (f"the spool (up to mqtt.spool.max_bytes), less its {_mb(_size(spool))} MB now",
         max(0, config.mqtt.spool.max_bytes - _size(spool))))
    warnings = []
    for folder, parts in needs.items():
        need = sum(size for _, size in parts)
        free = diskspace.free_bytes(folder)
        if free < need:
            what = " and ".join(f"{name} about {_mb(size)} MB" for name, size in parts)
            warnings.append(f"{folder} has {_mb(free)} MB free; it needs about {_mb(need)} MB: {what} (a full "
                            "disk holds results in memory, then drops them, counted)")
    return warnings


def _build_need(config: AppConfig, state_dir: Path, engines_dir: Path, models_dir: Path) -> int:
    """What the engine build needs (0 once an engine is cached, or where the profile or ONNX is missing: that is
    a problem check-config reports of its own)."""
    cached = state_dir / "engines" / config.model.name
    if cached.is_dir() and any(cached.iterdir()):
        return 0
    try:
        onnx = load_profile(engines_dir / f"{config.model.name}.yaml").onnx_path(models_dir)
        return 2 * onnx.stat().st_size + BUILD_HEADROOM_BYTES
    except Exception:  # a bad profile or missing ONNX: check-config names it among its problems
        return 0


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


def _mb(size: int) -> str:
    return f"{size / diskspace.MB:.0f}"
