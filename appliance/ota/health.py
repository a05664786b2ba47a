"""Judging a new version's health against the old one's (pure functions over HealthSample)."""

from __future__ import annotations

from appliance.detector.serving.router import HealthSample
from appliance.ota.config import HealthPolicy


def breach(policy: HealthPolicy, new: HealthSample, baseline: HealthSample | None, final: bool) -> str | None:
    """Why the new version must be rolled back, or None. Rates are judged once ``min_requests`` arrived;
    ``final`` is the end of the watch period (where too little traffic may itself be a breach)."""
    if new.requests < policy.min_requests:
        if final and policy.require_traffic:
            return f"only {new.requests} request(s) during the watch (need {policy.min_requests})"
        return None
    if new.error_rate > policy.max_error_rate:
        return (f"error rate {new.error_rate:.1%} ({new.errors}/{new.requests}) is above "
                f"{policy.max_error_rate:.1%}")
    p95 = new.latency_p95_s
    if p95 is not None and policy.max_latency_s is not None and p95 > policy.max_latency_s:
        return f"p95 latency {p95 * 1000:.0f} ms is above {policy.max_latency_s * 1000:.0f} ms"
    base_ok = baseline is not None and baseline.requests >= policy.min_requests
    if base_ok and p95 is not None and baseline.latency_p95_s:  # type: ignore[union-attr]
        ratio = p95 / baseline.latency_p95_s  # type: ignore[union-attr]
        if ratio > policy.max_latency_ratio:
            return (f"p95 latency {p95 * 1000:.0f} ms is {ratio:.1f}x the old version's "
                    f"{baseline.latency_p95_s * 1000:.0f} ms (limit {policy.max_latency_ratio}x)")  # type: ignore[union-attr]
    if final and base_ok and policy.min_detection_ratio > 0 and baseline.detection_rate > 0:  # type: ignore[union-attr]
        floor = policy.min_detection_ratio * baseline.detection_rate  # type: ignore[union-attr]
        if new.detection_rate < floor:
            return (f"frames with detections fell to {new.detection_rate:.0%} from {baseline.detection_rate:.0%} "  # type: ignore[union-attr]
                    f"(floor {floor:.0%})")
    return None
