"""What every frame encoder's H.264 shares: how often a keyframe is forced, the packets' time base, and the
stream template the segment recorder copies its MP4 stream from."""

from __future__ import annotations

import io
from fractions import Fraction
from typing import Any

KEYFRAME_EVERY_S = 1.0
TIME_BASE = Fraction(1, 1000)


def stream_template(first_keyframe: bytes) -> tuple[Any, Any]:
    """A demuxed H.264 stream (container, stream) whose parameters are those of ``first_keyframe``. Keyframes
    carry SPS/PPS in-band."""
    import av

    container = av.open(io.BytesIO(first_keyframe), format="h264")
    return container, container.streams.video[0]
