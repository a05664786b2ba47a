"""What the manager hands back for a verified engine (:class:`InstalledEngine`, read from a cache entry's
manifest) and the timing it records after verification (:func:`time_engine`)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from appliance.detector.engines.cache import CacheEntry


@dataclass(frozen=True)
class InstalledEngine:
    """A verified engine in the cache: what the model-repository materializer needs."""

    model: str
    key: str
    builder: str
    triton_kind: str  # 'tensorrt_plan' or 'onnxruntime'
    precision: str
    engine_path: Path
    manifest_path: Path
    onnx_path: Path
    cache_hit: bool
    build_seconds: float | None
    verification: str
    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    max_batch: int = 1
    frame_ms: float | None = None  # the engine's median time per frame, timed after verification at the build
    # Why the profile's precision was not built, when this is the fallback: the detection gate's refusal, or
    # calibration/gate frames that are missing on this device.
    refused: str | None = None
    in_graph: bool = False  # the engine takes the letterboxed uint8 frame and answers final boxes

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("engine_path", "manifest_path", "onnx_path"):
            out[name] = str(out[name])
        return out


def installed_from(entry: CacheEntry, onnx_path: Path, cache_hit: bool) -> InstalledEngine:
    """The record of a cache entry whose manifest the cache has checked."""
    m = entry.manifest
    return InstalledEngine(
        model=entry.model,
        key=entry.key,
        builder=m["fingerprint"]["builder"],
        triton_kind=m["triton_kind"],
        precision=m["precision"],
        engine_path=entry.engine_path,
        manifest_path=entry.directory / "manifest.json",
        onnx_path=onnx_path,
        cache_hit=cache_hit,
        build_seconds=m.get("build_seconds"),
        verification=m["verification"]["summary"],
        inputs=m["io"]["inputs"],
        outputs=m["io"]["outputs"],
        max_batch=m["profile"]["batch"]["max"],
        frame_ms=(m.get("timing") or {}).get("frame_ms"),
        in_graph=bool((m.get("build") or {}).get("in_graph", {}).get("applied")),
    )


TIMED_RUNS = 5


def time_engine(run: Callable[[Any], Any], feeds: dict[str, Any], batch: int, runs: int = TIMED_RUNS) -> dict[str, Any]:
    """The engine's median time on ``feeds`` (one untimed warm-up run first), per run and per frame of the batch:
    what the detector layout weighs against the cameras' frame rate (appliance.detector.repository.layout)."""
    run(feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run(feeds)
        times.append((time.perf_counter() - start) * 1000)
    median = sorted(times)[len(times) // 2]
    return {"batch": batch, "runs": runs, "run_ms": round(median, 3), "frame_ms": round(median / batch, 3)}


def batch_of(feeds: dict[str, Any]) -> int:
    """The leading dim of the first input (1 for a scalar)."""
    first = next(iter(feeds.values()))
    return int(first.shape[0]) if getattr(first, "ndim", 0) else 1
