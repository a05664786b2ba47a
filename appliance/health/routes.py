"""The health routes of the HTTP server (appliance.webserver): ``/metrics`` (ours plus Triton's), ``/healthz`` and
``/health`` (the JSON summary: 200 when ``ok``, else 503), ``/livez`` and ``/readyz`` (appliance.health.probes).
They are of the ``health`` kind: never capped, so no page client can delay them. The collectors run in a worker
thread."""

from __future__ import annotations

import json
from typing import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from appliance.health.probes import probe_routes
from appliance.webserver.routes import Routes

CONTENT_TYPE_PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


def health_routes(metrics: Callable[[], bytes], health: Callable[[], dict]) -> Routes:
    """``metrics()``: the Prometheus text; ``health()``: the summary."""

    async def metrics_page(_request: Request) -> Response:
        return Response(await run_in_threadpool(metrics), media_type=CONTENT_TYPE_PROMETHEUS)

    async def healthz(_request: Request) -> Response:
        summary = await run_in_threadpool(health)
        return Response(json.dumps(summary, default=str), status_code=200 if summary.get("ok") else 503,
                        media_type="application/json")

    return Routes.of(health=[Route("/metrics", metrics_page), Route("/healthz", healthz), Route("/health", healthz),
                             *probe_routes(health)])
