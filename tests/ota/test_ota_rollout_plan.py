"""The rollout's decisions (appliance.fleet.rollout.Rollout), driven step by step with a clock and the messages devices
publish (payloads as the devices' publisher writes them: ota/status, status, health): when it widens, when it
stops, whom it rolls back. The fleet test (test_ota_rollout_fleet.py) runs the same decisions against real
devices; these cover the stops that a real device cannot be made to show on demand (turning degraded or going
offline after switching)."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.fleet.rollout import Action, Rollout


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def plan(clock: Clock, **kw: Any) -> Rollout:
    kw.setdefault("soak_s", 60)
    kw.setdefault("timeout_s", 600)
    return Rollout([("canary", ["c1", "c2"]), ("line", ["l1"])], "5", "r5", clock=clock, **kw)


def ota(state: str, version: str | None = "5", rollout_id: str | None = "r5", code: str | None = None) -> dict:
    doc = {"state": state, "message": "...", "version": version, "rollout_id": rollout_id, "code": code}
    return {k: v for k, v in doc.items() if v is not None}


def activate(r: Rollout, *devices: str) -> None:
    for d in devices:
        r.on_status(d, {"state": "online"})
        r.on_ota_status(d, ota("active"))


def test_it_publishes_the_canary_first_soaks_then_widens_and_finishes() -> None:
    clock = Clock()
    r = plan(clock)
    assert r.step() == [Action("publish", "canary")]
    assert r.step() == []
    activate(r, "c1")
    clock.t += 30
    assert r.step() == []  # c2 not there yet
    activate(r, "c2")
    assert r.step() == []  # the soak starts now
    clock.t += 59
    assert r.step() == []
    clock.t += 1
    assert r.step() == [Action("publish", "line")]
    assert [v["state"] for v in r.table()] == ["healthy", "healthy", "waiting"]
    assert r.step() == []
    assert [v["state"] for v in r.table()] == ["healthy", "healthy", "pending"]
    activate(r, "l1")
    r.step()
    clock.t += 60
    assert r.step() == [] and r.finished and r.ok


@pytest.mark.parametrize("turn", ["degraded", "offline", "left the version"])
def test_a_canary_that_turns_unhealthy_during_the_soak_stops_it_and_is_rolled_back(turn: str) -> None:
    clock = Clock()
    r = plan(clock, rollback_wait_s=30)
    r.step()
    activate(r, "c1", "c2")
    r.step()
    clock.t += 10
    if turn == "degraded":
        r.on_health("c2", {"system": {"pipeline_state": "crash_loop"}})
    elif turn == "offline":
        r.on_status("c2", {"state": "offline", "reason": "connection lost"})
    else:
        r.on_ota_status("c2", ota("rolled_back", "5", None, "health"))
    actions = r.step()
    # the retained desired state becomes a signed stop, so a device that comes back later does not install it
    assert actions == [Action("stop", "canary"), *([Action("rollback", "c2")] if turn != "left the version" else [])]
    assert r.reason is not None and r.reason.startswith("group canary: c2 unhealthy")
    assert not r.finished or turn == "left the version"  # waits for the rollback to be confirmed
    clock.t += 5
    assert r.step() == []  # nothing more is published, whatever happens
    if turn != "left the version":
        assert r.devices["c2"].verdict == "rolling_back"
        r.on_ota_status("c2", ota("rolled_back", "4", None, "manual"))
        # then, seeing the still-retained desired state, the device refuses version 5 again (its floor)
        r.on_ota_status("c2", ota("rejected", "5", "r5", "downgrade"))
        r.step()
        assert r.devices["c2"].verdict == "rolled_back" and r.devices["c2"].serving == "4"
    assert r.finished and not r.ok
    assert [v["state"] for v in r.table()][0::2] == ["soaking", "waiting"]  # c1 stays; l1 never asked


def test_a_rollback_that_is_never_confirmed_ends_after_the_wait() -> None:
    clock = Clock()
    r = plan(clock, rollback_wait_s=30)
    r.step()
    activate(r, "c1", "c2")
    r.step()
    r.on_status("c1", {"state": "offline"})
    assert r.step() == [Action("stop", "canary"), Action("rollback", "c1")]
    clock.t += 29
    r.step()
    assert not r.finished
    clock.t += 1
    r.step()
    assert r.finished and not r.ok and r.devices["c1"].verdict == "rolling_back"


def test_a_refused_update_stops_it_without_a_rollback() -> None:
    clock = Clock()
    r = plan(clock)
    r.step()
    r.on_ota_status("c1", ota("building"))
    r.on_ota_status("c2", ota("rejected", code="golden_mismatch"))
    assert r.step() == [Action("stop", "canary")] and r.finished and not r.ok
    assert r.reason == "group canary: c2 failed (rejected golden_mismatch: ...)"
    assert [v["state"] for v in r.table()] == ["updating", "failed", "waiting"]


def test_devices_that_do_not_get_there_in_time_stop_it() -> None:
    clock = Clock()
    r = plan(clock, timeout_s=100)
    r.step()
    activate(r, "c1")
    clock.t += 101
    assert r.step() == [Action("stop", "canary")]
    assert r.finished and r.reason == "group canary: c2 not active on 5 within 100 s"


def test_an_earlier_refusal_of_another_rollout_does_not_count_and_a_device_already_there_does() -> None:
    clock = Clock()
    r = plan(clock)
    r.on_ota_status("c1", ota("rejected", rollout_id="r4", code="golden_mismatch"))  # retained from before
    r.on_ota_status("c2", ota("active", rollout_id=None))  # installed by an ota push earlier
    r.step()
    r.step()
    assert [v["state"] for v in r.table()][:2] == ["pending", "soaking"]
    assert not r.finished


def test_a_group_without_devices_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one device"):
        Rollout([("canary", [])], "5", "r5", soak_s=1, timeout_s=1, clock=Clock())


def test_a_stop_replaces_the_desired_state_of_every_group_started_and_no_later_one() -> None:
    clock = Clock()
    r = plan(clock)
    r.step()
    activate(r, "c1", "c2")
    r.step()
    clock.t += 60
    assert r.step() == [Action("publish", "line")]
    r.on_ota_status("l1", ota("rejected", code="build_failed"))
    assert r.step() == [Action("stop", "canary"), Action("stop", "line")]
    assert r.finished and not r.ok
