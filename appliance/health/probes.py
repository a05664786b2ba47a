"""``/livez`` and ``/readyz``, in the Kubernetes convention, read from the health summary.

``/livez``: the process answers and its frame path progresses (what a container HEALTHCHECK or an orchestrator's
liveness probe restarts on; a dead camera or a model switch never fails it). ``/readyz``: the level is ``ok``,
every configured camera streaming and nothing held back or dropped (don't rely on its results now).
Both answer 200 or 503 with a small JSON body: the level and its reasons.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route


def _answer(ok: bool, summary: dict[str, Any]) -> Response:
    body = {"ok": ok, "level": summary.get("level"), "reasons": summary.get("reasons", [])}
    return Response(json.dumps(body), status_code=200 if ok else 503, media_type="application/json")


def is_live(summary: dict[str, Any]) -> bool:
    """Alive: the summary says so (``live``); one without it (a bare health callable) is alive when ``ok``."""
    return bool(summary.get("live", summary.get("ok")))


def is_ready(summary: dict[str, Any]) -> bool:
    return summary.get("level", "ok" if summary.get("ok") else "failed") == "ok"


def probe_routes(health: Callable[[], dict]) -> list[BaseRoute]:
    async def livez(_request: Request) -> Response:
        summary = await run_in_threadpool(health)
        return _answer(is_live(summary), summary)

    async def readyz(_request: Request) -> Response:
        summary = await run_in_threadpool(health)
        return _answer(is_ready(summary), summary)

    return [Route("/livez", livez), Route("/readyz", readyz)]
