"""The appliance's own Prometheus metrics, in a registry the caller owns (no global registration)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from appliance.health.system import SystemReading

# Stage latencies on a Jetson range from ~1 ms (pre) to ~100 ms (a large detector); buckets cover both.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)


class ApplianceMetrics:
    """Every metric the supervisor exports besides Triton's own. Updated by the supervisor, never at import."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.camera_fps = Gauge("appliance_camera_fps", "Frames per second captured", ["camera"], registry=r)
        self.camera_frames = Gauge("appliance_camera_frames", "Frames captured since start", ["camera"], registry=r)
        self.camera_drops = Gauge("appliance_camera_dropped_frames", "Frames overwritten before inference read them",
                                  ["camera"], registry=r)
        self.camera_reconnects = Gauge("appliance_camera_reconnects", "Source reconnects since start", ["camera"],
                                       registry=r)
        self.camera_streaming = Gauge("appliance_camera_streaming", "1 while the camera delivers frames", ["camera"],
                                      registry=r)
        self.frames_inferred = Counter("appliance_frames_inferred", "Frames run through the ensemble", ["camera"],
                                       registry=r)
        self.frames_skipped = Counter("appliance_frames_skipped",
                                      "Frames skipped by backpressure (latest frame wins)", ["camera"], registry=r)
        self.inference_errors = Counter("appliance_inference_errors", "Inference requests that failed",
                                        ["camera", "reason"], registry=r)
        self.stage_latency = Histogram("appliance_stage_latency_seconds", "Latency per pipeline stage", ["stage"],
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.inflight = Gauge("appliance_inflight_requests", "Inference requests in flight", registry=r)
        self.mqtt_connected = Gauge("appliance_mqtt_connected", "1 while connected to the broker", registry=r)
        self.spool_messages = Gauge("appliance_spool_messages", "Messages waiting in the durable spool", registry=r)
        self.spool_dropped = Gauge("appliance_spool_dropped", "Messages dropped by the spool overflow policy",
                                   registry=r)
        self.published = Gauge("appliance_mqtt_acked", "Messages acknowledged by the broker", registry=r)
        self.engine_build = Gauge("appliance_engine_build_percent", "Engine build progress (100 when done)",
                                  ["model"], registry=r)
        self.ota_state = Gauge("appliance_ota_state", "1 for the state of the latest OTA update status, else 0",
                               ["state"], registry=r)
        self.cpu_percent = Gauge("appliance_cpu_percent", "System CPU busy percent", registry=r)
        self.mem_available = Gauge("appliance_memory_available_bytes", "System memory available", registry=r)
        self.temperature = Gauge("appliance_temperature_celsius", "Thermal zone temperature", ["zone"], registry=r)
        self.power = Gauge("appliance_power_watts", "Power rail (Jetson INA3221)", ["rail"], registry=r)

    def record_system(self, reading: SystemReading) -> None:
        if reading.cpu_percent is not None:
            self.cpu_percent.set(reading.cpu_percent)
        if reading.mem_available_bytes is not None:
            self.mem_available.set(reading.mem_available_bytes)
        for zone, celsius in reading.temperatures_c.items():
            self.temperature.labels(zone=zone).set(celsius)
        for rail, watts in reading.power_w.items():
            self.power.labels(rail=rail).set(watts)

    def render(self) -> bytes:
        return generate_latest(self.registry)
