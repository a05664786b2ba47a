"""``/events/<event_id>.mp4``: an event's clip, with HTTP range requests (a browser's <video> seeks with them).

Served under the same rules as the event's snapshot (``/events/<event_id>.jpg``): with the page on, behind its
login and its host check; without the page, on the health port as the snapshots are. The file is written from
the camera's kept segments on request (appliance.pipeline.clipkeeper); 404 when the event has no clip, it is
not complete yet, or its footage was removed by retention."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from appliance.config.shown import shown
from appliance.web.auth import COOKIE, Auth
from appliance.web.hosts import host_allowed

_EVENT_ID = re.compile(r"[0-9a-f]{32}")


def clip_routes(clip_file: Callable[[str], Path | None], auth: Auth | None = None,
                hosts: Sequence[str] = ()) -> list[BaseRoute]:
    """``clip_file(event_id)``: the clip's MP4 file, or None. ``auth``: the page's, when the page is on."""

    async def clip(request: Request) -> Response:
        if auth is not None:
            if auth.open_access and not host_allowed(request.headers.get("host"), hosts):
                return PlainTextResponse(f"this page answers only to localhost, 127.0.0.1, [::1] and web.hosts, "
                                         f"not {shown(request.headers.get('host', ''))}\n", status_code=403)
            if auth.session(request.cookies.get(COOKIE)) is None:
                return JSONResponse({"error": "log in first", "login": "/login"}, status_code=401)
        event_id = request.path_params["event"]
        path = await run_in_threadpool(clip_file, event_id) if _EVENT_ID.fullmatch(event_id) else None
        if path is None:
            return PlainTextResponse("no clip for this event (not recorded, not complete yet, or removed by "
                                     "retention)\n", status_code=404)
        return FileResponse(path, media_type="video/mp4")

    return [Route("/events/{event}.mp4", clip)]
