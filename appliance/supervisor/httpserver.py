"""The appliance's HTTP server: the health endpoint (/healthz, /metrics, snapshot files) and, when ``web.enabled``,
the operator's page on the same address. Opened as the last start step, and again by a reload that changes
``health`` (enabled, host, port) or ``web`` (docs/supervisor.md, "Reload")."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from appliance.appconfig.app import AppConfig
from appliance.health.metrics import ApplianceMetrics
from appliance.health.server import HealthServer
from appliance.supervisor import reporting
from appliance.supervisor.page import ApplianceSite
from appliance.supervisor.running import Running
from appliance.web.auth import is_loopback, make_auth
from appliance.web.routes import page_routes

log = logging.getLogger(__name__)


def open_http(config: AppConfig, running: Running, summary: Callable[[], dict[str, Any]],
              metrics: ApplianceMetrics, camera_ids: Callable[[], list[str]]) -> HealthServer | None:
    """The server for ``config`` (None when ``health.enabled`` is false); a busy port is retried in the background
    (HealthServer). ``camera_ids``: the cameras that run now (the page's /camera/<id>)."""
    health, web = config.health, config.web
    if not health.enabled:
        return None
    snapshots, inference = running.inference.snapshots, running.inference
    auth = make_auth(web, health.host) if web.enabled else None
    routes = inference.clip_routes(auth, web.hosts)  # behind the page's login when the page is on
    if auth is not None:
        site = ApplianceSite({"id": config.device.id, "name": config.device.name}, summary, inference.layouts,
                             camera_ids)
        routes += page_routes(site, auth, inference.live, inference.feed, hosts=web.hosts,
                              files=snapshots.store.http if snapshots else None,
                              video=inference.restream.page_video if inference.restream is not None else None)
    server = HealthServer(health.host, health.port, lambda: reporting.render_metrics(metrics, running.server),
                          summary, snapshots.store.http if snapshots else None, routes=routes, tls=web.tls)
    if web.enabled:
        log.info("the operator's page: %s://%s:%d/ (%s)", "https" if web.tls else "http", health.host,
                 server.port or health.port,
                 "no login: loopback only" if is_loopback(health.host) else "login required")
    return server
