"""The cache: atomic layout, a corrupt or half-present entry is detected and rebuilt, leftovers of killed
builds are removed, GC keeps the newest few and never the one in use."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from engines_helpers import EngineEnv, make_onnx

from appliance.detector.engines.cache import EngineCache
from appliance.detector.engines.installed import TIMED_RUNS
from appliance.detector.engines.progress import ProgressEvent


def test_first_build_then_hit_with_manifest(env: EngineEnv) -> None:
    built = env.manager().ensure(env.profile())
    assert not built.cache_hit and built.engine_path.is_file()
    manifest = json.loads(built.manifest_path.read_text())
    assert manifest["key"] == built.key and manifest["model"] == "tiny"
    assert manifest["fingerprint"]["builder"] == "onnxruntime"
    assert manifest["verification"]["passed"] is True
    assert manifest["build_seconds"] >= 0 and manifest["built_at"].endswith("+00:00")
    assert manifest["io"]["inputs"] == [{"name": "images", "dtype": "float32", "dims": [None, 3, 8, 8]}]
    assert [o["name"] for o in manifest["io"]["outputs"]] == ["scores", "pooled"]
    # nothing but the entry, locks, and empty work areas
    assert list((env.state / "engines" / ".tmp").iterdir()) == []
    hit = env.manager().ensure(env.profile())
    assert hit.cache_hit and hit.engine_path == built.engine_path
    # timed after verification on the first golden input (batch opt), for the detector layout
    assert manifest["timing"]["batch"] == env.profile().batch.opt and manifest["timing"]["runs"] == TIMED_RUNS
    assert manifest["timing"]["frame_ms"] > 0 and built.frame_ms == hit.frame_ms == manifest["timing"]["frame_ms"]


def test_an_entry_cached_before_timings_has_none_and_is_still_a_hit(env: EngineEnv) -> None:
    built = env.manager().ensure(env.profile())
    manifest = json.loads(built.manifest_path.read_text())
    del manifest["timing"]
    built.manifest_path.write_text(json.dumps(manifest))
    hit = env.manager().ensure(env.profile())
    assert hit.cache_hit and hit.frame_ms is None


def test_time_engine_reports_the_median_per_run_and_per_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    import appliance.detector.engines.manager as manager

    now = [0.0]
    durations = iter([0.500, 0.009, 0.001, 0.005, 0.003, 0.007])  # the warm-up (untimed), then five runs

    def run(feeds: dict) -> None:
        now[0] += next(durations)

    monkeypatch.setattr(manager.time, "perf_counter", lambda: now[0])
    timing = manager.time_engine(run, {"images": None}, batch=2)
    assert timing == {"batch": 2, "runs": 5, "run_ms": 5.0, "frame_ms": 2.5}


def test_progress_reaches_the_callback_in_order(env: EngineEnv) -> None:
    env.manager().ensure(env.profile())
    phases = [e.phase for e in env.events]
    assert phases[0] == "fingerprint" and phases[-1] == "done"
    for phase in ("parse", "build", "verify", "install"):
        assert phase in phases
    percents = [e.percent for e in env.events]
    assert percents == sorted(percents) and percents[-1] == 100
    env.events.clear()
    env.manager().ensure(env.profile())
    assert [e.phase for e in env.events] == ["fingerprint", "cached"]
    assert all(isinstance(e, ProgressEvent) and e.model == "tiny" for e in env.events)


def _corrupt_truncate(engine: Path, manifest: Path) -> None:
    data = engine.read_bytes()
    engine.write_bytes(data[: len(data) // 2])


def _corrupt_flip_byte(engine: Path, manifest: Path) -> None:
    data = bytearray(engine.read_bytes())
    data[len(data) // 2] ^= 0xFF
    engine.write_bytes(bytes(data))  # same size: only the sha256 catches it


def _corrupt_delete_engine(engine: Path, manifest: Path) -> None:
    engine.unlink()


def _corrupt_manifest(engine: Path, manifest: Path) -> None:
    manifest.write_text("{ not json")


def _failed_verification(engine: Path, manifest: Path) -> None:
    data = json.loads(manifest.read_text())
    data["verification"]["passed"] = False
    manifest.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "damage", [_corrupt_truncate, _corrupt_flip_byte, _corrupt_delete_engine, _corrupt_manifest, _failed_verification]
)
def test_damaged_entry_is_detected_and_rebuilt(env: EngineEnv, damage, caplog: pytest.LogCaptureFixture) -> None:
    built = env.manager().ensure(env.profile())
    damage(built.engine_path, built.manifest_path)
    caplog.set_level("WARNING", logger="appliance.detector.engines")
    again = env.manager().ensure(env.profile())
    assert not again.cache_hit and again.key == built.key
    assert any("unusable" in r.getMessage() for r in caplog.records)
    cache = EngineCache(env.state)
    entry, problem = cache.inspect("tiny", built.key)
    assert entry is not None and problem is None
    assert env.manager().ensure(env.profile()).cache_hit


def test_leftovers_of_a_killed_build_are_removed_and_never_used(env: EngineEnv) -> None:
    manager = env.manager()
    key = manager.fingerprint(env.profile(), env.models / "tiny.onnx").key
    leftover = env.state / "engines" / ".tmp" / f"tiny-{key}-99999-deadbeef"
    leftover.mkdir(parents=True)
    (leftover / "model.onnx").write_bytes(b"half an engine")
    assert EngineCache(env.state).lookup("tiny", key) is None
    built = manager.ensure(env.profile())
    assert not built.cache_hit and not leftover.exists()


def test_force_rebuilds_a_good_entry(env: EngineEnv) -> None:
    first = env.manager().ensure(env.profile())
    forced = env.manager().ensure(env.profile(), force=True)
    assert not forced.cache_hit and forced.key == first.key and forced.engine_path.is_file()


def test_gc_keeps_the_newest_few_and_the_current(env: EngineEnv) -> None:
    text = env.profile_path.read_text()
    keys = []
    for seed in range(5):  # five different ONNX files -> five keys; keep defaults to 3
        make_onnx(env.models / "tiny.onnx", seed=seed)
        keys.append(env.manager().ensure(env.profile()).key)
    remaining = {p.name for p in (env.state / "engines" / "tiny").iterdir()}
    assert remaining == set(keys[-3:])
    env.profile_path.write_text(text + "keep: 1\n")
    current = env.manager().ensure(env.profile())
    assert {p.name for p in (env.state / "engines" / "tiny").iterdir()} == {current.key}


def test_gc_protects_the_current_key_even_when_older(env: EngineEnv, tmp_path: Path) -> None:
    cache = EngineCache(env.state)
    keys = []
    for seed in range(3):
        make_onnx(env.models / "tiny.onnx", seed=seed)
        keys.append(env.manager().ensure(env.profile()).key)
    assert cache.gc("tiny", keep=1, protect=keys[0]) == [keys[2], keys[1]]
    assert [e.key for e in cache.entries("tiny")] == [keys[0]]


def test_unwritable_state_dir_is_a_clear_error(env: EngineEnv) -> None:
    if os.geteuid() == 0:
        blocked = env.root / "file-not-dir"
        blocked.write_text("x")
        state = blocked / "state"
    else:  # pragma: no cover - CI runs as root, developers may not
        state = env.root / "ro"
        state.mkdir()
        state.chmod(0o500)
    manager = env.manager()
    manager.cache = EngineCache(state)
    from appliance.detector.engines.cache import CacheError

    with pytest.raises(CacheError, match="cannot create the engine cache"):
        manager.ensure(env.profile())
