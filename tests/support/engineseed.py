"""The detector's engine built once per test run, for the daemon tests that are not about first boot.

``build_seed`` runs the appliance's own ``ensure_engines`` into a seed state directory; ``seed_state_dir`` copies
its cache entries into a test's state directory. They keep the key the appliance computes from the device and
toolchain fingerprint, so the daemon takes them as a cache hit after checking their sha256, as it does on every
start; a daemon whose fingerprint differed would miss and build for real. Tests about first boot do not seed.

The seed lives in ``$APPLIANCE_TEST_CACHE`` (scripts/test.sh makes one per run, shared by its pytest processes:
the engine cache's lock lets one process build while another waits for it), else in the session's temporary
folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from appliance.paths import engines_dir, models_dir

MODEL = "yolov3-tiny"


def seed_root(session_tmp: Path) -> Path:
    """Where this run's seed is kept: ``$APPLIANCE_TEST_CACHE/engine-seed`` when set, else under ``session_tmp``."""
    shared = os.environ.get("APPLIANCE_TEST_CACHE")
    return (Path(shared) if shared else session_tmp) / "engine-seed"


def build_seed(root: Path) -> Path:
    """A state directory under ``root`` holding a built and verified engine for the detector (built at most once
    per ``root``)."""
    # imported here: conftest loads this module everywhere
    from appliance.detector.engines.manager import ensure_engines

    ensure_engines(engines_dir(), state_dir=root, models_root=models_dir(), models=[MODEL])
    return root


def seed_state_dir(state_dir: Path, seed: Path) -> Path:
    """Copy the seed's engine entries into ``state_dir`` (a copy, not links: some tests damage their engine)."""
    source = seed / "engines" / MODEL
    shutil.copytree(source, Path(state_dir) / "engines" / MODEL, dirs_exist_ok=True)
    return Path(state_dir)
