"""The appliance's HTTP server (appliance.webserver) as the supervisor wires it: health and metrics, snapshots and
clips and, when ``web.enabled``, the operator's page on the same address, each route with its kind's limits.
Opened as the last start step, and again by a reload that changes ``health`` (enabled, host, port) or ``web``
(docs/supervisor.md, "Reload")."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from appliance.appconfig.app import AppConfig
from appliance.health.metrics import ApplianceMetrics
from appliance.health.routes import health_routes
from appliance.supervisor import reporting
from appliance.supervisor.page import ApplianceSite
from appliance.supervisor.running import Running
from appliance.web.auth import is_loopback, make_auth
from appliance.web.files import snapshot_routes
from appliance.web.routes import page_routes
from appliance.webserver.server import WebServer

log = logging.getLogger(__name__)


def open_http(config: AppConfig, running: Running, summary: Callable[[], dict[str, Any]],
              metrics: ApplianceMetrics, camera_ids: Callable[[], list[str]]) -> WebServer | None:
    """The server for ``config`` (None when ``health.enabled`` is false); a busy port is retried in the background
    (WebServer). ``camera_ids``: the cameras that run now (the page's /camera/<id>)."""
    health, web = config.health, config.web
    if not health.enabled:
        return None
    snapshots, inference = running.inference.snapshots, running.inference
    auth = make_auth(web, health.host) if web.enabled else None  # files behind the page's login when it is on
    routes = health_routes(lambda: reporting.render_metrics(metrics, running.server), summary)
    if snapshots is not None:
        routes += snapshot_routes(snapshots.store, auth, web.hosts)
    routes += inference.clip_routes(auth, web.hosts)
    if auth is not None:
        site = ApplianceSite({"id": config.device.id, "name": config.device.name}, summary, inference.layouts,
                             camera_ids)
        routes += page_routes(site, auth, inference.live, inference.feed, hosts=web.hosts,
                              video=inference.restream.page_video if inference.restream is not None else None)
    server = WebServer(health.host, health.port, routes, tls=web.tls)
    if web.enabled:
        log.info("the operator's page: %s://%s:%d/ (%s)", "https" if web.tls else "http", health.host,
                 server.port or health.port,
                 "no login: loopback only" if is_loopback(health.host) else "login required")
    return server
