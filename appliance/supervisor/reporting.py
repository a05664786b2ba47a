"""What the appliance reports about itself, read from its live handles (each None until its start step ran):

- ``pipeline_progressing``: whether systemd's watchdog is fed;
- ``status_line``: systemd's ``STATUS=`` and the ready log line;
- ``health_summary``: ``/healthz``, ``appliance status`` and the ``status`` MQTT command; ``service_readings``
  adds what an operator reads there besides health (uptime, inference rate and latency, spool, engine, OTA);
- ``health_for_mqtt``: the periodic MQTT health message (its ``cameras`` and flat ``system`` readings);
- ``record_metrics``: the tick's readings of the publisher and the scheduler into the appliance's metrics;
- ``render_metrics``: ``/metrics``, the appliance's own followed by Triton's;
- ``report_ota_status``: each OTA step as a metric and the retained MQTT ``ota/status``.

Pure functions: the Appliance passes what they read, so nothing here holds state or starts anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import appliance
from appliance import diskspace
from appliance.appconfig.app import AppConfig
from appliance.detector.engines.progress import ProgressEvent
from appliance.detector.serving.recovery import PipelineRecovery, PipelineState
from appliance.health.levels import Readings, assess
from appliance.health.metrics import ApplianceMetrics
from appliance.health.system import SystemMonitor, SystemReading
from appliance.health.tegrastats import TegrastatsMonitor, system_fields
from appliance.mqtt.messages import epoch_ms, iso_utc_ms, ota_status_payload
from appliance.ota.status import STATES, OtaStatus
from appliance.pipeline.scheduler import Scheduler
from appliance.supervisor.cameras import SupervisedCamera
from appliance.triton.errors import ServerStateError, TritonError

if TYPE_CHECKING:  # annotations only: importing them here would load paho and the Triton wrapper for nothing
    from appliance.capture.health import CaptureHealth
    from appliance.detector.engines.manager import InstalledEngine
    from appliance.detector.serving.router import Router
    from appliance.mqtt.publisher import MqttPublisher
    from appliance.restream.tap import Restream
    from appliance.triton.server import Server


def capture_readings(health: CaptureHealth | None) -> dict[str, Any]:
    """A camera's capture counters for the health summary and MQTT health: ``ring_drops`` are frames overwritten
    before inference read them (latest wins), ``ring_full`` frames the camera could not write because every
    other slot was leased."""
    if health is None:
        return {}
    return {"size": f"{health.width}x{health.height}", "fps": round(health.fps, 2), "frames": health.frames,
            "ring_drops": health.drops,
            "ring_full": health.ring_full, "decode_errors": health.decode_errors, "reconnects": health.reconnects,
            "stalls": health.stalls}


def waiting_readings(camera: SupervisedCamera) -> dict[str, Any]:
    """For a camera waiting for its source: why (``waiting_for``) and since when (``waiting_since``, ISO UTC)."""
    if camera.waiting_since is None or camera.health is None:
        return {}
    return {"waiting_for": camera.health.last_error, "waiting_since": iso_utc_ms(epoch_ms(camera.waiting_since))}


def pipeline_progressing(scheduler: Scheduler | None, recovery: PipelineRecovery | None, now: float,
                         stall_s: float) -> bool:
    """Feed the watchdog while frames finish, or while no camera has frames to offer (a dead camera is
    handled by capture restarts, not by restarting the whole service). A pipeline held for model recovery
    has nothing in flight but is not progressing: past ``stall_s`` (``watchdog_stall_s``) systemd may restart
    the service."""
    if scheduler is None:
        return False
    if now - scheduler.last_progress < stall_s:
        return True
    broken = recovery.broken_since if recovery is not None else None
    return scheduler.inflight == 0 and (broken is None or now - broken < stall_s)


def status_line(cameras: Mapping[str, SupervisedCamera], configured: int, inferences_per_s: float,
                publisher: MqttPublisher | None, recovery: PipelineRecovery | None, last_error: str,
                late: int = 0) -> str:
    """``configured``: cameras running from the config; ``late``: those waiting for their size besides them
    (appliance.supervisor.latecameras); ``inferences_per_s``: the recent rate (FramePath.rate, last 10 s)."""
    streaming = sum(1 for c in cameras.values() if c.published_state == "streaming")
    mqtt = publisher.stats().state.value if publisher else "off"
    waiting = late + sum(1 for c in cameras.values() if c.published_state == "waiting")
    held = f" ({waiting} waiting for their source)" if waiting else ""
    text = f"{streaming}/{configured + late} cameras streaming{held}, {inferences_per_s:.1f} inferences/s, mqtt {mqtt}"
    if recovery is not None and recovery.state is not PipelineState.SERVING:
        text += f"; {recovery.status().line()}"
        return text  # the pipeline's state is the error that matters now
    return text + (f"; last error: {last_error}" if last_error else "")


def health_summary(cameras: Mapping[str, SupervisedCamera], scheduler: Scheduler | None, server: Server | None,
                   router: Router | None, recovery: PipelineRecovery | None, *, progressing: bool,
                   status: str, problems: Sequence[str] = (),
                   late: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """``progressing``: the watchdog's verdict; ``status``: the status line; ``problems``: more reasons for a
    degraded level (results held or dropped, a disk low on space); ``late``: the readings of cameras that wait for
    their size (supervisor.late). ``level`` and ``reasons``:
    appliance.health.levels; ``ok`` is any level but failed, ``live`` what /livez answers."""
    per_camera: dict[str, Mapping[str, Any]] = {}
    for slot in scheduler.cameras() if scheduler else []:
        cam = cameras[slot.camera_id]
        detail = cam.health.last_error if cam.health and cam.published_state != "streaming" else ""
        per_camera[slot.camera_id] = {"state": cam.published_state, "inferred": slot.submitted,
                                      "skipped": slot.skipped, "dropped": slot.dropped, "errors": slot.errors,
                                      **capture_readings(cam.health), **waiting_readings(cam),
                                      **({"detail": detail} if detail else {})}
    per_camera.update(late or {})  # cameras waiting for their size: no scheduler slot yet
    route = router.current() if router is not None else None
    triton_ok, serving_ok = _triton_readiness(server, route.ensemble if route else None)
    pipeline = recovery.status() if recovery is not None else None
    broken = pipeline is not None and pipeline.state is not PipelineState.SERVING
    level, reasons = assess(Readings(progressing, serving_ok, pipeline.line() if pipeline and broken else None,
                                     per_camera, problems))
    return {"ok": level != "failed", "level": level, "reasons": reasons, "live": progressing,
            "triton_ready": triton_ok, "status": status, "model": route.label if route else None,
            "served": {"model": route.model, "version": route.version or "base"} if route else None,
            "cameras": per_camera, "pipeline": pipeline.to_dict() if pipeline is not None else None}


def _triton_readiness(server: Server | None, ensemble: str | None) -> tuple[bool, bool]:
    """(Triton's server-wide readiness, the served ensemble's): only the second counts for the level, as the
    first is false while an OTA switch unloads the old version."""
    try:
        triton_ok = bool(server is not None and server.ready)
        serving_ok = bool(server is not None and server.live and (ensemble is None or server.model_ready(ensemble)))
    except ServerStateError:  # stopping or stopped (the publisher's last health message comes after)
        return False, False
    except TritonError:  # the ensemble unknown to it: not serving
        return triton_ok, False
    return triton_ok, serving_ok


def problems(publisher: MqttPublisher | None, system: SystemMonitor, config: AppConfig) -> list[str]:
    """Reasons for a degraded level besides the cameras: results not reaching the spool, the state dir (the one
    ``system`` reads) low on space."""
    state_dir = system.state_dir
    low = diskspace.low_space(state_dir, config.health.min_free_mb * diskspace.MB) if state_dir else None
    return result_problems(publisher) + ([low] if low else [])


def result_problems(publisher: MqttPublisher | None) -> list[str]:
    """Why results are not reaching the spool now (a full disk): the level's reason, while it lasts."""
    if publisher is None:
        return []
    stats = publisher.stats()
    if not stats.write_error:
        return []
    dropped = sum(stats.results_dropped.values())
    what = "disk full" if "full" in stats.write_error.lower() else "spool not writable"
    return [f"{what}: {stats.held} result(s) held in memory, {dropped} dropped (counted) so far: "
            f"{stats.write_error}"]


def service_readings(*, uptime_s: float, scheduler: Scheduler | None, recent_per_s: float,
                     latencies_ms: Iterable[float], publisher: MqttPublisher | None, engine: InstalledEngine | None,
                     engine_progress: ProgressEvent | None, ota: Mapping[str, Any] | None) -> dict[str, Any]:
    """The rest of the health summary. ``uptime_s``: since the appliance was made; ``recent_per_s``: the frame
    path's rate over its window (FramePath.rate, last 10 s); ``latencies_ms``: its newest capture-to-result
    times; ``engine_progress``: the build's latest event (while ``engine`` is None); ``ota``:
    ``OtaManager.status()``."""
    inferred = sum(s.submitted for s in scheduler.cameras()) if scheduler else 0
    return {"version": appliance.__version__, "uptime_s": round(uptime_s, 1),
            "inference": {"inferred": inferred, "per_s": round(recent_per_s, 2),
                          "per_s_since_start": round(inferred / max(1e-6, uptime_s), 2),
                          "latency_ms": latency_percentiles(latencies_ms)},
            "spool": spool_readings(publisher), "engine": engine_readings(engine, engine_progress),
            "ota": ota_readings(ota)}


def latency_percentiles(latencies_ms: Iterable[float]) -> dict[str, Any] | None:
    """p50 and p99 of the newest capture-to-result latencies (``frames``: how many); None before the first."""
    values = np.fromiter(latencies_ms, dtype=np.float64)
    if values.size == 0:
        return None
    p50, p99 = np.percentile(values, (50, 99))
    return {"p50": round(float(p50), 1), "p99": round(float(p99), 1), "frames": int(values.size)}


def spool_readings(publisher: MqttPublisher | None) -> dict[str, Any] | None:
    if publisher is None:
        return None
    stats = publisher.stats()
    spool = stats.spool
    return {"mqtt": stats.state.value, "broker": stats.broker, "backlog": spool.backlog, "bytes": spool.bytes,
            "acked": stats.acked, "dropped": spool.dropped_oldest + spool.dropped_newest + spool.dropped_expired,
            "held": stats.held, "results_dropped": sum(stats.results_dropped.values()),
            "results_dropped_by": [{"camera_id": c, "kind": k, "reason": r, "count": n}
                                   for (c, k, r), n in sorted(stats.results_dropped.items())]}


def engine_readings(engine: InstalledEngine | None, progress: ProgressEvent | None) -> dict[str, Any] | None:
    """The served base engine (``state``: ``cached`` or ``built``), or the build under way."""
    if engine is not None:
        return {"model": engine.model, "state": "cached" if engine.cache_hit else "built",
                "builder": engine.builder, "triton_kind": engine.triton_kind, "precision": engine.precision,
                "key": engine.key[:16], "build_s": engine.build_seconds}
    if progress is not None:
        return {"model": progress.model, "state": "building", "phase": progress.phase,
                "percent": round(progress.percent, 1)}
    return None


def ota_readings(status: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``OtaManager.status()`` less its lists: the active version (None: the base model), the version floor,
    and the latest update step this run (None: no update since start)."""
    if status is None:
        return None
    last = status.get("last") or {}
    return {"active": status.get("active"), "version_floor": status.get("version_floor"),
            "state": last.get("state"), "version": last.get("version"), "message": last.get("message"),
            "code": last.get("code")}


def pipeline_readings(recovery: PipelineRecovery | None) -> dict[str, Any]:
    """The pipeline's state for the MQTT health message's ``system`` readings (flat: numbers and strings)."""
    if recovery is None:
        return {}
    status = recovery.status()
    return {"pipeline_state": status.state.value, "pipeline_failures": status.failures,
            "model_reloads": status.reloads,
            "pipeline_error": status.line() if status.state is not PipelineState.SERVING else None}


def health_for_mqtt(summary: Mapping[str, Any], reading: SystemReading, tegrastats: TegrastatsMonitor | None,
                    recovery: PipelineRecovery | None) -> dict[str, Any]:
    """``summary``: ``health_summary``'s; ``reading``: the system's now; ``tegrastats`` None where it is off."""
    system: dict[str, Any] = {"cpu_percent": reading.cpu_percent,
                              "mem_available_bytes": reading.mem_available_bytes,
                              "state_dir_free_bytes": reading.state_dir_free_bytes,
                              **{f"temp_{k}": v for k, v in reading.temperatures_c.items()}}
    if tegrastats is not None and tegrastats.active:
        tegra = tegrastats.latest()
        system["tegrastats"] = tegrastats.health()
        system.update(system_fields(tegra) if tegra is not None else {})
    return {"cameras": summary["cameras"], "system": {**system, **pipeline_readings(recovery)}}


def record_metrics(metrics: ApplianceMetrics, publisher: MqttPublisher | None, scheduler: Scheduler | None,
                   restream: Restream | None = None) -> None:
    """Once a tick: the MQTT session and spool, requests in flight, each camera's frames skipped by the
    scheduler (a newer frame replaced them before inference took one: latest wins), the restream's mounts."""
    if restream is not None:
        metrics.record_restream(restream.readings())
    if publisher is not None:
        stats = publisher.stats()
        metrics.mqtt_connected.set(1 if stats.state.value == "connected" else 0)
        metrics.record_spool(backlog=stats.spool.backlog, size_bytes=stats.spool.bytes, acked=stats.acked,
                             dropped={"oldest": stats.spool.dropped_oldest, "newest": stats.spool.dropped_newest,
                                      "expired": stats.spool.dropped_expired})
        metrics.record_results_dropped(stats.results_dropped)
    if scheduler is not None:
        metrics.inflight.set(scheduler.inflight)
        for slot in scheduler.cameras():
            metrics.record_skipped(slot.camera_id, slot.skipped)


def render_metrics(metrics: ApplianceMetrics, server: Server | None) -> bytes:
    text = metrics.render()
    if server is not None:
        text += server.metrics().encode()
    return text


def report_ota_status(metrics: ApplianceMetrics, publisher: MqttPublisher | None, device_id: str,
                      status: OtaStatus) -> None:
    """Every OTA step (the manager logs it): a metric, and the retained ``<prefix>/<device>/ota/status``."""
    for state in STATES:
        metrics.ota_state.labels(state=state).set(1 if state == status.state else 0)
    if publisher is not None:
        publisher.publish_device_event("ota/status", ota_status_payload(device_id, status.to_dict()), retain=True)
