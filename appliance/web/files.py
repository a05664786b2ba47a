"""A camera's and an event's files: ``/cameras/<id>/latest.jpg`` (the camera's newest snapshot),
``/events/<event_id>.jpg`` (the event's snapshot) and ``/events/<event_id>.mp4`` (its clip, with HTTP range
requests: a browser's <video> seeks with them).

With the page on they are behind its login and its host check; without the page, open on the health port. A clip
is written from the camera's kept segments on request (appliance.pipeline.clipkeeper); 404 when the event has
no clip, it is not complete yet, or its footage was removed by retention."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from appliance.config.shown import shown
from appliance.web.auth import COOKIE, Auth
from appliance.web.hosts import host_allowed
from appliance.webserver.routes import Routes

_EVENT_ID = re.compile(r"[0-9a-f]{32}")


class Snapshots(Protocol):
    """The kept snapshots (appliance.pipeline.snapshots.SnapshotStore)."""

    def latest_jpeg(self, camera: str) -> bytes | None: ...
    def event_jpeg(self, event_id: str) -> bytes | None: ...


def _refused(request: Request, auth: Auth | None, hosts: Sequence[str]) -> Response | None:
    """Why the page's rules refuse ``request`` (None: served); no rules when the page is off (``auth`` None)."""
    if auth is None:
        return None
    if auth.open_access and not host_allowed(request.headers.get("host"), hosts):
        return PlainTextResponse(f"this page answers only to localhost, 127.0.0.1, [::1] and web.hosts, "
                                 f"not {shown(request.headers.get('host', ''))}\n", status_code=403)
    if auth.session(request.cookies.get(COOKIE)) is None:
        return JSONResponse({"error": "log in first", "login": "/login"}, status_code=401)
    return None


def snapshot_routes(snapshots: Snapshots, auth: Auth | None = None, hosts: Sequence[str] = ()) -> Routes:
    """The snapshots, as requests (a JPEG is small). ``auth``: the page's, when the page is on."""

    async def jpeg(request: Request, read: Callable[[str], bytes | None], key: str) -> Response:
        refused = _refused(request, auth, hosts)
        if refused is not None:
            return refused
        data = await run_in_threadpool(read, request.path_params[key])
        if data is None:
            return PlainTextResponse("not found: no such snapshot (or no longer kept)\n", status_code=404)
        return Response(data, media_type="image/jpeg")

    async def latest(request: Request) -> Response:
        return await jpeg(request, snapshots.latest_jpeg, "camera")

    async def event(request: Request) -> Response:
        return await jpeg(request, snapshots.event_jpeg, "event")

    return Routes.of(requests=[Route("/cameras/{camera}/latest.jpg", latest), Route("/events/{event}.jpg", event)])


def clip_routes(clip_file: Callable[[str], Path | None], auth: Auth | None = None,
                hosts: Sequence[str] = ()) -> Routes:
    """The clips, as streams (a download lasts). ``clip_file(event_id)``: the clip's MP4 file, or None."""

    async def clip(request: Request) -> Response:
        refused = _refused(request, auth, hosts)
        if refused is not None:
            return refused
        event_id = request.path_params["event"]
        path = await run_in_threadpool(clip_file, event_id) if _EVENT_ID.fullmatch(event_id) else None
        if path is None:
            return PlainTextResponse("no clip for this event (not recorded, not complete yet, or removed by "
                                     "retention)\n", status_code=404)
        return FileResponse(path, media_type="video/mp4")

    return Routes.of(streams=[Route("/events/{event}.mp4", clip)])
