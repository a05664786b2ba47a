"""``appliance ota rollout`` against a fleet of three devices on one host: a real mosquitto shared by all, each device
its own process with the real publisher, OTA manager and desired-state follower (tests/support/fleetdevice.py; the
offline switcher instead of an embedded Triton, so the whole module takes under a minute;
tests/supervisor/test_supervisor_rollout.py runs three real daemons), bundles downloaded over real HTTP, the real
CLI in its own process.

One rollout stops at a canary whose device-local golden frames the new model does not match: the other devices
stay on what they serve and their group's desired state is never published. Another goes through every group.
A canary that goes offline during its soak stops the rollout and takes the rollback when it comes back."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import cv2
import numpy as np
import pytest
from support.cli import appliance_argv, run_appliance
from support.schemas import validate_message
from support.subscriber import Subscriber
from support.wait import wait_until

from appliance.ota.store import OtaStore
from appliance.procs import stop_process

FLEETDEVICE = Path(__file__).resolve().parents[1] / "support" / "fleetdevice.py"
PREFIX = "plant"


class Fleet:
    """Device processes by name, their state dirs, and a subscriber that keeps the newest message per topic."""

    def __init__(self, root: Path, broker: Any, keys: Any) -> None:
        self.root, self.broker, self.keys = root, broker, keys
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.watch = Subscriber(broker, f"{PREFIX}/#")

    def doc(self, topic: str) -> dict[str, Any] | None:
        newest = self.watch.latest(f"{PREFIX}/{topic}")
        return newest.json() if newest and newest.payload else None

    def start(self, name: str, group: str, golden: Path | None = None) -> None:
        state = self.root / name
        config = {"state_dir": str(state),
                  "mqtt": {"host": self.broker.host, "port": self.broker.port, "device_id": name,
                           "topic_prefix": PREFIX, "health_interval_s": 1},
                  "ota": {"group": group, "trusted_keys": [str(self.keys.public)], "allow_http": True,
                          "health": {"period_s": 1, "check_interval_s": 0.5},
                          **({"device_golden_dir": str(golden)} if golden else {})}}
        path = self.root / f"{name}.json"
        path.write_text(json.dumps(config))
        log = open(self.root / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen([sys.executable, str(FLEETDEVICE), str(path)], stdout=subprocess.PIPE,
                                            stderr=log, text=True)
        log.close()

    def wait_online(self, names: list[str]) -> None:
        for name in names:
            proc = self.procs[name]
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", self.log(name)
        wait_until(lambda: all((self.doc(f"{n}/status") or {}).get("state") == "online" for n in names), 30)

    def active(self, name: str) -> str | None:
        return OtaStore(self.root / name).read_pointer().version

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text()

    def sentinel(self) -> None:
        """Publish a marker to ourselves and wait for it: anything the broker handled before (a PUBACKed publish
        by any client) was routed to this subscriber first, and its one connection keeps the QoS 1 order."""
        topic, marker = f"{PREFIX}/test/sentinel", uuid.uuid4().hex.encode()
        self.watch.publish(topic, marker, qos=1)
        self.watch.wait_for(lambda ms: any(m.topic == topic and m.payload == marker for m in ms), 15, "the sentinel")

    def close(self) -> None:
        for proc in self.procs.values():
            stop_process(proc, timeout_s=15)
        self.watch.close()


@pytest.fixture
def fleet(tmp_path: Path, broker, keys) -> Iterator[Fleet]:  # type: ignore[no-untyped-def]
    f = Fleet(tmp_path / "fleet", broker, keys)
    f.root.mkdir()
    try:
        yield f
    finally:
        f.close()


@pytest.fixture
def served_bundle(bundle_server, sign, tiny_source):  # type: ignore[no-untyped-def]
    """(bundle path, URL) of a signed version-2 bundle of the tiny model, served over HTTP."""
    base_url, served = bundle_server
    bundle = sign(tiny_source("2"), "tiny-2.bundle")
    shutil.copy(bundle, served / bundle.name)
    return bundle, f"{base_url}/{bundle.name}"


def rollout(broker: Any, keys: Any, bundle: Path, url: str, *groups: str, extra: tuple[str, ...] = ()
            ) -> subprocess.CompletedProcess[str]:
    args = ["ota", "rollout", "--bundle", str(bundle), "--url", url, "--sign-key", str(keys.private), "--mqtt",
            f"{broker.host}:{broker.port}", "--prefix", PREFIX, "--soak", "2", "--timeout", "120", "--discover-s",
            "1.5", *extra]
    for group in groups:
        args += ["--group", group]
    began = time.monotonic()
    done = run_appliance(*args, timeout=300, expect=None)
    print(f"rollout took {time.monotonic() - began:.1f} s, rc={done.returncode}\n{done.stdout}{done.stderr}")
    return done


def failing_golden_set(root: Path) -> Path:
    """A device-local golden set the tiny model cannot pass: this line's cameras see an "a" it never reports."""
    golden = root / "golden-can-1"
    golden.mkdir()
    cv2.imwrite(str(golden / "line.png"), np.full((32, 32, 3), 90, np.uint8))
    (golden / "golden.json").write_text(json.dumps({"frames": [{"file": "line.png", "expected": [
        {"class_name": "a", "score": 0.9, "box": [2, 2, 20, 20]}]}]}))
    return golden


def test_a_canary_that_fails_its_golden_frames_stops_the_rollout_and_the_rest_stay_on_the_old_version(
        fleet, broker, keys, served_bundle, tmp_path) -> None:
    fleet.start("can-1", "canary", golden=failing_golden_set(tmp_path))
    fleet.start("line-1", "line")
    fleet.start("line-2", "line")
    fleet.wait_online(["can-1", "line-1", "line-2"])
    bundle, url = served_bundle
    done = rollout(broker, keys, bundle, url, "canary", "line", extra=("--rollout-id", "r-2a"))
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert "discovered canary: can-1; line: line-1, line-2" in out
    assert "group canary: desired state published on plant/groups/canary/ota/desired" in out
    assert "group line: desired state" not in out
    assert "stopped: group canary: can-1 failed (rejected golden_mismatch:" in out
    table = out[out.index("GROUP"):].splitlines()
    assert table[1].split()[:3] == ["canary", "can-1", "failed"], table
    assert [r.split()[:3] for r in table[2:]] == [["line", "line-1", "waiting"], ["line", "line-2", "waiting"]]
    # where things really stand: the canary refused it with the rollout id; nobody switched; line never asked
    status = fleet.doc("can-1/ota/status")
    assert status is not None and (status["state"], status["code"], status["rollout_id"]) == \
        ("rejected", "golden_mismatch", "r-2a"), status
    validate_message("ota_status", status)
    assert [fleet.active(n) for n in ("can-1", "line-1", "line-2")] == [None, None, None]
    assert fleet.doc("line-1/ota/status") is None and fleet.doc("line-2/ota/status") is None
    assert fleet.doc("groups/line/ota/desired") is None
    # the retained desired state is now the rollout's signed stop: a canary that comes back does not install it
    desired = fleet.doc("groups/canary/ota/desired")
    assert desired is not None and (desired["rollout_id"], desired["state"]) == ("r-2a", "stopped"), desired
    validate_message("ota_desired", desired)
    assert "group canary: stopped state published on plant/groups/canary/ota/desired" in out
    assert fleet.doc("can-1/status")["group"] == "canary"  # type: ignore[index]


def test_a_rollout_goes_through_every_group_and_a_second_one_finds_the_fleet_already_there(
        fleet, broker, keys, served_bundle) -> None:
    fleet.start("can-1", "canary")
    fleet.start("line-1", "line")
    fleet.start("line-2", "line")
    fleet.wait_online(["can-1", "line-1", "line-2"])
    bundle, url = served_bundle
    done = rollout(broker, keys, bundle, url, "canary", "line=line-1,line-2", extra=("--rollout-id", "r-2b"))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.index("group canary: desired state") < out.index("canary     can-1            healthy") \
        < out.index("group line: desired state")
    assert "done: every group is on the version" in out
    assert [fleet.active(n) for n in ("can-1", "line-1", "line-2")] == ["2", "2", "2"]
    before = {n: fleet.doc(f"{n}/ota/status") for n in ("can-1", "line-1", "line-2")}
    assert all(s is not None and (s["state"], s["version"], s["rollout_id"]) == ("active", "2", "r-2b")
               for s in before.values()), before
    # the same version again, as JSON for tooling: every device is already on it; none installs anything
    again = rollout(broker, keys, bundle, url, "canary", "line", extra=("--rollout-id", "r-2c", "--json"))
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["ok"] is True and result["rollout_id"] == "r-2c"
    assert [(d["device"], d["state"], d["serving"]) for d in result["devices"]] == [
        ("can-1", "healthy", "2"), ("line-1", "healthy", "2"), ("line-2", "healthy", "2")]
    # No sentinel can follow a decision to do nothing, so wait for the decision itself: each follower logs that
    # r-2c's version is already active (and publishes nothing for it); an update would have logged otherwise.
    wait_until(lambda: all("rollout r-2c wants 2, which is already active" in fleet.log(n) for n in before), 30,
               message="every device to find r-2c already active")
    assert {n: fleet.doc(f"{n}/ota/status") for n in before} == before  # no update ran: the same retained status


def test_a_canary_that_goes_offline_during_the_soak_stops_the_rollout_and_is_rolled_back_when_it_returns(
        fleet, broker, keys, served_bundle) -> None:
    fleet.start("can-1", "canary")
    fleet.start("line-1", "line")
    fleet.wait_online(["can-1", "line-1"])
    bundle, url = served_bundle
    cmd = appliance_argv("ota", "rollout", "--bundle", str(bundle), "--url", url, "--sign-key", str(keys.private),
                         "--mqtt", f"{broker.host}:{broker.port}", "--prefix", PREFIX, "--soak", "60",
                         "--discover-s", "1.5", "--rollback-wait", "60", "--rollout-id", "r-2d", "--group", "canary",
                         "--group", "line")
    cli = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []  # the CLI's progress, read as it comes (the test acts on it)
    errors: list[str] = []
    readers = [threading.Thread(target=lambda: lines.extend(cli.stdout or ()), daemon=True),
               threading.Thread(target=lambda: errors.extend(cli.stderr or ()), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        wait_until(lambda: (fleet.doc("can-1/ota/status") or {}).get("state") == "active", 60)
        wait_until(lambda: any(re.search(r"canary\s+can-1\s+soaking", line) for line in list(lines)), 60,
                   message="the CLI to soak the canary")
        fleet.procs["can-1"].kill()  # the broker publishes its last will: offline
        fleet.procs["can-1"].wait()
        wait_until(lambda: (fleet.doc("can-1/status") or {}).get("state") == "offline", 15)
        # The broker has the rollback command (queued for the device's persistent session) once the watcher sees it.
        wait_until(lambda: ((fleet.doc("can-1/command/ota") or {}).get("args") or {}).get("action") == "rollback", 60)
        fleet.start("can-1", "canary")  # back: it takes the queued rollback
        fleet.wait_online(["can-1"])
        cli.wait(timeout=90)
        for reader in readers:
            reader.join(10)
        out, err = "".join(lines), "".join(errors)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    print(out, err)
    assert cli.returncode == 1, err
    assert "stopped: group canary: can-1 unhealthy (offline)" in out
    assert "can-1: rollback sent" in out
    table = out[out.index("GROUP"):].splitlines()
    assert table[1].split()[:4] == ["canary", "can-1", "rolled_back", "base"], table
    assert table[2].split()[:3] == ["line", "line-1", "waiting"]
    status = fleet.doc("can-1/ota/status")
    assert status is not None and (status["state"], status["code"]) == ("rolled_back", "manual"), status
    assert fleet.active("can-1") is None and fleet.active("line-1") is None
    assert fleet.doc("groups/line/ota/desired") is None


@pytest.mark.parametrize("case, message", [
    ("no devices", "error: no devices found for group(s) canary"),
    ("bad group", "error: --group 'canary=a/b': 'a/b' is not a group or device name"),
    ("other key", "error: unknown_key: signed by key"),
    ("bad rollout id", "error: --rollout-id must be 1-64"),
])
def test_bad_input_exits_2_and_publishes_nothing(fleet, broker, keys, served_bundle, sign, tiny_source, case,
                                                 message) -> None:
    bundle, url = served_bundle
    group, extra = "canary", ()
    if case == "bad group":
        group = "canary=a/b"
    elif case == "other key":
        bundle = sign(tiny_source("3"), "other.bundle", key=keys.other_private)  # not what --key trusts
    elif case == "bad rollout id":
        extra = ("--rollout-id", "no spaces")
    done = rollout(broker, keys, bundle, url, group, extra=extra)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    fleet.sentinel()  # the CLI waits for the PUBACK of what it publishes, so that came before the sentinel
    assert fleet.doc("groups/canary/ota/desired") is None
