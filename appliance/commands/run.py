"""``appliance run``: load the config, start the appliance, tick until SIGTERM/SIGINT, stop cleanly.

Exit codes (systemd's unit refuses to restart on 2, since a bad config does not fix itself):
0 stopped cleanly; 1 a part failed at start or while running; 2 the config is invalid.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

log = logging.getLogger("appliance")

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "appconfig" / "demo.yaml"
EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2
DEMO_VIDEO_ENV = "APPLIANCE_DEMO_VIDEO"


def prepare_demo_video() -> Path:
    """Point the demo config's camera at the sample video, building it on first use (no-op when set)."""
    from appliance.capture.sample import ensure_sample_video
    from appliance.engines.paths import models_dir

    if os.environ.get(DEMO_VIDEO_ENV):
        return Path(os.environ[DEMO_VIDEO_ENV])
    video = ensure_sample_video(models_dir() / "sample" / "sample.mp4")
    os.environ[DEMO_VIDEO_ENV] = str(video)
    return video


def run(args: argparse.Namespace) -> int:
    from appliance.appconfig.check import check_config
    from appliance.supervisor.app import Appliance

    path = Path(args.config) if args.config else DEMO_CONFIG
    if path.resolve() == DEMO_CONFIG:
        from appliance.capture.sample import SampleVideoError

        try:
            log.info("demo: camera 'sample' plays %s", prepare_demo_video())
        except (SampleVideoError, OSError) as exc:
            # Not a config problem (exit 2 would tell systemd not to retry): setup is incomplete.
            log.error("demo: cannot build the sample camera's video: %s; run scripts/setup.sh, or set %s to a "
                      "video file", exc, DEMO_VIDEO_ENV)
            return EXIT_FAILED
    report = check_config(path)
    if not report.ok or report.config is None:
        for issue in report.issues:
            log.error("config: %s", issue)
        log.error("%s; fix it and check with `appliance check-config %s`", report.summary(), path)
        return EXIT_CONFIG
    log.info("config: %s", report.summary())

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    app = Appliance(report.config, triton_home=Path(args.triton_home) if args.triton_home else None)
    try:
        app.start()
    except Exception as exc:
        log.error("could not start: %s", exc, exc_info=log.isEnabledFor(logging.DEBUG))
        return EXIT_FAILED
    try:
        if args.once:
            print(app.status_line())
            return EXIT_OK
        interval = min(1.0, report.config.health.interval_s)
        while not stop.wait(interval):
            app.tick()
        return EXIT_OK
    except Exception:
        log.exception("the appliance failed while running")
        return EXIT_FAILED
    finally:
        app.stop()
        sys.stdout.flush()
