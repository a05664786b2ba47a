"""ApplianceMetrics by Prometheus' conventions: counts kept elsewhere as absolute numbers become Counters named
``_total`` that grow by what is new (and survive their source starting again from zero), clocks in hertz, and
``appliance_build_info``."""

from __future__ import annotations

import platform
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

import appliance
from appliance.capture.health import CaptureHealth
from appliance.capture.layout import CaptureState
from appliance.health.metrics import ApplianceMetrics


def _samples(metrics: ApplianceMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(metrics.render().decode()) for s in family.samples}


def _types(metrics: ApplianceMetrics) -> dict[str, str]:
    """Every ``# TYPE`` line of the exposition text: name -> type, as a scraper reads it."""
    return {line.split()[2]: line.split()[3] for line in metrics.render().decode().splitlines()
            if line.startswith("# TYPE ")}


def _health(frames: int, drops: int, reconnects: int, fps: float = 9.5) -> CaptureHealth:
    return CaptureHealth(camera_id="line1", state=CaptureState.STREAMING, state_age_s=1.0, writer_alive=True,
                         writer_pid=1, generation=1, latest_seq=frames, frames=frames, drops=drops, ring_full=0,
                         decode_errors=0, reconnects=reconnects, stalls=0, fps=fps, last_frame_age_s=0.1,
                         last_error="")


def test_camera_counts_are_counters_that_grow_by_what_is_new() -> None:
    metrics = ApplianceMetrics()
    metrics.record_camera("line1", _health(frames=100, drops=3, reconnects=0), streaming=True)
    metrics.record_camera("line1", _health(frames=250, drops=5, reconnects=1), streaming=True)
    metrics.record_camera("line1", _health(frames=250, drops=5, reconnects=1), streaming=True)  # nothing new
    samples, cam = _samples(metrics), (("camera", "line1"),)
    assert samples[("appliance_camera_frames_total", cam)] == 250
    assert samples[("appliance_camera_dropped_frames_total", cam)] == 5
    assert samples[("appliance_camera_reconnects_total", cam)] == 1
    assert samples[("appliance_camera_frames_per_second", cam)] == 9.5
    types = _types(metrics)
    for name in ("appliance_camera_frames_total", "appliance_camera_dropped_frames_total",
                 "appliance_camera_reconnects_total", "appliance_camera_decode_errors_total",
                 "appliance_camera_stalls_total", "appliance_camera_ring_full_total"):
        assert types[name] == "counter", name
    assert types["appliance_camera_frames_per_second"] == "gauge"
    # the pre-convention gauge names are gone
    assert not {"appliance_camera_frames", "appliance_camera_fps", "appliance_camera_dropped_frames"} & set(types)


def test_a_source_that_starts_again_from_zero_does_not_make_the_counter_go_back() -> None:
    metrics = ApplianceMetrics()
    metrics.record_spool(backlog=4, size_bytes=900, acked=10, dropped={"oldest": 2, "newest": 0, "expired": 0})
    metrics.record_spool(backlog=0, size_bytes=0, acked=3, dropped={"oldest": 2, "newest": 1, "expired": 0})
    samples = _samples(metrics)
    assert samples[("appliance_mqtt_acked_total", ())] == 13  # 10, then a new publisher's 3
    assert samples[("appliance_spool_dropped_total", (("reason", "oldest"),))] == 2
    assert samples[("appliance_spool_dropped_total", (("reason", "newest"),))] == 1
    assert samples[("appliance_spool_dropped_total", (("reason", "expired"),))] == 0  # exported before any drop
    assert samples[("appliance_spool_messages", ())] == 0 and samples[("appliance_spool_bytes", ())] == 0
    assert _types(metrics)["appliance_spool_dropped_total"] == "counter"


def test_build_info_is_one_label_set_set_to_1() -> None:
    metrics = ApplianceMetrics()
    base = {"version": appliance.__version__, "python": platform.python_version(), "arch": platform.machine()}
    info = [(labels, v) for (name, labels), v in _samples(metrics).items() if name == "appliance_build_info"]
    assert info == [(tuple(sorted({**base, "triton_version": "", "builder": "", "triton_kind": ""}.items())), 1)]
    metrics.record_build_info(triton_version="2.51.0", builder="onnxruntime", triton_kind="onnxruntime")
    info = [(labels, v) for (name, labels), v in _samples(metrics).items() if name == "appliance_build_info"]
    assert info == [(tuple(sorted({**base, "triton_version": "2.51.0", "builder": "onnxruntime",
                                   "triton_kind": "onnxruntime"}.items())), 1)]  # replaced, not a second one


def test_docs_list_every_metric_by_its_exposed_name() -> None:
    """docs/supervisor.md: the "Metrics" table and the tegrastats "Metrics:" list name exactly what is exported."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "supervisor.md").read_text()
    table = docs[docs.index("### Metrics"):docs.index("### Grafana")]
    documented = set(re.findall(r"^\| `(appliance_[a-z_]+)` \|", table, re.M))
    tegra = next(line for line in docs[docs.index("### Jetson: tegrastats"):].split("\n- ")
                 if line.startswith("Metrics:"))
    documented |= set(re.findall(r"`(appliance_[a-z_]+)", tegra))
    metrics = ApplianceMetrics()
    metrics.record_tegrastats(None)  # registers the tegrastats gauges (a Jetson's)
    # prometheus_client adds a <counter>_created gauge to each counter without labels: not ours to document
    assert documented == {name for name in _types(metrics) if not name.endswith("_created")}


# (ratio, deprecated percent twin): what an operator's dashboards and alerts move between
SHARES = {"appliance_cpu_usage_ratio": "appliance_cpu_percent",
          "appliance_engine_build_ratio": "appliance_engine_build_percent",
          "appliance_gpu_load_ratio": "appliance_gpu_load_percent",
          "appliance_emc_load_ratio": "appliance_emc_load_percent",
          "appliance_cpu_core_load_ratio": "appliance_cpu_core_load_percent"}


def test_shares_are_ratios_and_the_old_percent_names_say_they_are_deprecated() -> None:
    from appliance.health.system import SystemReading

    metrics = ApplianceMetrics()
    metrics.record_tegrastats(None)
    metrics.record_system(SystemReading(37.5, None, None, {}, {}))
    metrics.engine_build.labels(model="yolov3-tiny").set(100.0)
    samples = _samples(metrics)
    assert samples[("appliance_cpu_usage_ratio", ())] == 0.375 and samples[("appliance_cpu_percent", ())] == 37.5
    assert samples[("appliance_engine_build_ratio", (("model", "yolov3-tiny"),))] == 1.0
    assert samples[("appliance_engine_build_percent", (("model", "yolov3-tiny"),))] == 100.0
    helps = {f.name: f.documentation for f in text_string_to_metric_families(metrics.render().decode())}
    for ratio, old in SHARES.items():
        assert "(0..1)" in helps[ratio] and "DEPRECATED" not in helps[ratio], helps[ratio]
        assert helps[old].startswith(f"DEPRECATED, removed in the next version: use {ratio} (0..1)"), helps[old]
    assert not [name for name in helps if name.endswith("_percent") and name not in SHARES.values()]


def test_clip_metrics_count_what_is_new_per_camera_and_reason() -> None:
    metrics = ApplianceMetrics()
    metrics.record_clips("dock", kept_bytes=5_000, recording=False, written=2, failed={"missing": 1})
    metrics.record_clips("dock", kept_bytes=7_000, recording=True, written=3, failed={"missing": 1, "error": 1})
    samples = _samples(metrics)
    assert samples[("appliance_recording_bytes", (("camera", "dock"),))] == 7_000
    assert samples[("appliance_recording", (("camera", "dock"),))] == 1
    assert samples[("appliance_clips_written_total", (("camera", "dock"),))] == 3
    assert samples[("appliance_clips_failed_total", (("camera", "dock"), ("reason", "missing")))] == 1
    assert samples[("appliance_clips_failed_total", (("camera", "dock"), ("reason", "error")))] == 1
