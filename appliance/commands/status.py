"""``appliance status``: what a running appliance is doing, from its local health endpoint."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from appliance.appconfig.app import AppConfig
from appliance.config.validate import validate_document
from appliance.config.yamlsource import ConfigError, read_yaml
from appliance.exitcodes import ExitCode
from appliance.paths import installed_config

DEFAULT_URL = "http://127.0.0.1:9108"


# The monitoring-plugin convention (Nagios, Icinga): 0 OK, 1 WARNING, 2 CRITICAL; 3 UNKNOWN is NO_ANSWER.
LEVEL_EXIT = {"ok": 0, "degraded": 1, "failed": 2}
VERDICT = {"ok": "OK", "degraded": "WARNING", "failed": "CRITICAL"}


def level_of(health: dict[str, Any]) -> str:
    """The summary's level; one from an appliance without levels is ok or failed by its ``ok``."""
    level = health.get("level")
    return level if level in LEVEL_EXIT else ("ok" if health.get("ok") else "failed")


def run(args: argparse.Namespace) -> int:
    """Print the health summary; exit 0, 1 or 2 for the level ok, degraded or failed (3: no answer)."""
    try:
        url, source = health_url(args.url, args.config)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.NO_ANSWER  # UNKNOWN: 2 would read as CRITICAL to a monitoring plugin
    try:
        health = fetch_health(url)
    except OSError as exc:
        print(f"no answer from {url} ({source}; {exc}): is the appliance running (systemctl status appliance) "
              "with health enabled? --url or --config names another address", file=sys.stderr)
        return ExitCode.NO_ANSWER
    print(json.dumps(health, indent=2) if args.json else format_status(health))
    return LEVEL_EXIT[level_of(health)]


def health_url(url: str | None, config: str | None) -> tuple[str, str]:
    """(the health endpoint, where it came from): ``url``, else the health address of ``config`` or of an
    installed device's config, else the default. ValueError for a config that cannot be read."""
    if url:
        return url, "--url"
    path = Path(config) if config else installed_config()
    if path is None:
        return DEFAULT_URL, "the default address"
    try:
        doc = read_yaml(path)
        health = validate_document(doc, AppConfig).health
    except ConfigError as exc:
        raise ValueError("; ".join(str(i) for i in exc.issues)) from None
    if health.port == 0:
        raise ValueError(f"{path}: health.port is 0 (any free port): give the address with --url")
    host = "127.0.0.1" if health.host in ("0.0.0.0", "::", "") else health.host
    return f"http://{host}:{health.port}", f"health.host and health.port of {path}"


def fetch_health(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """GET <url>/healthz; a 503 still carries the summary (the appliance is up but not healthy)."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/healthz", timeout=timeout_s) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 503:
            return json.loads(exc.read())
        raise


def format_status(health: dict[str, Any]) -> str:
    """The summary for a person, read at a glance: the verdict and status line, one labelled line per part of
    the service, then a table of cameras. Fields an older appliance does not send are left out."""
    lines = [f"{VERDICT[level_of(health)]}: {health.get('status', '')}"]
    lines += [f"  - {reason}" for reason in health.get("reasons") or []]
    rows = [("appliance", _appliance_line(health)), ("model", _model_line(health)),
            ("triton", "ready" if health.get("triton_ready") else "NOT READY"),
            ("pipeline", format_pipeline(health["pipeline"]) if health.get("pipeline") else None),
            ("inference", _inference_line(health.get("inference"))),
            ("latency", _latency_line(health.get("inference"))), ("spool", _spool_line(health.get("spool"))),
            ("ota", _ota_line(health.get("ota")))]
    shown = [(label, text) for label, text in rows if text]
    width = max(len(label) for label, _ in shown)
    lines += [f"  {label:<{width}}  {text}" for label, text in shown]
    cameras = health.get("cameras") or {}
    if cameras:
        lines.append("")
        sized = any("size" in cam for cam in cameras.values())  # the ring's frame size (configured or the source's)
        lines += _table(["CAMERA", "STATE", *(["SIZE"] if sized else []), "FPS", "INFERRED", "SKIPPED", "DROPPED",
                         "ERRORS", "RECONNECTS"],
                        [[camera_id, _camera_state(cam.get("state")), *([str(cam.get("size") or "-")] if sized else []),
                          _number(cam.get("fps"), "{:.1f}"),
                          *(_number(cam.get(k)) for k in ("inferred", "skipped", "dropped", "errors", "reconnects"))]
                         for camera_id, cam in sorted(cameras.items())])
        lines += [f"  {camera_id}: waiting since {cam.get('waiting_since')}: {cam.get('waiting_for')}"
                  for camera_id, cam in sorted(cameras.items()) if cam.get("state") == "waiting"]
    counts = _count_rows(health.get("analytics") or {})
    if counts:
        lines.append("")
        lines += _table(["CAMERA", "ZONE/LINE", "NOW", "ENTERED", "EXITED", "IN", "OUT"], counts)
        lines += [f"  {camera_id}: zones and lines from "
                  f"{'the config file' if cam['layout'] == 'config' else cam['layout']}"
                  for camera_id, cam in sorted((health.get("analytics") or {}).items()) if cam.get("layout")]
    return "\n".join(lines)


def _count_rows(analytics: dict[str, Any]) -> list[list[str]]:
    """One row per zone and line of each camera with analytics, then its tracks and events."""
    rows = []
    for camera_id, cam in sorted(analytics.items()):
        for zone, c in cam.get("zones", {}).items():
            rows.append([camera_id, f"zone {zone}", *(_number(c.get(k)) for k in ("current", "entered", "exited")),
                         "", ""])
        for line, c in cam.get("lines", {}).items():
            rows.append([camera_id, f"line {line}", "", "", "", _number(c.get("in")), _number(c.get("out"))])
        by_type = ", ".join(f"{k} {v}" for k, v in sorted(cam.get("events_by_type", {}).items())) or "none"
        rows.append([camera_id, f"({_number(cam.get('active_tracks'))} tracks; events: {by_type})", "", "", "", "",
                     ""])
    return rows


def _camera_state(state: str | None) -> str:
    """Shouted when the camera needs a look (stalled, error), as the pipeline's crash loop is."""
    return (state or "unknown").upper() if state in ("stalled", "error") else (state or "unknown")


def _appliance_line(health: dict[str, Any]) -> str | None:
    if "version" not in health:
        return None
    uptime = health.get("uptime_s")
    return f"{health['version']}, up {format_duration(uptime)}" if uptime is not None else str(health["version"])


def _model_line(health: dict[str, Any]) -> str | None:
    served, engine = health.get("served"), health.get("engine")
    text = f"{served['model']}, version {served['version']}" if served else health.get("model")
    if engine and engine.get("state") == "building":
        return (f"{text}; " if text else "") + (f"engine for {engine['model']} building: {engine['phase']} "
                                                f"{engine['percent']:.0f} %")
    if engine:
        made = "from cache" if engine.get("state") == "cached" else f"built in {engine.get('build_s') or 0:.0f} s"
        engine_text = (f"engine {engine.get('builder')} {engine.get('precision')} ({engine.get('triton_kind')}), "
                       f"{made}")
        return f"{text}; {engine_text}" if text else engine_text
    return text


def _inference_line(inference: dict[str, Any] | None) -> str | None:
    if not inference:
        return None
    return (f"{inference.get('per_s', 0):.1f}/s over the last 10 s ({inference.get('per_s_since_start', 0):.1f}/s "
            f"since start), {inference.get('inferred', 0)} frames")


def _latency_line(inference: dict[str, Any] | None) -> str | None:
    latency = (inference or {}).get("latency_ms")
    if not latency:
        return None
    return (f"p50 {latency['p50']:.0f} ms, p99 {latency['p99']:.0f} ms, capture to result "
            f"(newest {latency['frames']} frames)")


def _spool_line(spool: dict[str, Any] | None) -> str | None:
    if not spool:
        return None
    mqtt = spool.get("mqtt", "unknown")
    broker = spool.get("broker")
    where = f" ({'to' if mqtt == 'connected' else 'trying'} {broker})" if broker else ""
    held = (f"{spool['held']} result(s) HELD IN MEMORY (spool not writable), " if spool.get("held") else "")
    held += f"{spool['results_dropped']} result(s) DROPPED, " if spool.get("results_dropped") else ""
    return (f"{spool.get('backlog', 0)} message(s) waiting ({format_bytes(spool.get('bytes', 0))}), {held}"
            f"{spool.get('dropped', 0)} dropped, {spool.get('acked', 0)} acknowledged; mqtt "
            + (mqtt if mqtt == "connected" else mqtt.upper()) + where)


def _ota_line(ota: dict[str, Any] | None) -> str | None:
    if not ota:
        return None
    text = f"active {ota.get('active') or 'base'}"
    if ota.get("state"):
        last = f"last update {ota.get('version') or ''}: {ota['state']}".replace(" :", ":")
        last += f" ({ota['code']})" if ota.get("code") else ""
        text += f"; {last}: {ota.get('message', '')}" if ota.get("message") else f"; {last}"
    else:
        text += "; no update since start"
    return text


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Columns as wide as their widest cell; the first two (names) left-aligned, numbers right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                         for i, (cell, w) in enumerate(zip(cells, widths))).rstrip()
    return [line(headers)] + [line(row) for row in rows]


def _number(value: Any, form: str = "{}") -> str:
    return "-" if value is None else form.format(value)


def format_duration(seconds: float) -> str:
    """``2d 3h``, ``3h 12m``, ``12m 5s``, ``5s``: the two largest units, as systemctl status shows uptime."""
    total = int(seconds)
    parts = [(total // 86400, "d"), (total % 86400 // 3600, "h"), (total % 3600 // 60, "m"), (total % 60, "s")]
    while len(parts) > 1 and parts[0][0] == 0:
        parts.pop(0)
    return " ".join(f"{n}{unit}" for n, unit in parts[:2])


def format_bytes(size: int) -> str:
    value, unit = float(size), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"


_PIPELINE_STATES = {"crash_loop": "CRASH LOOP", "recovering": "RECOVERING"}  # shouted: they need a look


def format_pipeline(pipeline: dict[str, Any]) -> str:
    """The served pipeline's model recovery (appliance.detector.serving.recovery.RecoveryStatus.to_dict())."""
    state = pipeline.get("state", "unknown")
    head = _PIPELINE_STATES.get(state, state)
    head += f" ({pipeline.get('route')})" if pipeline.get("route") else ""
    if state == "serving":
        return (f"{head}, {pipeline.get('reloads', 0)} model reload(s), "
                f"{pipeline.get('failures', 0)} recent failure(s)")
    retry = pipeline.get("next_retry_s")
    return (head + f": {', '.join(pipeline.get('models') or [])}: {pipeline.get('reason', '')}; "
            f"{pipeline.get('failures', 0)} failure(s), attempt {pipeline.get('attempt', 0)}"
            + (f", next reload in {retry:.0f} s" if retry is not None else ""))
