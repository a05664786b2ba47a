"""``/events/<event_id>.mp4``: an event's clip, with HTTP range requests (a browser's <video> seeks with them).

Served like the event's snapshot (``/events/<event_id>.jpg``) on the health port, under the same rules. The file
is written from the camera's kept segments on request (appliance.supervisor.clipkeeper); 404 when the event has
no clip, it is not complete yet, or its footage was removed by retention."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

_EVENT_ID = re.compile(r"[0-9a-f]{32}")


def clip_routes(clip_file: Callable[[str], Path | None]) -> list[BaseRoute]:
    """``clip_file(event_id)``: the clip's MP4 file, or None."""

    async def clip(request: Request) -> Response:
        event_id = request.path_params["event"]
        path = await run_in_threadpool(clip_file, event_id) if _EVENT_ID.fullmatch(event_id) else None
        if path is None:
            return PlainTextResponse("no clip for this event (not recorded, not complete yet, or removed by "
                                     "retention)\n", status_code=404)
        return FileResponse(path, media_type="video/mp4")

    return [Route("/events/{event}.mp4", clip)]
