"""The operator's page as Starlette routes: the static pages, the JSON the pages read, the live picture, the
events stream and the layout edits. What it shows comes through :class:`Site` (the supervisor implements it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from appliance.web.auth import COOKIE, Auth, Session
from appliance.web.feed import EventFeed
from appliance.web.live import LiveFrames, encode

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
    def apply_layout(self, camera_id: str, zones: list[Any], lines: list[Any], who: str,
                     classes: Any = "keep") -> dict[str, Any]: ...


class Page:
    def __init__(self, site: Site, auth: Auth, live: LiveFrames, feed: EventFeed) -> None:
        self.site, self.auth, self.live, self.feed = site, auth, live, feed
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
        return FileResponse(STATIC / "camera.html")

    async def login_page(self, _request: Request) -> Response:
        return FileResponse(STATIC / "login.html")

    async def login(self, request: Request) -> Response:
        form = parse_qs((await request.body()).decode(errors="replace"))  # no multipart parser needed
        name, password = form.get("name", [""])[0], form.get("password", [""])[0]
        found = await run_in_threadpool(self.auth.login, name, password)
        if found is None:
            return RedirectResponse("/login?failed=1", status_code=303)
        token, _session = found
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict")  # the server enforces expiry
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
        if self.who(request) is None:
            return _denied()
        return JSONResponse(self.feed.newest(200))

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


def _denied() -> Response:
    return JSONResponse({"error": "log in first", "login": "/login"}, status_code=401)


def page_routes(site: Site, auth: Auth, live: LiveFrames, feed: EventFeed) -> list[BaseRoute]:
    page = Page(site, auth, live, feed)
    return [
        Route("/", page.index), Route("/camera/{camera}", page.camera_page),
        Route("/login", page.login_page), Route("/login", page.login, methods=["POST"]),
        Route("/logout", page.logout, methods=["POST"]),
        Route("/api/overview", page.overview), Route("/api/events", page.events),
        Route("/api/stream", page.stream),
        Route("/api/cameras/{camera}/frame.jpg", page.frame),
        Route("/api/cameras/{camera}/layout", page.layout),
        Route("/api/cameras/{camera}/layout", page.apply, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
