"""The operator's page as Starlette routes: the static pages, the JSON the pages read, the live picture, the
events stream and the layout edits. What it shows comes through :class:`Site` (the supervisor implements it)."""

from __future__ import annotations

import asyncio
import html
import json
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from appliance.config.shown import shown
from appliance.web.auth import COOKIE, Auth, Session
from appliance.web.feed import EventFeed, EventQuery
from appliance.web.hosts import host_allowed
from appliance.web.live import LiveFrames, encode
from appliance.web.throttle import LoginThrottle
from appliance.web.video import VideoSource, video_info, video_stream
from appliance.webserver.routes import Routes

STATIC = Path(__file__).resolve().with_name("static")
STREAM_PERIOD_S = 0.5
APPLY_DEADLINE_S = 10.0  # a legal layout checks in well under a second (docs/ui.md, "Limits")
STREAMS_PER_SESSION = 4  # event streams one login may hold open at once (a page holds one)
THUMB_WIDTH, VIEW_WIDTH = 320, 1280


class Site(Protocol):
    """What the page shows and changes of the running appliance."""

    def overview(self) -> dict[str, Any]: ...
    def counts(self, camera_id: str) -> dict[str, Any] | None: ...
    def layout(self, camera_id: str) -> dict[str, Any] | None: ...
    def camera_ids(self) -> list[str]: ...
    def apply_layout(self, camera_id: str, zones: list[Any], lines: list[Any], who: str,
                     classes: Any = "keep") -> dict[str, Any]: ...


class Page:
    def __init__(self, site: Site, auth: Auth, live: LiveFrames, feed: EventFeed,
                 video: VideoSource | None = None) -> None:
        self.site, self.auth, self.live, self.feed = site, auth, live, feed
        self.video = video  # the camera view's video (appliance.web.video), None: the restream is off
        self.throttle = LoginThrottle()
        self._streams: dict[str, int] = {}  # session token -> event streams open

    def who(self, request: Request) -> Session | None:
        return self.auth.session(request.cookies.get(COOKIE))

    # -- pages ----------------------------------------------------------------------------------------------
    async def index(self, request: Request) -> Response:
        if self.who(request) is None:
            return RedirectResponse("/login", status_code=303)
        return FileResponse(STATIC / "index.html")

    async def camera_page(self, request: Request) -> Response:
        if self.who(request) is None:
            return RedirectResponse("/login", status_code=303)
        camera, known = request.path_params["camera"], self.site.camera_ids()
        if camera not in known:
            listed = ", ".join(f'<a href="/camera/{html.escape(c)}">{html.escape(c)}</a>' for c in known) or "none"
            return HTMLResponse(f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>No such camera'
                                f'</title><link rel="stylesheet" href="/static/style.css"></head><body><main>'
                                f'<h1 id="not-found">No camera {html.escape(shown(camera))}</h1><p>The cameras: '
                                f'{listed}. <a href="/">The overview</a></p></main></body></html>', status_code=404)
        return FileResponse(STATIC / "camera.html")

    async def events_page(self, request: Request) -> Response:
        if self.who(request) is None:
            return RedirectResponse("/login", status_code=303)
        return FileResponse(STATIC / "events.html")

    async def login_page(self, _request: Request) -> Response:
        return FileResponse(STATIC / "login.html")

    async def login(self, request: Request) -> Response:
        form = parse_qs((await request.body()).decode(errors="replace"))  # no multipart parser needed
        name, password = form.get("name", [""])[0], form.get("password", [""])[0]
        client = request.client.host if request.client else "?"
        wait_s = self.throttle.wait(client, name)
        if wait_s > 0:
            return PlainTextResponse(f"too many failed logins: try again in {math.ceil(wait_s)} s\n", status_code=429,
                                     headers={"Retry-After": str(math.ceil(wait_s))})
        found = await run_in_threadpool(self.auth.login, name, password)
        if found is None:
            self.throttle.failed(client, name)
            return RedirectResponse("/login?failed=1", status_code=303)
        self.throttle.succeeded(client, name)
        token, session = found
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, token, max_age=max(1, round(session.expires - time.time())), httponly=True,
                            samesite="strict", secure=request.url.scheme == "https")  # the server enforces expiry too
        return response

    async def logout(self, request: Request) -> Response:
        self.auth.logout(request.cookies.get(COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    # -- JSON -----------------------------------------------------------------------------------------------
    async def overview(self, request: Request) -> Response:
        session = self.who(request)
        if session is None:
            return _denied()
        data = await run_in_threadpool(self.site.overview)
        data["me"] = {"user": session.user, "role": session.role, "can_edit": session.can_edit,
                      "csrf": session.csrf, "login": not self.auth.open_access}
        return JSONResponse(data)

    async def events(self, request: Request) -> Response:
        """A page of the kept events, newest first: ?camera, type, name (zone or line), since, until (UTC
        seconds), before (the last page's ``older``), limit."""
        if self.who(request) is None:
            return _denied()
        q = request.query_params
        try:
            query = EventQuery(q.get("camera") or None, q.get("type") or None, q.get("name") or None,
                               _number(q.get("since")), _number(q.get("until")),
                               int(q["before"]) if q.get("before") else None)
            limit = int(q.get("limit") or 50)
        except ValueError:
            return JSONResponse({"error": "since and until are UTC seconds; before and limit whole numbers"},
                                status_code=400)
        return JSONResponse(self.feed.page(query, limit))

    async def frame(self, request: Request) -> Response:
        if self.who(request) is None:
            return _denied()
        camera = request.path_params["camera"]
        self.live.watch(camera)
        latest = self.live.latest(camera)
        if latest is None:
            return Response(status_code=204, headers={"Cache-Control": "no-store"})
        width = VIEW_WIDTH if request.query_params.get("size") != "thumb" else THUMB_WIDTH
        jpeg, meta = await run_in_threadpool(encode, latest, width)
        return Response(jpeg, media_type="image/jpeg", headers={"X-Frame": meta, "Cache-Control": "no-store"})

    async def video_info(self, request: Request) -> Response:
        if self.who(request) is None:
            return _denied()
        return video_info(self.video, request.path_params["camera"])

    async def video_stream(self, request: Request) -> Response:
        if self.who(request) is None:
            return _denied()
        return video_stream(self.video, request.path_params["camera"], request)

    async def layout(self, request: Request) -> Response:
        session = self.who(request)
        if session is None:
            return _denied()
        found = await run_in_threadpool(self.site.layout, request.path_params["camera"])
        if found is None:
            return JSONResponse({"error": "no such camera, or it has no analytics section"}, status_code=404)
        return JSONResponse({**found, "can_edit": session.can_edit})

    async def apply(self, request: Request) -> Response:
        session = self.who(request)
        if session is None:
            return _denied()
        if not session.can_edit:
            return JSONResponse({"error": f"{session.user} is a viewer: only an operator may edit"}, status_code=403)
        if not request.headers.get("x-csrf-token") or request.headers.get("x-csrf-token") != session.csrf:
            return JSONResponse({"error": "missing or stale CSRF token: reload the page"}, status_code=403)
        try:
            body = await request.json()
            zones, lines, classes = list(body["zones"]), list(body["lines"]), body.get("classes", "keep")
        except (ValueError, KeyError, TypeError, AttributeError):
            return JSONResponse({"error": "expected JSON {zones: [...], lines: [...], classes: {...}}"},
                                status_code=400)
        try:
            result = await asyncio.wait_for(run_in_threadpool(
                self.site.apply_layout, request.path_params["camera"], zones, lines, session.user, classes),
                APPLY_DEADLINE_S)
        except asyncio.TimeoutError:
            return JSONResponse({"error": f"the layout was not checked within {APPLY_DEADLINE_S:g} s; reload the "
                                 "page to see whether it was applied"}, status_code=503)
        return JSONResponse(result, status_code=200 if result.get("applied") else 422)

    # -- the events stream ----------------------------------------------------------------------------------
    async def stream(self, request: Request) -> Response:
        if self.who(request) is None:
            return _denied()
        key = request.cookies.get(COOKIE) or "local"
        if self._streams.get(key, 0) >= STREAMS_PER_SESSION:
            return JSONResponse({"error": f"at most {STREAMS_PER_SESSION} event streams per login: close a tab"},
                                status_code=429, headers={"Retry-After": "5"})
        self._streams[key] = self._streams.get(key, 0) + 1

        def release() -> None:
            self._streams[key] -= 1
            if not self._streams[key]:
                del self._streams[key]

        camera = request.query_params.get("camera")
        return _HeldStream(release, self._stream(request, camera), media_type="text/event-stream",
                           headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def _stream(self, request: Request, camera: str | None) -> AsyncIterator[str]:
        _, cursor = self.feed.since(0)
        ticks = 0
        while not await request.is_disconnected():
            rows, cursor = self.feed.since(cursor)
            for row in rows:
                if camera is None or row["camera_id"] == camera:
                    yield f"event: analytics\ndata: {json.dumps(row)}\n\n"
            if ticks % 2 == 0:
                state = await run_in_threadpool(self.site.counts, camera) if camera else \
                    await run_in_threadpool(self.site.overview)
                yield f"event: state\ndata: {json.dumps(state, default=str)}\n\n"
            ticks += 1
            await asyncio.sleep(STREAM_PERIOD_S)


class _HeldStream(StreamingResponse):
    """A streaming response that calls ``release`` once it ends, however it ends."""

    def __init__(self, release: Callable[[], None], content: AsyncIterator[str], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def _number(text: str | None) -> float | None:
    if not text:
        return None
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def _denied() -> Response:
    return JSONResponse({"error": "log in first", "login": "/login"}, status_code=401)


Endpoint = Callable[[Request], Awaitable[Response]]


def _host_checked(endpoint: Endpoint, auth: Auth, hosts: Sequence[str]) -> Endpoint:
    """On loopback, ``endpoint`` answers only to this machine's own names (appliance.web.hosts)."""
    async def checked(request: Request) -> Response:
        if auth.open_access and not host_allowed(request.headers.get("host"), hosts):
            return PlainTextResponse(f"this page answers only to localhost, 127.0.0.1, [::1] and web.hosts, not "
                                     f"{shown(request.headers.get('host', ''))}\n", status_code=403)
        return await endpoint(request)
    return checked


def page_routes(site: Site, auth: Auth, live: LiveFrames, feed: EventFeed, *, hosts: Sequence[str] = (),
                video: VideoSource | None = None) -> Routes:
    """The page's routes: its event stream and video as streams, the rest as requests. ``video``: where each
    camera view's video comes from."""
    page = Page(site, auth, live, feed, video)
    requests = [
        ("/", page.index, "GET"), ("/camera/{camera}", page.camera_page, "GET"), ("/events", page.events_page, "GET"),
        ("/login", page.login_page, "GET"), ("/login", page.login, "POST"), ("/logout", page.logout, "POST"),
        ("/api/overview", page.overview, "GET"), ("/api/events", page.events, "GET"),
        ("/api/cameras/{camera}/frame.jpg", page.frame, "GET"),
        ("/api/cameras/{camera}/layout", page.layout, "GET"), ("/api/cameras/{camera}/layout", page.apply, "POST"),
        ("/api/cameras/{camera}/video", page.video_info, "GET"),
    ]
    streams = [("/api/stream", page.stream, "GET"), ("/api/cameras/{camera}/video.mp4", page.video_stream, "GET")]

    def routed(table: Sequence[tuple[str, Endpoint, str]]) -> list[BaseRoute]:
        return [Route(path, _host_checked(endpoint, auth, hosts), methods=[method]) for path, endpoint, method in table]

    return Routes.of(requests=[*routed(requests), Mount("/static", StaticFiles(directory=STATIC), name="static")],
                     streams=routed(streams))
