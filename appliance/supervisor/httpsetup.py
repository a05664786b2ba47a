"""The appliance's HTTP endpoint: health and metrics always, the operator's page and its files when enabled."""

from __future__ import annotations

import logging
from typing import Any, Callable

from appliance.appconfig.app import AppConfig
from appliance.health.server import HealthServer
from appliance.supervisor.page import ApplianceSite
from appliance.supervisor.running import Running
from appliance.web.auth import is_loopback, make_auth
from appliance.web.routes import page_routes

log = logging.getLogger(__name__)


def open_http(config: AppConfig, running: Running, health_summary: Callable[[], dict[str, Any]],
              metrics_text: Callable[[], bytes], camera_ids: Callable[[], list[str]]) -> HealthServer:
    """The endpoint on ``config.health``'s address, its routes chosen by ``config.web``; the caller closes it.
    ``camera_ids``: the cameras that run now (a reload adds and removes cameras)."""
    health, web = config.health, config.web
    snapshots, inference = running.inference.snapshots, running.inference
    auth = make_auth(web, health.host) if web.enabled else None
    routes = inference.clip_routes(auth, web.hosts)
    if auth is not None:
        site = ApplianceSite({"id": config.device.id, "name": config.device.name}, health_summary,
                             inference.layouts, camera_ids)
        routes += page_routes(site, auth, inference.live, inference.feed, hosts=web.hosts,
                              files=snapshots.store.http if snapshots else None,
                              video=inference.restream.page_video if inference.restream is not None else None)
    server = HealthServer(health.host, health.port, metrics_text, health_summary,
                          snapshots.store.http if snapshots else None, routes=routes, tls=web.tls)
    if web.enabled:
        log.info("the operator's page: %s://%s:%d/ (%s)", "https" if web.tls else "http", health.host,
                 server.port or health.port,
                 "no login: loopback only" if is_loopback(health.host) else "login required")
    return server
