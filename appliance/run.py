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

log = logging.getLogger("appliance")

DEMO_CONFIG = Path(__file__).resolve().parent / "config" / "demo.yaml"
EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


def run(args: argparse.Namespace) -> int:
    from appliance.config.check import check_config
    from appliance.supervisor.app import Appliance

    path = Path(args.config) if args.config else DEMO_CONFIG
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
