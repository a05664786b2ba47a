"""The appliance's own Prometheus metrics, in a registry the caller owns (no global registration).

Named by Prometheus' conventions: a cumulative count is a Counter (exposed as ``<name>_total``), a unit is in
the name in base units (``_seconds``, ``_bytes``, ``_hertz``, ``_celsius``, ``_watts``), a share is a
``_ratio`` (0..1; the ``_percent`` twins are deprecated, :class:`_Percentage`), and ``appliance_build_info`` is 1
with what was built labelled. Counts that are kept
elsewhere as absolute numbers (a ring header, the publisher's stats) advance their Counter by what is new
(``_CountFrom``), so a scrape sees a counter that only resets when the appliance restarts.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

import appliance
from appliance.health.system import SystemReading
from appliance.health.tegrastats import TegraReading

if TYPE_CHECKING:
    from appliance.capture.health import CaptureHealth

# Stage latencies on a Jetson range from ~1 ms (pre) to ~100 ms (a large detector); buckets cover both.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)
BUILD_INFO_LABELS = ("version", "python", "triton_version", "builder", "triton_kind", "arch")


class ApplianceMetrics:
    """Every metric the supervisor exports besides Triton's own. Updated by the supervisor, never at import."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.build_info = Gauge("appliance_build_info", "Always 1: the appliance's version, Python, Triton and "
                                "the served engine's builder and Triton backend kind", list(BUILD_INFO_LABELS),
                                registry=r)
        self.camera_fps = Gauge("appliance_camera_frames_per_second", "Frames per second captured (the capture "
                                "process's own measure)", ["camera"], registry=r)
        self.camera_frames = _CountFrom(Counter("appliance_camera_frames", "Frames captured", ["camera"],
                                                registry=r))
        self.camera_drops = _CountFrom(Counter("appliance_camera_dropped_frames", "Frames overwritten in the ring "
                                               "before inference read them", ["camera"], registry=r))
        self.camera_reconnects = _CountFrom(Counter("appliance_camera_reconnects", "Source reconnects", ["camera"],
                                                    registry=r))
        self.camera_decode_errors = _CountFrom(Counter("appliance_camera_decode_errors", "Frames the source "
                                                       "failed to decode", ["camera"], registry=r))
        self.camera_stalls = _CountFrom(Counter("appliance_camera_stalls", "Times the source delivered nothing "
                                                "for stall_timeout_s", ["camera"], registry=r))
        self.camera_ring_full = _CountFrom(Counter("appliance_camera_ring_full", "Frames not written because "
                                                   "every other ring slot was held by inference", ["camera"],
                                                   registry=r))
        self.camera_streaming = Gauge("appliance_camera_streaming", "1 while the camera delivers frames", ["camera"],
                                      registry=r)
        self.camera_waiting = Gauge("appliance_camera_waiting", "1 while the camera's source is absent (no device "
                                    "node, no file yet) and capture waits for it to appear", ["camera"], registry=r)
        self.frames_inferred = Counter("appliance_frames_inferred", "Frames run through the ensemble", ["camera"],
                                       registry=r)
        self.frames_skipped = _CountFrom(Counter("appliance_frames_skipped", "Frames skipped by backpressure "
                                                 "(latest frame wins)", ["camera"], registry=r))
        self.inference_errors = Counter("appliance_inference_errors", "Inference requests that failed",
                                        ["camera", "reason"], registry=r)
        self.stage_latency = Histogram("appliance_stage_latency_seconds", "Latency per pipeline stage", ["stage"],
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.inflight = Gauge("appliance_inflight_requests", "Inference requests in flight", registry=r)
        self.mqtt_connected = Gauge("appliance_mqtt_connected", "1 while connected to the broker", registry=r)
        self.spool_messages = Gauge("appliance_spool_messages", "Messages waiting in the durable spool", registry=r)
        self.spool_bytes = Gauge("appliance_spool_bytes", "Bytes the durable spool's messages take", registry=r)
        self.spool_dropped = _CountFrom(Counter("appliance_spool_dropped", "Messages dropped by the spool's bounds "
                                                "(reason: oldest, newest, expired)", ["reason"], registry=r))
        self.results_dropped = _CountFrom(Counter("appliance_results_dropped", "Results dropped while the spool could "
                                                  "not be written", ["camera", "kind", "reason"], registry=r))
        self.state_free_bytes = Gauge("appliance_state_dir_free_bytes", "Free bytes in the state dir", registry=r)
        self.published = _CountFrom(Counter("appliance_mqtt_acked", "Detections acknowledged by the broker",
                                            registry=r))
        self.engine_build = _Percentage("appliance_engine_build_ratio", "appliance_engine_build_percent",
                                        "Engine build progress (done: 1, or 100 percent)", ["model"], r)
        self.ota_state = Gauge("appliance_ota_state", "1 for the state of the latest OTA update status, else 0",
                               ["state"], registry=r)
        # The served pipeline's models (docs/supervisor.md, "Model failures"): found broken, reloaded, and the
        # frames dropped meanwhile.
        self.model_failures = Counter("appliance_model_failures", "Served models found broken (reason: "
                                      "stub_died, not_ready)", ["model", "reason"], registry=r)
        self.model_reloads = Counter("appliance_model_reloads", "Reloads of a broken served model (result: ok, "
                                     "failed)", ["model", "result"], registry=r)
        self.pipeline_state = Gauge("appliance_pipeline_state", "1 for the served pipeline's state (serving, "
                                    "recovering, crash_loop), else 0", ["state"], registry=r)
        self.frames_dropped = Counter("appliance_frames_dropped", "Frames dropped because the pipeline could not "
                                      "take them (reason: the pipeline's state)", ["camera", "reason"], registry=r)
        # Analytics (docs/analytics.md): per camera, zone and line.
        self.active_tracks = Gauge("appliance_analytics_active_tracks", "Confirmed tracks (lost ones within "
                                   "lost_frames included)", ["camera"], registry=r)
        self.analytics_events = Counter("appliance_analytics_events", "Analytics events (type: enter, exit, cross, "
                                        "dwell)", ["camera", "type"], registry=r)
        self.zone_objects = Gauge("appliance_zone_objects", "Tracked objects inside the zone now", ["camera", "zone"],
                                  registry=r)
        self.zone_entered = _CountFrom(Counter("appliance_zone_entered", "Objects that entered the zone",
                                               ["camera", "zone"], registry=r))
        self.zone_exited = _CountFrom(Counter("appliance_zone_exited", "Objects that left the zone",
                                              ["camera", "zone"], registry=r))
        self.line_crossings = _CountFrom(Counter("appliance_line_crossings", "Objects that crossed the line "
                                                 "(direction: in, out)", ["camera", "line", "direction"], registry=r))
        self.snapshots_dropped = _CountFrom(Counter("appliance_snapshots_dropped", "Event snapshots not encoded "
                                                    "because the encoder's queue was full", ["camera"], registry=r))
        self._recording_metrics(r)
        self.cpu = _Percentage("appliance_cpu_usage_ratio", "appliance_cpu_percent", "System CPU busy", [], r)
        self.mem_available = Gauge("appliance_memory_available_bytes", "System memory available", registry=r)
        self.temperature = Gauge("appliance_temperature_celsius", "Thermal zone temperature", ["zone"], registry=r)
        self.power = Gauge("appliance_power_watts", "Power rail (Jetson INA3221)", ["rail"], registry=r)
        self._tegra: _TegraGauges | None = None  # registered on the first tegrastats reading (Jetson only)
        self.record_build_info()

    def _restream_metrics(self, r: CollectorRegistry) -> None:
        self.restream_watched = Gauge("appliance_restream_watched", "1 while the restream mount has a client",
                                      ["camera", "mount"], registry=r)
        self.restream_encoding = Gauge("appliance_restream_encoding", "1 while an encoder runs for the mount (0 "
                                       "with a client: the camera's own packets, passthrough)", ["camera", "mount",
                                                                                                "encoder"], registry=r)

    def record_restream(self, readings: Mapping[str, Any]) -> None:
        """Each restream mount (appliance.restream.tap.Restream.readings): watched, and encoded or passed through."""
        for camera, mounts in readings["cameras"].items():
            for mount, runs in mounts.items():
                self.restream_watched.labels(camera=camera, mount=mount).set(int(runs is not None))
                self.restream_encoding.labels(camera=camera, mount=mount, encoder=readings["encoder"]).set(
                    int(runs not in (None, "passthrough")))

    def _recording_metrics(self, r: CollectorRegistry) -> None:
        """Recording and event clips (appliance.pipeline.clipkeeper): footage kept, clips written and failed;
        the restream's mounts."""
        self._restream_metrics(r)
        self.recording_bytes = Gauge("appliance_recording_bytes", "The camera's kept footage on disk (record:)",
                                     ["camera"], registry=r)
        self.recording = Gauge("appliance_recording", "1 while the camera's footage is recorded; 0 while recording "
                               "is paused (low disk space, recorder error: the log says why)", ["camera"], registry=r)
        self.clips_written = _CountFrom(Counter("appliance_clips_written", "Event clips whose footage was written",
                                                ["camera"], registry=r))
        self.clips_failed = _CountFrom(Counter("appliance_clips_failed", "Event clips that could not be written "
                                               "(reason: missing footage, error)", ["camera", "reason"], registry=r))

    def record_build_info(self, *, triton_version: str = "", builder: str = "", triton_kind: str = "") -> None:
        """``appliance_build_info`` = 1 with one label set: what is known at construction, then (once Triton
        and the engine are up) the Triton version and the engine's builder and kind; "" where not known."""
        self.build_info.clear()
        self.build_info.labels(version=appliance.__version__, python=platform.python_version(),
                               triton_version=triton_version, builder=builder, triton_kind=triton_kind,
                               arch=platform.machine()).set(1)

    def record_camera(self, camera_id: str, health: CaptureHealth, *, streaming: bool, waiting: bool = False) -> None:
        """One camera's capture counters, read from its ring header (they count since the ring was created);
        ``streaming`` and ``waiting`` come from the camera's MQTT state (appliance.supervisor.cameras), not
        re-derived here."""
        self.camera_fps.labels(camera=camera_id).set(health.fps)
        self.camera_streaming.labels(camera=camera_id).set(int(streaming))
        self.camera_waiting.labels(camera=camera_id).set(int(waiting))
        for counter, total in ((self.camera_frames, health.frames), (self.camera_drops, health.drops),
                               (self.camera_reconnects, health.reconnects),
                               (self.camera_decode_errors, health.decode_errors),
                               (self.camera_stalls, health.stalls), (self.camera_ring_full, health.ring_full)):
            counter.count(total, camera=camera_id)

    def record_skipped(self, camera_id: str, skipped: int) -> None:
        """``skipped``: the scheduler's running count of the camera's frames that a newer one replaced before
        inference took it (latest wins); the counter grows by what is new since the last call."""
        self.frames_skipped.count(skipped, camera=camera_id)  # exported (as 0) from the first call

    def record_spool(self, *, backlog: int, size_bytes: int, acked: int, dropped: Mapping[str, int]) -> None:
        """The publisher's stats (counts since it started): ``dropped`` per reason (oldest, newest, expired)."""
        self.spool_messages.set(backlog)
        self.spool_bytes.set(size_bytes)
        self.published.count(acked)
        for reason, total in dropped.items():
            self.spool_dropped.count(total, reason=reason)

    def record_results_dropped(self, dropped: Mapping[tuple[str, str, str], int]) -> None:
        """The publisher's results dropped since it started, per (camera, kind, reason)."""
        for (camera, kind, reason), total in dropped.items():
            self.results_dropped.count(total, camera=camera, kind=kind, reason=reason)

    def record_inferred(self, camera_id: str, inference_s: float, capture_to_result_s: float) -> None:
        self.stage_latency.labels(stage="inference").observe(inference_s)
        self.stage_latency.labels(stage="capture_to_result").observe(capture_to_result_s)
        self.frames_inferred.labels(camera=camera_id).inc()

    def record_analytics_step(self, camera_id: str, seconds: float, event_types: Sequence[str]) -> None:
        """One frame through a camera's analytics (completion thread): its time and the events it raised."""
        self.stage_latency.labels(stage="analytics").observe(seconds)
        for event_type in event_types:
            self.analytics_events.labels(camera=camera_id, type=event_type).inc()

    def record_analytics(self, camera_id: str, summary: Mapping[str, Any]) -> None:
        """A camera's analytics summary (``CameraAnalytics.summary()``): tracks, zone and line counters."""
        self.active_tracks.labels(camera=camera_id).set(summary["active_tracks"])
        for zone, counts in summary["zones"].items():
            self.zone_objects.labels(camera=camera_id, zone=zone).set(counts["current"])
            self.zone_entered.count(counts["entered"], camera=camera_id, zone=zone)
            self.zone_exited.count(counts["exited"], camera=camera_id, zone=zone)
        for line, counts in summary["lines"].items():
            for direction in ("in", "out"):
                self.line_crossings.count(counts[direction], camera=camera_id, line=line, direction=direction)
        self.snapshots_dropped.count(summary["snapshots_dropped"], camera=camera_id)

    def record_clips(self, camera_id: str, *, kept_bytes: int, recording: bool, written: int,
                     failed: Mapping[str, int]) -> None:
        """A recording camera's footage and clips (appliance.pipeline.clipkeeper); counts since start."""
        self.recording_bytes.labels(camera=camera_id).set(kept_bytes)
        self.recording.labels(camera=camera_id).set(int(recording))
        self.clips_written.count(written, camera=camera_id)
        for reason, total in failed.items():
            self.clips_failed.count(total, camera=camera_id, reason=reason)

    def record_inference_error(self, camera_id: str, reason: str) -> None:
        self.inference_errors.labels(camera=camera_id, reason=reason).inc()

    def record_frame_dropped(self, camera_id: str, reason: str) -> None:
        self.frames_dropped.labels(camera=camera_id, reason=reason).inc()

    def record_system(self, reading: SystemReading) -> None:
        if reading.cpu_percent is not None:
            self.cpu.set(reading.cpu_percent)
        if reading.mem_available_bytes is not None:
            self.mem_available.set(reading.mem_available_bytes)
        for zone, celsius in reading.temperatures_c.items():
            self.temperature.labels(zone=zone).set(celsius)
        for rail, watts in reading.power_w.items():
            self.power.labels(rail=rail).set(watts)
        if reading.state_dir_free_bytes is not None:
            self.state_free_bytes.set(reading.state_dir_free_bytes)

    def record_tegrastats(self, reading: TegraReading | None, restarts: int = 0) -> None:
        """Called only where tegrastats runs, so hosts without it export none of these gauges (rather than a GPU
        load of 0). ``reading`` None (restarting, or stale) sets only ``appliance_tegrastats_up`` to 0: the other
        gauges keep their last value, so read them together with it."""
        if self._tegra is None:
            self._tegra = _TegraGauges(self.registry)
        self._tegra.record(reading, restarts)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _CountFrom:
    """A Counter fed from an absolute count kept elsewhere: each ``count`` advances it by what is new since the
    previous reading of the same labels. A count lower than the last means its source started again from zero
    (a new ring, a new publisher): all of it is new."""

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self._seen: dict[tuple[tuple[str, str], ...], float] = {}

    def count(self, total: float, **labels: str) -> None:
        child = self.counter.labels(**labels) if labels else self.counter  # exported (as 0) from the first call
        key = tuple(sorted(labels.items()))
        last = self._seen.get(key, 0.0)
        new = total - last if total >= last else total
        if new > 0:
            child.inc(new)
        self._seen[key] = total


class _TegraGauges:
    """tegrastats (Jetson): what sysfs does not give (GPU load, EMC), and its own names for what sysfs also has
    (sensors and rails under other names), so the two sources never overwrite each other."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.up = Gauge("appliance_tegrastats_up", "1 while tegrastats delivers fresh readings", registry=r)
        self.restarts = _CountFrom(Counter("appliance_tegrastats_restarts", "tegrastats exits", registry=r))
        self.gpu_load = _Percentage("appliance_gpu_load_ratio", "appliance_gpu_load_percent",
                                    "iGPU (GR3D) load, tegrastats", [], r)
        self.gpu_freq = Gauge("appliance_gpu_freq_hertz", "iGPU (GR3D) clock, tegrastats", registry=r)
        self.emc_load = _Percentage("appliance_emc_load_ratio", "appliance_emc_load_percent",
                                    "External memory controller load, tegrastats", [], r)
        self.emc_freq = Gauge("appliance_emc_freq_hertz", "External memory controller clock, tegrastats",
                              registry=r)
        self.cpu_core_load = _Percentage("appliance_cpu_core_load_ratio", "appliance_cpu_core_load_percent",
                                         "Per-core CPU load, tegrastats (off: absent)", ["core"], r)
        self.cpu_core_freq = Gauge("appliance_cpu_core_freq_hertz", "Per-core CPU clock, tegrastats", ["core"],
                                   registry=r)
        self.ram_used = Gauge("appliance_tegrastats_ram_used_bytes", "RAM in use (CPU and GPU: unified memory)",
                              registry=r)
        self.swap_used = Gauge("appliance_tegrastats_swap_used_bytes", "SWAP in use, tegrastats", registry=r)
        self.temperature = Gauge("appliance_tegrastats_temperature_celsius", "Temperature, tegrastats",
                                 ["sensor"], registry=r)
        self.power = Gauge("appliance_tegrastats_power_watts", "Power rail (instantaneous), tegrastats", ["rail"],
                           registry=r)

    def record(self, reading: TegraReading | None, restarts: int) -> None:
        self.up.set(0 if reading is None else 1)
        self.restarts.count(restarts)
        if reading is None:
            return
        for gauge, value in ((self.gpu_load, reading.gpu_percent), (self.gpu_freq, _hertz(reading.gpu_freq_mhz)),
                             (self.emc_load, reading.emc_percent), (self.emc_freq, _hertz(reading.emc_freq_mhz))):
            if value is not None:
                gauge.set(value)  # a _Percentage takes percent, a Gauge its own unit
        if reading.ram_used_mb is not None:
            self.ram_used.set(reading.ram_used_mb * 1024 * 1024)
        if reading.swap_used_mb is not None:
            self.swap_used.set(reading.swap_used_mb * 1024 * 1024)
        for index, core in enumerate(reading.cpus):
            if core.load_percent is None:  # powered down: no sample rather than a misleading 0 %
                for gauge in (self.cpu_core_load, self.cpu_core_freq):
                    try:
                        gauge.remove(str(index))
                    except KeyError:  # prometheus_client before 0.20 raises for a label set it never had
                        pass
                continue
            self.cpu_core_load.labels(core=str(index)).set(core.load_percent)
            if core.freq_mhz is not None:
                self.cpu_core_freq.labels(core=str(index)).set(core.freq_mhz * 1e6)
        for sensor, celsius in reading.temperatures_c.items():
            self.temperature.labels(sensor=sensor).set(celsius)
        for rail, milliwatts in reading.power_mw.items():
            self.power.labels(rail=rail).set(milliwatts / 1000.0)


class _Percentage:
    """A share measured in percent, exported as a ratio (0..1) and, for one more version, as its deprecated
    ``_percent`` twin (0..100) whose HELP names the new metric. ``set`` and ``labels(...).set`` take percent."""

    def __init__(self, name: str, old_name: str, what: str, labels: Sequence[str], r: CollectorRegistry) -> None:
        self.ratio = Gauge(name, f"{what}, as a ratio (0..1)", labels, registry=r)
        self.percent = Gauge(old_name, f"DEPRECATED, removed in the next version: use {name} (0..1). {what}, in "
                             "percent (0-100)", labels, registry=r)

    def set(self, percent: float) -> None:
        self.ratio.set(percent / 100.0)
        self.percent.set(percent)

    def labels(self, **labels: str) -> _LabelledPercentage:
        return _LabelledPercentage(self, labels)

    def remove(self, *values: str) -> None:
        for gauge in (self.ratio, self.percent):
            gauge.remove(*values)


class _LabelledPercentage:
    def __init__(self, parent: _Percentage, labels: dict[str, str]) -> None:
        self._parent, self._labels = parent, labels

    def set(self, percent: float) -> None:
        self._parent.ratio.labels(**self._labels).set(percent / 100.0)
        self._parent.percent.labels(**self._labels).set(percent)


def _hertz(mhz: float | None) -> float | None:
    return None if mhz is None else mhz * 1e6
