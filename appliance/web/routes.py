"""The operator's page as Starlette routes: the static pages, the JSON the pages read, the live picture, the
events stream and the layout edits. What it shows comes through :class:`Site` (the supervisor implements it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
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
from appliance.web.video import VideoSource, video_info, video_stream

STATIC = Path(__file__).resolve().with_name("static")
STREAM_PERIOD_S = 0.5
THUMB_WIDTH, VIEW_WIDTH = 320, 1280


class Site(Protocol):
    """What the page shows and changes of the running appliance."""

    def overview(self) -> dict[str, Any]: ...
    def counts(self, camera_id: str) -> dict[str, Any] | None: ...
    def layout(self, camera_id: str) -> dict[str, Any] | None: ...
    def apply_layout(self, camera_id: str, zones: list[Any], lines: list[Any], who: str,
                     classes: Any = "keep") -> dict[str, Any]: ...


class Page:
    def __init__(self, site: Site, auth: Auth, live: LiveFrames, feed: EventFeed,
                 video: VideoSource | None = None) -> None:
        self.site, self.auth, self.live, self.feed, self.video = site, auth, live, feed, video

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
        result = await run_in_threadpool(self.site.apply_layout, request.path_params["camera"], zones, lines,
                                         session.user, classes)
        return JSONResponse(result, status_code=200 if result.get("applied") else 422)

    # -- the events stream ----------------------------------------------------------------------------------
    async def stream(self, request: Request) -> Response:
        if self.who(request) is None:
            return _denied()
        camera = request.query_params.get("camera")
        return StreamingResponse(self._stream(request, camera), media_type="text/event-stream",
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


def _denied() -> Response:
    return JSONResponse({"error": "log in first", "login": "/login"}, status_code=401)


def page_routes(site: Site, auth: Auth, live: LiveFrames, feed: EventFeed,
                video: VideoSource | None = None) -> list[BaseRoute]:
    page = Page(site, auth, live, feed, video)
    return [
        Route("/", page.index), Route("/camera/{camera}", page.camera_page),
        Route("/login", page.login_page), Route("/login", page.login, methods=["POST"]),
        Route("/logout", page.logout, methods=["POST"]),
        Route("/api/overview", page.overview), Route("/api/events", page.events),
        Route("/api/stream", page.stream),
        Route("/api/cameras/{camera}/frame.jpg", page.frame),
        Route("/api/cameras/{camera}/video", page.video_info),
        Route("/api/cameras/{camera}/video.mp4", page.video_stream),
        Route("/api/cameras/{camera}/layout", page.layout),
        Route("/api/cameras/{camera}/layout", page.apply, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
