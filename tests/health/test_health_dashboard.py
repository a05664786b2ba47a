"""The Grafana dashboard (docs/grafana/appliance.json): importable as Grafana exports it, and its PromQL reading
(tests/support/promql.py) finds the metric names, so a panel naming a metric /metrics lacks fails the check.
Against the running appliance's real /metrics: tests/supervisor/test_supervisor_status_live.py."""

from __future__ import annotations

import copy
from pathlib import Path

from support.promql import dashboard_queries, exposed_names, load_dashboard, metric_names, unknown_metrics

from appliance.health.metrics import ApplianceMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "appliance.json"


def test_metric_names_are_read_from_promql() -> None:
    assert metric_names('histogram_quantile(0.99, sum by (le) (rate(appliance_stage_latency_seconds_bucket'
                        '{instance=~"$instance", stage="capture_to_result"}[$__rate_interval])))') == \
        {"appliance_stage_latency_seconds_bucket"}
    assert metric_names("sum by (model) (rate(nv_inference_queue_duration_us[5m])) / 1000 / clamp_min(sum by "
                        "(model) (rate(nv_inference_request_success[5m] offset 1h)), 1)") == \
        {"nv_inference_queue_duration_us", "nv_inference_request_success"}
    assert metric_names('a_total{reason="by (x) rate"} * on (camera) group_left (state) b == 1') == {"a_total", "b"}
    assert metric_names('label_values(appliance_camera_frames_per_second{instance=~"$instance"}, camera)') == \
        {"appliance_camera_frames_per_second"}
    assert metric_names("1 - appliance_camera_streaming{camera=~\"$camera\"}") == {"appliance_camera_streaming"}


def test_exposed_names_include_declared_families_without_samples() -> None:
    names = exposed_names(ApplianceMetrics().render().decode())
    # labelled families with no sample yet are declared by their TYPE line; histograms by their series
    assert {"appliance_frames_dropped_total", "appliance_stage_latency_seconds_bucket",
            "appliance_stage_latency_seconds_count", "appliance_build_info"} <= names
    assert "appliance_frames_dropped" not in names  # a counter is selected by its _total series only


def test_a_panel_naming_a_metric_that_does_not_exist_fails_the_check() -> None:
    exposition = ApplianceMetrics().render().decode()
    dashboard = {"panels": [
        {"title": "ok", "targets": [{"refId": "A", "expr": "rate(appliance_frames_inferred_total[5m])"}]},
        {"title": "row", "type": "row", "panels": [  # a collapsed row keeps its panels inside it
            {"title": "old name", "targets": [{"refId": "B", "expr": "rate(appliance_frames_inferred[5m])"}]}]},
    ], "templating": {"list": [{"name": "camera", "type": "query",
                                "query": {"query": "label_values(appliance_camera_fps, camera)"}}]}}
    assert unknown_metrics(dashboard, exposition) == [
        "panel 'old name' target B: appliance_frames_inferred is not in /metrics (rate(appliance_frames_inferred[5m]))",
        "variable 'camera': appliance_camera_fps is not in /metrics (label_values(appliance_camera_fps, camera))",
    ]


def test_the_dashboard_is_importable_and_covers_what_an_operator_watches() -> None:
    dashboard = load_dashboard(DASHBOARD)
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}" and set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]) > 0, panel["title"]
    used = {name for _where, expr in dashboard_queries(dashboard) for name in metric_names(expr)}
    # per-camera fps, inference rate, latency from the histogram, spool backlog, drops by reason, MQTT, states
    assert {"appliance_camera_frames_per_second", "appliance_frames_inferred_total",
            "appliance_stage_latency_seconds_bucket", "appliance_spool_messages", "appliance_frames_dropped_total",
            "appliance_spool_dropped_total", "appliance_mqtt_connected", "appliance_pipeline_state",
            "appliance_ota_state"} <= used
    # the check itself fails on this dashboard when a name is misspelt
    broken = copy.deepcopy(dashboard)
    broken["panels"][0]["targets"][0]["expr"] = "appliance_mqtt_conected"
    problems = unknown_metrics(broken, ApplianceMetrics().render().decode())
    assert any("appliance_mqtt_conected is not in /metrics" in p for p in problems)


def test_the_dashboard_reads_no_deprecated_metric() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    metrics = ApplianceMetrics()
    metrics.record_tegrastats(None)
    deprecated = {f.name for f in text_string_to_metric_families(metrics.render().decode())
                  if f.documentation.startswith("DEPRECATED")}
    assert "appliance_cpu_percent" in deprecated
    used = {name for _where, expr in dashboard_queries(load_dashboard(DASHBOARD)) for name in metric_names(expr)}
    assert not used & deprecated, used & deprecated
