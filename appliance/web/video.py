"""The camera view's video: the annotated RTSP stream (docs/restream.md) remuxed, not re-encoded, by ffmpeg into
fragmented MP4, which a ``<video>`` element plays as it arrives. One ffmpeg per viewer, only while the response
is open; with the restream off the page is told why and keeps its JPEG pictures."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

log = logging.getLogger(__name__)
CHUNK = 64 * 1024
# RTP in, MP4 fragments out as they fill (at most 200 ms apart), the first with an empty moov: a live stream.
FFMPEG = ["ffmpeg", "-v", "error", "-rtsp_transport", "tcp", "-i", "{url}", "-an", "-c", "copy", "-f", "mp4",
          "-movflags", "frag_keyframe+empty_moov+default_base_moof", "-frag_duration", "200000", "pipe:1"]

# camera -> the annotated stream's RTSP URL (with the page's own login), or None with the reason
VideoSource = Callable[[str], tuple[str | None, str]]


def video_info(source: VideoSource | None, camera: str) -> Response:
    """What the page asks first: where the video is, or why there is none (its fallback's reason)."""
    url, reason = source(camera) if source is not None else (None, "the restream is off (restream.enabled)")
    if url is None:
        return JSONResponse({"video": None, "reason": reason})
    return JSONResponse({"video": f"/api/cameras/{camera}/video.mp4", "reason": ""})


async def _remux(url: str, request: Request) -> AsyncIterator[bytes]:
    args = [a.replace("{url}", url) for a in FFMPEG]
    proc = await asyncio.create_subprocess_exec(*args, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None  # a pipe
    try:
        while not await request.is_disconnected():
            chunk = await proc.stdout.read(CHUNK)
            if not chunk:
                break
            yield chunk
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def video_stream(source: VideoSource | None, camera: str, request: Request) -> Response:
    url, reason = source(camera) if source is not None else (None, "the restream is off")
    if url is None:
        return JSONResponse({"error": reason}, status_code=404)
    return StreamingResponse(_remux(url, request), media_type="video/mp4", headers={"Cache-Control": "no-store"})
