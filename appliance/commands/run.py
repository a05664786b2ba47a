"""``appliance run``: load the config, start the appliance, tick until SIGTERM/SIGINT, stop cleanly.

Exit codes (systemd's unit refuses to restart on 2, since a bad config does not fix itself):
0 stopped cleanly; 1 a part failed at start or while running; 2 the config is invalid.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from appliance.appconfig.app import AppConfig
from appliance.appconfig.demo import DEMO_CONFIG, DEMO_VIDEO_ENV, prepare_demo_video
from appliance.capture.probe import SizeUnknown, resolve_sizes
from appliance.commands.configload import load_and_report
from appliance.commands.exitcodes import ExitCode
from appliance.capture.stderrfilter import StderrFilter
from appliance.supervisor.app import Appliance
from appliance.supervisor.cudanoise import CudaNoise

log = logging.getLogger("appliance")


def run(args: argparse.Namespace) -> int:
    path = Path(args.config) if args.config else DEMO_CONFIG
    if path.resolve() == DEMO_CONFIG:
        try:
            log.info("demo: camera 'hall' plays %s", prepare_demo_video())
        except OSError as exc:
            # Not a config problem (exit 2 would tell systemd not to retry): setup is incomplete.
            log.error("demo: cannot find the demo camera's video: %s; run scripts/setup.sh, or set %s to a "
                      "video file", exc, DEMO_VIDEO_ENV)
            return ExitCode.FAILED
    config = load_and_report(path, log=log)
    if config is None:
        return ExitCode.BAD_INPUT
    try:
        config = config.model_copy(update={"cameras": resolve_sizes(config.cameras)})
    except SizeUnknown as exc:
        log.error("%s", exc)  # not exit 2: the camera may answer at the next start
        return ExitCode.FAILED

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    noise = StderrFilter(CudaNoise())  # what Triton prints natively goes through it
    try:
        return _run_app(args, config, stop)
    finally:
        noise.close()


def _run_app(args: argparse.Namespace, config: AppConfig, stop: threading.Event) -> int:
    app = Appliance(config, triton_home=Path(args.triton_home) if args.triton_home else None)
    try:
        app.start()
    except Exception as exc:
        log.error("could not start: %s", exc, exc_info=log.isEnabledFor(logging.DEBUG))
        return ExitCode.FAILED
    try:
        if args.once:
            print(app.status_line())
            return ExitCode.OK
        interval = min(1.0, config.health.interval_s)
        while not stop.wait(interval):
            app.tick()
        return ExitCode.OK
    except Exception:
        log.exception("the appliance failed while running")
        return ExitCode.FAILED
    finally:
        app.stop()
        sys.stdout.flush()
