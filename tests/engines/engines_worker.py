"""A real build process for the concurrency and crash tests (run as a script, not collected by pytest).

    python engines_worker.py STATE MODELS ENGINES MARKERS [--pause-at PHASE]

Prints one JSON line with the result. Progress events are written to MARKERS/<pid>-<phase> so the test can
see where each process is. With --pause-at, the process stops inside that phase (holding the key's lock, its
half-built engine in the cache's .tmp) until MARKERS/release exists, so the test can kill it there or let
other processes queue behind it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from appliance.detector.buildprofile import load_profile  # noqa: E402
from appliance.detector.engines.builders.ort import OnnxRuntimeBuilder  # noqa: E402
from appliance.detector.engines.fingerprint import DeviceProbe  # noqa: E402
from appliance.detector.engines.manager import EngineManager  # noqa: E402
from appliance.detector.engines.progress import ProgressEvent, ProgressReporter  # noqa: E402


def main() -> int:
    state, models, engines, markers = (Path(a) for a in sys.argv[1:5])
    pause_at = sys.argv[6] if len(sys.argv) > 6 and sys.argv[5] == "--pause-at" else None

    def on_progress(event: ProgressEvent) -> None:
        (markers / f"{os.getpid()}-{event.phase}").touch()
        if event.phase == pause_at:
            while not (markers / "release").exists():
                time.sleep(0.05)

    manager = EngineManager(state, models, OnnxRuntimeBuilder(), device=DeviceProbe(models),
                            reporter=ProgressReporter(callback=on_progress))
    installed = manager.ensure(load_profile(engines / "tiny.yaml"))
    print(json.dumps({"pid": os.getpid(), "cache_hit": installed.cache_hit, "key": installed.key}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
