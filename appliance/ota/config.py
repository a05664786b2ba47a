"""OTA settings (the supervisor's config section ``ota:``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from appliance.config import StrictModel
from appliance.config.ids import Id


class HealthPolicy(StrictModel):
    """After a switch, the new version is watched for ``period_s``; any breach rolls it back."""

    period_s: float = Field(60.0, ge=0, le=86400, description="how long the new version is watched")
    check_interval_s: float = Field(1.0, gt=0, le=60, description="how often health is evaluated")
    min_requests: int = Field(20, ge=1, description="requests needed before rates are judged")
    max_error_rate: float = Field(0.05, ge=0, le=1, description="failed / all requests on the new version")
    max_latency_ratio: float = Field(3.0, ge=1, description="p95 latency may grow at most this much vs the old")
    max_latency_s: float | None = Field(None, gt=0, description="absolute p95 latency bound (optional)")
    min_detection_ratio: float = Field(
        0.2, ge=0, le=1, description="frames with detections must stay above this fraction of the old "
                                     "version's rate (0 disables); catches a model that silently sees nothing")
    require_traffic: bool = Field(False, description="roll back when fewer than min_requests arrived")


class OtaConfig(StrictModel):
    group: Id | None = Field(None, description="fleet group (e.g. canary, line-3): the device follows the signed "
                             "desired state on <prefix>/groups/<group>/ota/desired (docs/fleet-rollout.md)")
    trusted_keys: list[Path] = Field(default_factory=list, description="Ed25519 public keys (PEM) or dirs of them")
    inbox: Path | None = Field(None, description="watched directory for bundles (*.bundle)")
    inbox_poll_s: float = Field(2.0, gt=0, le=3600)
    max_bundle_bytes: int = Field(2 << 30, gt=0, description="largest bundle accepted (any delivery)")
    allow_http: bool = Field(False, description="accept plain http:// URLs (https:// always allowed)")
    download_timeout_s: float = Field(60.0, gt=0, le=3600, description="a download that sends nothing for this "
                                                                      "long fails")
    download_deadline_s: float = Field(1800.0, gt=0, le=86400, description="a download not finished in this "
                                                                          "time fails, however slowly data comes")
    download_redirects: Literal["any_host", "same_host", "none"] = Field(
        "any_host", description="which redirects a download follows (never https -> http): to any host, only "
                                "to the URL's own host and port, or none")
    rollback_wait_s: float = Field(10.0, ge=0, le=600, description="how long a rollback waits for an update in "
                                                                   "progress to stop at its next step before it "
                                                                   "goes ahead of it (the update is cancelled)")
    chunk_timeout_s: float = Field(600.0, gt=0, description="an incomplete chunked upload is dropped after this")
    keep_versions: int = Field(3, ge=1, le=50, description="verified versions kept on disk, the active one included; "
                                                           "rollback reaches the others, then the base model")
    reserve_bytes: int = Field(64 << 20, ge=0, description="space that must stay free after staging")
    device_golden_dir: Path | None = Field(None, description="device-local golden set (golden.json + images)")
    check_golden: bool = Field(True, description="run golden frames before switching")
    builder: str = Field("auto", pattern="^(auto|tensorrt|onnxruntime)$")
    health: HealthPolicy = Field(default_factory=HealthPolicy)
    require_classes: bool = Field(False, description="refuse a bundle whose model lacks a class a camera's "
                                                     "analytics.classes names (off: it installs, ota/status names "
                                                     "the missing classes and those filter entries are inactive)")
