"""Real processes: concurrent requests for the same engine build it once; a build SIGKILLed midway leaves
nothing usable behind and the next start builds cleanly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from engines_helpers import EngineEnv
from support.wait import wait_until

from appliance.detector.engines.cache import EngineCache

WORKER = Path(__file__).with_name("engines_worker.py")
WAIT_S = 60  # generous upper bound for a marker to appear on a loaded 2-core machine; not a speed assertion


def _start(env: EngineEnv, markers: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(env.state), str(env.models), str(env.engines), str(markers), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _wait_for(path_glob: str, markers: Path, count: int = 1) -> list[Path]:
    def enough() -> list[Path]:
        found = sorted(markers.glob(path_glob))
        return found if len(found) >= count else []

    try:
        return wait_until(enough, WAIT_S, 0.05, f"{count} x {path_glob} in {markers}")
    except AssertionError as failed:
        raise AssertionError(f"{failed}: {sorted(p.name for p in markers.iterdir())}") from None


def _finish(proc: subprocess.Popen[str]) -> dict:
    out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_concurrent_requests_build_once(env: EngineEnv, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    first = _start(env, markers, "--pause-at", "build")
    _wait_for(f"{first.pid}-build", markers)  # holds the lock, mid-build
    others = [_start(env, markers) for _ in range(2)]
    _wait_for("*-waiting", markers, count=2)  # both queued on the lock, neither building
    assert not [m for p in others for m in markers.glob(f"{p.pid}-build")]
    (markers / "release").touch()
    results = [_finish(first)] + [_finish(p) for p in others]
    assert [r["cache_hit"] for r in results] == [False, True, True]
    assert len({r["key"] for r in results}) == 1
    assert [e.key for e in EngineCache(env.state).entries("tiny")] == [results[0]["key"]]


@pytest.mark.parametrize("phase", ["build", "verify", "install"])
def test_build_killed_midway_leaves_nothing_usable(env: EngineEnv, tmp_path: Path, phase: str) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    victim = _start(env, markers, "--pause-at", phase)
    _wait_for(f"{victim.pid}-{phase}", markers)
    tmp_dirs = list((env.state / "engines" / ".tmp").iterdir())
    assert len(tmp_dirs) == 1  # the half-built engine exists...
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=WAIT_S)
    assert victim.returncode == -signal.SIGKILL
    cache = EngineCache(env.state)
    key = tmp_dirs[0].name.split("-")[1]
    assert cache.inspect("tiny", key) == (None, None)  # ...but nothing is installed
    assert not (env.state / "engines" / "tiny").exists()

    (markers / "release").touch()
    result = _finish(_start(env, markers))  # the next start takes the (kernel-released) lock and builds
    assert result["cache_hit"] is False and result["key"] == key
    assert list((env.state / "engines" / ".tmp").iterdir()) == []
    entry = cache.lookup("tiny", key)
    assert entry is not None and entry.manifest["verification"]["passed"]
