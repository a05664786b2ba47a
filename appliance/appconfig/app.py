"""The appliance's config file (``/etc/appliance/appliance.yaml``): one model per section.

Sections owned by a concern (cameras, mqtt) are defined beside that concern and embedded here; cross-field
checks that span sections live here, each raising with the key it is about.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

from pydantic import Field, model_validator

from appliance.backoff import BackoffConfig, RestartPolicy, lift_deprecated_keys
from appliance.capture.config import CameraConfig
from appliance.config.base import ConfigFieldError, StrictModel
from appliance.config.ids import ID_PATTERN, Id, id_problem  # noqa: F401 (ID_PATTERN: re-exported)
from appliance.mqtt.config import MqttConfig
from appliance.opcua.config import OpcUaConfig
from appliance.ota.config import OtaConfig
from appliance.restream.config import RestreamConfig
from appliance.web.config import WebConfig

MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
# pipeline.recovery's deprecated flat keys -> their key in the backoff section every other part uses
DEPRECATED_RECOVERY_KEYS = {"initial_backoff_s": "initial_s", "max_backoff_s": "max_s"}


class DeviceConfig(StrictModel):
    id: Id = Field(description="this appliance's id: its MQTT topic level and metrics label")
    name: Optional[str] = Field(None, max_length=200, description="human-readable name shown in status")


class PathsConfig(StrictModel):
    state_dir: Optional[Path] = Field(None, description="engines, repository, spool; default $APPLIANCE_STATE_DIR, "
                                                        "/var/lib/appliance, or .state in a source checkout")
    models_dir: Optional[Path] = Field(None, description="ONNX models; default $APPLIANCE_MODELS_DIR or "
                                                         "/var/lib/appliance/models (.models in a checkout)")
    engines_dir: Optional[Path] = Field(None, description="engine build profiles; default $APPLIANCE_ENGINES_DIR "
                                                          "or /etc/appliance/engines (engines/ in a checkout)")
    shm_root: Path = Field(Path("/dev/shm"), description="where camera frame rings live (a tmpfs)")


class TritonConfig(StrictModel):
    home: Optional[Path] = Field(None, description="Triton distribution; default: discovered (appliance triton-info)")
    log_verbose: int = Field(0, ge=0, le=3, description="Triton's verbose logging level")
    log_info: bool = Field(False, description="Triton's info-level logs")
    python_shm_bytes: int = Field(16 * 1024 * 1024, ge=1024 * 1024, le=1024**3,
                                  description="Python backend shared memory per model instance (frames pass here)")


class ModelConfig(StrictModel):
    name: str = Field("yolov3-tiny", pattern=MODEL_NAME_PATTERN,
                      description="engines/<name>.yaml (build) and repository/profiles/<name>.yaml (pre/post)")
    builder: Literal["auto", "tensorrt", "onnxruntime"] = Field("auto", description="auto: TensorRT where present")
    max_batch_size: int = Field(4, ge=1, le=64, description="largest detector batch (frames of several cameras)")
    detector_instances: Optional[int] = Field(
        None, ge=1, le=8,
        description="detector instances (null: automatic; ONNX Runtime on a CPU runs 1 using every core while it "
                    "keeps up with the cameras' fps, else 2 splitting the cores; TensorRT runs 1). See docs/models.md")
    queue_delay_us: int = Field(
        0, ge=0, le=1_000_000,
        description="how long the batcher holds a frame for companions when the detector is idle (0: frames that "
                    "queued while it was busy still share a batch, and a lone frame never waits)")


class RecoveryBackoffConfig(BackoffConfig):
    """Delays between reloads of a lost model; no jitter by default (one device, nothing to keep out of step)."""

    order_message: ClassVar[str] = ("pipeline.recovery.backoff.max_s ({max_s}) must be >= "
                                     "pipeline.recovery.backoff.initial_s ({initial_s})")

    initial_s: float = Field(1.0, gt=0, le=600, description="delay before the second reload attempt; the first "
                             "one is immediate (formerly `initial_backoff_s`)")
    max_s: float = Field(60.0, gt=0, le=3600, description="longest delay between reload attempts, also the retry "
                         "period in a crash loop (formerly `max_backoff_s`)")
    jitter: float = Field(0.0, ge=0, le=1, description="relative random spread of each delay")


class RecoveryConfig(StrictModel):
    """Reloading a served model that Triton lost (its stub process died, or it is no longer ready)."""

    backoff: RecoveryBackoffConfig = Field(default_factory=RecoveryBackoffConfig,
                                           description="delays between reload attempts (initial_s, max_s, factor, "
                                                       "jitter, as every backoff section)")
    max_failures: int = Field(5, ge=2, le=1000, description="this many failures (a model found broken, a reload "
                                                            "that did not fix it) within window_s: a crash loop")
    window_s: float = Field(300.0, gt=0, le=86400, description="how far back failures count")

    @model_validator(mode="before")
    @classmethod
    def _old_flat_backoff_keys(cls, data: Any) -> Any:
        return lift_deprecated_keys(data, "recovery", DEPRECATED_RECOVERY_KEYS)

    def policy(self) -> RestartPolicy:
        """The reload schedule this section describes."""
        return RestartPolicy.from_backoff(self.backoff, max_restarts=self.max_failures, window_s=self.window_s)


class PipelineConfig(StrictModel):
    max_inflight: Optional[int] = Field(
        None, ge=1, le=256, description="inference requests in flight, all cameras together; null (default): what "
        "keeps the detector busy (instances + 1 on ONNX Runtime, instances x max batch + 1 on TensorRT), logged at "
        "start")
    per_camera_inflight: int = Field(2, ge=1, le=32, description="inference requests in flight per camera")
    request_timeout_s: float = Field(10.0, gt=0, le=600, description="an inference slower than this fails "
                                     "(and is cancelled in Triton: the stages after skip it)")
    warmup_frames: int = Field(2, ge=0, le=100, description="warm-up rounds through a freshly loaded model before "
                               "frames are routed to it (at start, after an OTA switch or rollback, after a model "
                               "reload): each camera frame size alone and max_inflight at once; 0: none")
    drain_timeout_s: float = Field(10.0, ge=0, le=300, description="on stop, wait this long for in-flight frames")
    watchdog_stall_s: float = Field(20.0, gt=0, le=3600,
                                    description="no finished inference for this long stops feeding systemd's watchdog")
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig, description="reloading a model Triton lost")


class HealthConfig(StrictModel):
    enabled: bool = Field(True, description="serve /metrics and /healthz")
    host: str = Field("127.0.0.1", description="listen address; localhost by default")
    port: int = Field(9108, ge=0, le=65535, description="listen port (0: any free port)")
    interval_s: float = Field(5.0, gt=0, le=3600, description="how often system and camera readings refresh")
    min_free_mb: int = Field(256, ge=0, le=1024 * 1024, description=(
        "the health level is degraded while the state dir's filesystem has less than this free (0: never)"))
    tegrastats_interval_ms: Optional[int] = Field(
        1000, ge=100, le=60000, description="Jetson: run `tegrastats --interval` at this period for GPU load, EMC, "
                                            "temperatures and power rails (null: do not run it; ignored where "
                                            "there is no tegrastats)")


class AppConfig(StrictModel):
    device: DeviceConfig
    paths: PathsConfig = Field(default_factory=PathsConfig)
    triton: TritonConfig = Field(default_factory=TritonConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    web: WebConfig = Field(default_factory=WebConfig, description="the operator's page (docs/ui.md)")
    cameras: list[CameraConfig] = Field(min_length=1, description="one entry per camera")
    mqtt: MqttConfig
    ota: OtaConfig = Field(default_factory=OtaConfig, description="over-the-air model updates (docs/ota.md); "
                                                                   "no trusted_keys: every update is refused")
    restream: RestreamConfig = Field(default_factory=RestreamConfig, description="RTSP out of each camera's "
                                     "picture, plain and annotated (docs/restream.md); off unless enabled")
    opcua: Optional[OpcUaConfig] = Field(None, description="the OPC UA server a PLC reads (docs/opcua.md); "
                                                           "absent: none")

    @model_validator(mode="before")
    @classmethod
    def _mqtt_device_id_defaults_to_device_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("mqtt"), dict) and "device_id" not in data["mqtt"]:
            device = data.get("device")
            if isinstance(device, dict) and id_problem(device.get("id")) is None:
                device_id = device["id"]
            else:  # device.id is missing or broken and reported as such; a second report for mqtt would mislead
                device_id = "device-id-unset"
            data = {**data, "mqtt": {**data["mqtt"], "device_id": device_id}}
        return data

    @model_validator(mode="after")
    def _cross_checks(self) -> AppConfig:
        ids = [c.id for c in self.cameras]
        for index, camera_id in enumerate(ids):
            if camera_id in ids[:index]:
                raise ConfigFieldError(("cameras", index, "id"), f"duplicate camera id {camera_id!r}; each id names "
                                                                 "a ring and an MQTT topic")
        for camera_id in self.mqtt.cameras:
            if camera_id not in ids:
                raise ConfigFieldError(("mqtt", "cameras", camera_id), f"publish settings for unknown camera "
                                                                      f"{camera_id!r}; cameras are {ids}")
        needed = self.pipeline.per_camera_inflight + 2
        for index, camera in enumerate(self.cameras):
            if camera.ring_slots < needed:
                raise ConfigFieldError(("cameras", index, "ring_slots"),
                                       f"must be at least pipeline.per_camera_inflight + 2 = {needed} "
                                       f"(frames in flight hold their ring slots), got {camera.ring_slots}")
        return self

    def filter_classes(self) -> frozenset[str]:
        """The classes the cameras' ``analytics.classes`` filters name (an OTA model lacking one is reported)."""
        return frozenset(name for camera in self.cameras if camera.analytics is not None
                         for name in camera.analytics.classes or {})
