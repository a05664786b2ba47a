"""The bundled demo: what ``appliance run`` runs without ``--config`` (and what ``./scripts/demo.sh`` shows).

``demo.yaml`` ships inside this package (package data, found beside this module). Its one camera plays a sample
video; the video is built on first use into the models directory and named by ``APPLIANCE_DEMO_VIDEO``.
"""

from __future__ import annotations

import os
from pathlib import Path

from appliance.capture.sample import ensure_sample_video
from appliance.paths import models_dir

DEMO_CONFIG = Path(__file__).resolve().with_name("demo.yaml")
DEMO_VIDEO_ENV = "APPLIANCE_DEMO_VIDEO"


def prepare_demo_video() -> Path:
    """Point the demo config's camera at the sample video, building it on first use (no-op when set)."""
    if os.environ.get(DEMO_VIDEO_ENV):
        return Path(os.environ[DEMO_VIDEO_ENV])
    video = ensure_sample_video(models_dir() / "sample" / "sample.mp4")
    os.environ[DEMO_VIDEO_ENV] = str(video)
    return video
