"""The bundled demo: what ``appliance run`` runs without ``--config`` (and what ``./scripts/demo.sh`` shows).

``demo.yaml`` ships inside this package (package data, found beside this module). Its one camera plays OpenCV's
vtest.avi (people walking) with a counting line and a zone; setup fetches the video into the models directory
(scripts/setup.d/40-vtest.sh), and ``APPLIANCE_DEMO_VIDEO`` names it for the config.
"""

from __future__ import annotations

import os
from pathlib import Path

from appliance.paths import models_dir

DEMO_CONFIG = Path(__file__).resolve().with_name("demo.yaml")
DEMO_VIDEO_ENV = "APPLIANCE_DEMO_VIDEO"


def prepare_demo_video() -> Path:
    """Point the demo config's camera at ``<models>/vtest/vtest.avi`` (no-op when ``APPLIANCE_DEMO_VIDEO`` is set);
    FileNotFoundError when setup has not fetched it."""
    if os.environ.get(DEMO_VIDEO_ENV):
        return Path(os.environ[DEMO_VIDEO_ENV])
    video = models_dir() / "vtest" / "vtest.avi"
    if not video.is_file():
        raise FileNotFoundError(f"{video} is missing (scripts/setup.d/40-vtest.sh fetches it from Debian's "
                                "opencv-doc package)")
    os.environ[DEMO_VIDEO_ENV] = str(video)
    return video
