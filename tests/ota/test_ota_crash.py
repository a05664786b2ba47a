"""Crash safety: a real ``appliance ota install`` process is SIGKILLed at random points of the pipeline (after a
random status event plus a random delay); after each kill the state directory must recover to a complete,
verified model, the old one or the new one, which really loads, and a retry of the update must succeed. Most
trials must really kill the process before it finishes, and both outcomes must occur. A second test kills an
install during its health watch (a process that serves version 1, so the update of 2 is watched). After every
kill the restart reports, once, how the interrupted update ended."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.cli import appliance_argv
from support.schemas import validate_ota_status

from appliance.ota.config import HealthPolicy, OtaConfig
from appliance.ota.errors import OtaRejected
from appliance.ota.manager import OtaManager
from appliance.ota.offline import OfflineSwitcher
from appliance.ota.signing import TrustedKeys
from appliance.ota.store import OtaStore

TRIALS = 24


def install_cmd(bundle: Path, pub: Path, state: Path) -> list[str]:
    return appliance_argv("ota", "install", str(bundle), "--trusted-key", str(pub), "--state-dir", str(state),
                          "--no-golden", "--builder", "onnxruntime")


def run_and_kill(cmd: list[str], after_event: int, delay_s: float, at_state: str | None = None
                 ) -> tuple[list[str], int | None]:
    """Start the install, read its status lines, SIGKILL it ``delay_s`` after status event ``after_event`` (or
    the first ``at_state`` event). Returns the states seen and the exit code (-SIGKILL: it was killed)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, bufsize=1)
    states: list[str] = []

    def read(line: str) -> None:
        if line.startswith("{"):
            status = json.loads(line)
            validate_ota_status(status)  # the CLI prints OtaStatus.to_dict(), the core of ota/status
            states.append(status["state"])

    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            read(line)
            if states and (len(states) == after_event or states[-1] == at_state):
                if delay_s:
                    try:
                        proc.wait(timeout=delay_s)  # still a kill point: the process may finish meanwhile
                    except subprocess.TimeoutExpired:
                        pass
                proc.send_signal(signal.SIGKILL)
                break
        rc = proc.wait(timeout=120)
        for line in proc.stderr:  # what it printed before it died, after the kill point
            read(line)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return states, rc


def test_sigkill_at_random_points_leaves_a_complete_verified_model(tmp_path, keys, sign, tiny_source) -> None:
    rng = random.Random(int(os.environ.get("OTA_KILL_SEED", "8")))
    base = tmp_path / "base-state"
    first = OtaManager(base, keys.trusted(), OfflineSwitcher(), config=OtaConfig(check_golden=False))
    first.install(sign(tiny_source("1"), "v1.bundle"))
    bundle = sign(tiny_source("2"), "v2.bundle")

    # one uninterrupted run gives the list of status events to choose kill points from
    full = tmp_path / "full"
    shutil.copytree(base, full, symlinks=True)
    events, rc = run_and_kill(install_cmd(bundle, keys.public, full), after_event=-1, delay_s=0)
    assert rc == 0 and events[-1] == "active", events

    outcomes: dict[str, int] = {}
    killed = 0
    served: set[str] = set()
    for trial in range(TRIALS):
        state = tmp_path / f"trial{trial}"
        shutil.copytree(base, state, symlinks=True)
        phase = rng.choice(sorted(set(events), key=events.index))  # phases alike, however many events each has
        after = rng.choice([i + 1 for i, e in enumerate(events) if e == phase])
        delay = rng.choice([0.0, 0.0, rng.uniform(0, 0.05), rng.uniform(0, 0.3)])
        seen, rc = run_and_kill(install_cmd(bundle, keys.public, state), after, delay)
        assert rc in (0, -signal.SIGKILL), (trial, seen, rc)  # finished before the kill, or killed
        killed += rc == -signal.SIGKILL
        serving = assert_restart_serves_a_complete_verified_model(state, trial, seen)
        served.add(serving)
        if rc == 0:
            assert serving == "2", (trial, seen)  # it finished: the update is active
        if serving == "1":  # the interrupted update can simply be sent again
            retry = OtaManager(state, keys.trusted(), OfflineSwitcher(), config=OtaConfig(check_golden=False))
            assert retry.install(bundle)["state"] == "active"
            assert OtaStore(state).recover() == "2"
        key = f"{seen[-1] if seen else 'start'}->{serving}{'' if rc else ' (finished)'}"
        outcomes[key] = outcomes.get(key, 0) + 1
        shutil.rmtree(state)
    print(f"kill outcomes (last status seen -> served after restart): {outcomes}; {killed}/{TRIALS} killed")
    assert sum(outcomes.values()) == TRIALS
    assert killed > TRIALS // 2, outcomes  # most trials really died of SIGKILL before finishing
    assert served == {"1", "2"}, outcomes  # kills landed both before and after the pointer moved


def assert_restart_serves_a_complete_verified_model(state: Path, trial: int, seen: list[str]) -> str:
    """A "restart": recover the state dir, check what it says to serve, and load it; the update's outcome is
    reported when the kill left it unsaid. Returns the version."""
    store = OtaStore(state)
    serving = store.recover()
    assert serving in ("1", "2"), (trial, seen, serving)
    assert store.is_verified(serving) and store.check_files(serving) is None
    assert json.loads((store.root / "active.json").read_text())["version"] == serving
    assert not any(store.staging_dir.iterdir())
    assert sorted(p.name for p in store.versions_dir.iterdir()) in (["1"], ["1", "2"])
    reported: list[dict] = []
    restarted = OtaManager(state, TrustedKeys({}), OfflineSwitcher(), config=OtaConfig(check_golden=False),
                           status_cb=lambda s: reported.append(s.to_dict()))
    route = restarted.start_serving()  # loads the engine (ONNX Runtime session)
    assert route.version == serving
    assert Path(restarted.spec(serving).engine.engine_path).is_file()
    assert_outcome_reported_once(reported, seen, serving, (trial, seen))
    assert store.read_journal() is None
    # a version that never became active is not left on disk
    assert sorted(p.name for p in store.versions_dir.iterdir()) == sorted({"1", serving})
    return serving


def assert_outcome_reported_once(reported: list[dict], seen: list[str], serving: str, why: object) -> None:
    """The statuses of a restart after a kill: the update's outcome, once, when the killed process did not say it
    (``seen`` is all it printed; a step is journaled before it is printed, so a kill right after "received" may
    or may not have left one)."""
    for status in reported:
        validate_ota_status(status)
    if seen and seen[-1] in ("active", "rolled_back", "rejected"):  # said; said again if killed before the
        assert reported == [] or [r["state"] for r in reported] == [seen[-1]], (reported, why)  # journal went
        return
    if seen in ([], ["received"]) and not reported:
        return
    assert len(reported) == 1, why
    if serving == "2":
        assert (reported[0]["state"], reported[0]["version"]) == ("active", "2"), (reported, why)
    else:
        assert (reported[0]["state"], reported[0]["code"]) == ("rejected", "interrupted"), (reported, why)
        assert reported[0].get("version") in (None, "2") and "1 serves" in reported[0]["message"], (reported, why)


# Serves version 1 (routed), then installs the bundle: the update of 2 gets a health watch of 10 minutes.
WATCHED_INSTALL = """
import json, sys
from pathlib import Path
from appliance.ota.config import HealthPolicy, OtaConfig
from appliance.ota.manager import OtaManager
from appliance.ota.signing import TrustedKeys
from appliance.ota.offline import OfflineSwitcher
state, bundle, pub = map(Path, sys.argv[1:4])
m = OtaManager(state, TrustedKeys.from_paths([pub]), OfflineSwitcher(),
               config=OtaConfig(check_golden=False, builder="onnxruntime", health=HealthPolicy(period_s=600)),
               status_cb=lambda s: print(json.dumps(s.to_dict()), file=sys.stderr, flush=True))
assert m.start_serving().version == "1"
m.install(bundle)
"""


@pytest.mark.parametrize("delay_s", [0.0, 0.2])
def test_sigkill_during_the_health_watch_comes_back_as_the_old_version(tmp_path, keys, sign, tiny_source,
                                                                       delay_s) -> None:
    state = tmp_path / "state"
    OtaManager(state, keys.trusted(), OfflineSwitcher(), config=OtaConfig(check_golden=False)).install(
        sign(tiny_source("1"), "v1.bundle"))
    bundle = sign(tiny_source("2"), "v2.bundle")
    cmd = [sys.executable, "-c", WATCHED_INSTALL, str(state), str(bundle), str(keys.public)]
    seen, rc = run_and_kill(cmd, after_event=-1, delay_s=delay_s, at_state="watching")
    assert seen[-1] == "watching" and rc == -signal.SIGKILL, (seen, rc)
    assert assert_restart_serves_a_complete_verified_model(state, 0, seen) == "1"
    assert OtaStore(state).read_pointer().history == (None,)
    retry = OtaManager(state, keys.trusted(), OfflineSwitcher(), config=OtaConfig(check_golden=False))
    assert retry.install(bundle)["state"] == "active" and OtaStore(state).recover() == "2"


@pytest.mark.parametrize("damage", ["flipped byte", "missing file"])
def test_a_damaged_active_version_falls_back_along_the_history(tmp_path, keys, sign, tiny_source, damage) -> None:
    state = tmp_path / "state"
    m = OtaManager(state, keys.trusted(), OfflineSwitcher(),
                   config=OtaConfig(check_golden=False, health=HealthPolicy(period_s=0)))
    for version in ("1", "2"):
        m.install(sign(tiny_source(version), f"v{version}.bundle"))
    onnx = OtaStore(state).version_dir("2") / "model.onnx"
    if damage == "flipped byte":  # same size: only the hash finds it
        data = bytearray(onnx.read_bytes())
        data[100] ^= 1
        onnx.write_bytes(bytes(data))
    else:
        onnx.unlink()
    store = OtaStore(state)
    assert store.recover() == "1" and store.check_files("1") is None
    assert store.read_pointer().version == "2"  # the pointer is left alone; serving() skips what is damaged
    restarted = OtaManager(state, TrustedKeys({}), OfflineSwitcher(), config=OtaConfig(check_golden=False))
    assert restarted.start_serving().version == "1"


def test_a_refusal_reported_by_another_thread_leaves_the_running_installs_journal(tmp_path, keys, sign,
                                                                                   tiny_source) -> None:
    """A delivery refusal (another bundle, too large) ends that delivery, not the install under way: the journal
    that lets a restart report the install must survive it."""
    state = tmp_path / "state"
    at_build, go_on = threading.Event(), threading.Event()

    def pause_at_build(status) -> None:
        if status.state == "building" and not at_build.is_set():
            at_build.set()
            go_on.wait(60)

    m = OtaManager(state, keys.trusted(), OfflineSwitcher(), config=OtaConfig(check_golden=False),
                   status_cb=pause_at_build)
    bundle = sign(tiny_source("2"), "v2.bundle")
    result: dict = {}
    install = threading.Thread(target=lambda: result.update(m.install(bundle)))
    install.start()
    try:
        assert at_build.wait(60)
        assert OtaStore(state).read_journal()["state"] == "building"
        m.report_rejected(OtaRejected("too_large", "another bundle, refused at delivery"))
        assert OtaStore(state).read_journal()["state"] == "building"
    finally:
        go_on.set()
        install.join(60)
    assert result["state"] == "active" and OtaStore(state).read_journal() is None


@pytest.mark.parametrize("journal, expected", [
    ({"state": "watching", "version": "2", "model": "tiny"}, ("active", None, "2")),  # after the pointer moved
    ({"state": "building", "version": "3", "model": "tiny"}, ("rejected", "interrupted", "3")),
    ({"state": "verifying"}, ("rejected", "interrupted", None)),
    ("not json {", ("rejected", "interrupted", None)),  # unreadable: still reported, never a crash
])
def test_a_restart_reports_the_interrupted_update_from_its_journal(tmp_path, keys, sign, tiny_source, journal,
                                                                   expected) -> None:
    state = tmp_path / "state"
    m = OtaManager(state, keys.trusted(), OfflineSwitcher(),
                   config=OtaConfig(check_golden=False, health=HealthPolicy(period_s=0)))
    for version in ("1", "2"):
        m.install(sign(tiny_source(version), f"v{version}.bundle"))
    store = OtaStore(state)
    if isinstance(journal, dict):
        store.write_journal(journal)
    else:
        (store.root / "update.json").write_text(journal)
    reported: list[dict] = []
    restarted = OtaManager(state, keys.trusted(), OfflineSwitcher(), config=OtaConfig(check_golden=False),
                           status_cb=lambda s: reported.append(s.to_dict()))
    assert restarted.start_serving().version == "2"
    assert [(r["state"], r.get("code"), r.get("version")) for r in reported] == [expected]
    validate_ota_status(reported[0])
    assert store.read_journal() is None
    again = OtaManager(state, keys.trusted(), OfflineSwitcher(), status_cb=lambda s: reported.append(s.to_dict()))
    assert again.start_serving().version == "2" and len(reported) == 1  # said once


def test_a_journal_that_cannot_be_written_fails_neither_the_update_nor_the_start(tmp_path, keys, sign,
                                                                                 tiny_source, caplog) -> None:
    """The journal only serves the report after a restart: a disk that refuses it (here, a directory in its place)
    is logged, and the update and the next start go on."""
    state = tmp_path / "state"
    OtaStore(state).ensure()
    (OtaStore(state).root / "update.json").mkdir()
    m = OtaManager(state, keys.trusted(), OfflineSwitcher(), config=OtaConfig(check_golden=False))
    assert m.install(sign(tiny_source("1"), "v1.bundle"))["state"] == "active"
    assert "could not update the journal" in caplog.text
    reported: list[dict] = []
    restarted = OtaManager(state, keys.trusted(), OfflineSwitcher(), status_cb=lambda s: reported.append(s.to_dict()))
    assert restarted.start_serving().version == "1"
    assert [(r["state"], r.get("code")) for r in reported] == [("rejected", "interrupted")]  # unreadable: said
    assert "could not clear the update journal" in caplog.text
