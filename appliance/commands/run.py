"""``appliance run``: load the config, start the appliance, tick until SIGTERM/SIGINT, stop cleanly; SIGHUP
reloads the config (what changed, nothing else).

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
from appliance.capture.probe import split_by_size
from appliance.capture.stderrfilter import StderrFilter
from appliance.commands.configload import check_and_report, load_and_report
from appliance.diskspace import NotEnoughSpace
from appliance.exitcodes import ExitCode
from appliance.mqtt.errors import SpoolInUse
from appliance.supervisor.app import Appliance
from appliance.supervisor.cudanoise import CudaNoise
from appliance.supervisor.latecameras import LateCameras, Waiting
from appliance.supervisor.reloadplan import with_running_sizes

log = logging.getLogger(__name__)


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
    cameras, late = split_by_size(config.cameras)  # a camera whose size is unknown waits; the others start
    config = config.model_copy(update={"cameras": cameras})

    stop, wake, reload = threading.Event(), threading.Event(), threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        stop.set()
        wake.set()

    def on_hangup(_signum: int, _frame: object) -> None:  # applied by the loop below, once started
        reload.set()
        wake.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hangup)
    noise = StderrFilter(CudaNoise())  # what Triton prints natively goes through it
    try:
        return _run_app(args, config, LateCameras(late), path, stop, wake, reload)
    finally:
        noise.close()


def _run_app(args: argparse.Namespace, config: AppConfig, late: LateCameras, path: Path, stop: threading.Event,
             wake: threading.Event, reload: threading.Event) -> int:
    app = Appliance(config, triton_home=Path(args.triton_home) if args.triton_home else None, late=late)
    try:
        app.start()
    except (NotEnoughSpace, SpoolInUse) as exc:
        # Exit 2, which systemd does not restart: another start would meet the same full disk or running twin.
        log.error("could not start: %s", exc)
        return ExitCode.BAD_INPUT
    except Exception as exc:
        log.error("could not start: %s", exc, exc_info=log.isEnabledFor(logging.DEBUG))
        return ExitCode.FAILED
    try:
        if args.once:
            print(app.status_line())
            return ExitCode.OK
        interval = min(1.0, config.health.interval_s)
        while not stop.is_set():
            wake.wait(interval)
            wake.clear()
            if reload.is_set() and not stop.is_set():
                reload.clear()
                reload_config(app, path)
            if not stop.is_set():
                app.tick()
        return ExitCode.OK
    except Exception:
        log.exception("the appliance failed while running")
        return ExitCode.FAILED
    finally:
        app.stop()
        sys.stdout.flush()


def reload_config(app: Appliance, path: Path) -> None:
    """SIGHUP (``systemctl reload``, ``appliance reload``): the config file read and checked again as at start
    (``check-config``'s checks, each problem logged as FILE:LINE), then what changed applied; a config with
    problems is refused and the running one stays (docs/supervisor.md, "Reload")."""
    log.info("reload: reading %s", path)
    report = check_and_report(path, log=log)
    new, problems = (report.config if report.ok else None), [str(issue) for issue in report.issues]
    late: list[Waiting] = []
    if new is not None:
        new = with_running_sizes(app.config, new)  # probed again only where the camera changed
        cameras, late = split_by_size(new.cameras)  # a camera whose size is unknown waits, as at start
        new = new.model_copy(update={"cameras": cameras})
    app.reload(new, problems, str(path), late)
