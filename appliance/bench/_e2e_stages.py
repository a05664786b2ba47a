"""Where ``appliance bench e2e``'s time goes: Triton's per-stage statistics before and after a window, the
1-camera latency split line, and percentiles."""

from __future__ import annotations

import re

from appliance.triton.server import Server

STAGES = ("preprocess", "detector", "postprocess")


def stage_totals(server: Server) -> dict[str, tuple[float, int]]:
    """Per stage: (ms, requests) so far. Triton's view of each stage model (queue + input + infer + output,
    i.e. with the stub round trip) under its name, and the stage's own timer inside its stub
    (``appliance_stage_busy_seconds_total``: for the detector, ONNX Runtime's run) under ``<stage>:inside``."""
    totals: dict[str, tuple[float, int]] = {}
    for model in server.model_statistics("")["model_stats"]:
        stage = next((s for s in STAGES if model["name"].startswith(s)), None)
        if stage is None:
            continue
        stats = model["inference_stats"]
        ns = sum(int(stats[k]["ns"]) for k in ("queue", "compute_input", "compute_infer", "compute_output"))
        ms, n = totals.get(stage, (0.0, 0))
        totals[stage] = (ms + ns / 1e6, n + int(stats["success"]["count"]))
    inside: dict[str, list[float]] = {}  # stage -> [busy seconds, requests]
    for line in server.metrics().splitlines():
        m = re.match(r'appliance_stage_(busy_seconds|requests)_total\{.*stage="(\w+)".*\} ([\d.e+-]+)$', line)
        if m:
            pair = inside.setdefault(m.group(2), [0.0, 0.0])
            pair[0 if m.group(1) == "busy_seconds" else 1] += float(m.group(3))
    for stage, (seconds, requests) in inside.items():
        totals[f"{stage}:inside"] = (seconds * 1000, int(requests))
    return totals


def stage_means(before: dict[str, tuple[float, int]], after: dict[str, tuple[float, int]]) -> dict[str, float]:
    means = {}
    for key, (ms, n) in after.items():
        ms0, n0 = before.get(key, (0.0, 0))
        if n > n0:
            means[key] = (ms - ms0) / (n - n0)
    return means


def split_line(split: dict[str, float], mean_total: float) -> str:
    """Where the 1-camera latency goes, means in ms: each stage as Triton sees it (its work inside the stub in
    parentheses) and what is left: Triton's ensemble, the result callback, the spool, MQTT, the broker."""
    parts = []
    if "capture_to_submit" in split:
        parts.append(f"capture->submit {split['capture_to_submit']:.1f}")
    for stage in STAGES:
        if stage in split:
            inside = split.get(f"{stage}:inside")
            parts.append(f"{stage} {split[stage]:.1f}" + (f" (inside {inside:.1f})" if inside is not None else ""))
    known = split.get("capture_to_submit", 0.0) + sum(split.get(stage, 0.0) for stage in STAGES)
    parts.append(f"rest to the subscriber {mean_total - known:.1f}")
    return "1-camera latency split (means, ms): " + ", ".join(parts)


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``values`` by rank; NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
