"""A staged fleet rollout's decisions, free of MQTT: ``appliance ota rollout`` feeds it what the devices publish and
carries out the actions ``step`` returns (``publish``, ``stop``, ``rollback``).

Groups go one at a time, the first being the canary: publish, wait until every device is active on the version,
soak, then the next. A failure stops the rollout: every group started so far gets a signed ``stopped`` state and
the devices that switched and then turned unhealthy get a rollback; later groups are never touched
(docs/fleet-rollout.md, "The operator")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

FINAL_OTA = ("active", "rolled_back", "rejected")
BAD = ("failed", "unhealthy")


@dataclass
class DeviceView:
    """What is known of one device, from its retained status, its ota/status and its latest health message."""

    device: str
    group: str
    online: bool | None = None
    ota_state: str | None = None
    ota_version: str | None = None
    ota_rollout: str | None = None
    ota_code: str | None = None
    ota_message: str | None = None
    serving: str | None = None        # the version it serves as far as its ota/status says ("base": none)
    pipeline_state: str | None = None
    verdict: str = "waiting"
    detail: str = ""
    rollback_sent: bool = False

    def row(self) -> dict[str, Any]:
        return {"device": self.device, "group": self.group, "state": self.verdict, "serving": self.serving,
                "detail": self.detail, "online": self.online, "ota_state": self.ota_state,
                "ota_code": self.ota_code}


@dataclass(frozen=True)
class Action:
    kind: str     # "publish" or "stop" (target: a group) or "rollback" (target: a device)
    target: str


class Rollout:
    def __init__(self, groups: Sequence[tuple[str, Sequence[str]]], version: str, rollout_id: str, *, soak_s: float,
                 timeout_s: float, clock: Callable[[], float], rollback_wait_s: float = 120.0) -> None:
        if not groups or any(not devices for _, devices in groups):
            raise ValueError("every group needs at least one device")
        self.groups = [(name, list(devices)) for name, devices in groups]
        self.version, self.rollout_id = version, rollout_id
        self.soak_s, self.timeout_s, self.rollback_wait_s = soak_s, timeout_s, rollback_wait_s
        self._clock = clock
        self.devices = {d: DeviceView(d, name) for name, devices in self.groups for d in devices}
        self.current = -1              # index of the group being rolled out
        self._group_started = 0.0
        self._soak_started: float | None = None
        self._stopped_at: float | None = None
        self.reason: str | None = None  # why it stopped (None: not stopped)
        self.finished = False
        self._reported: dict[str, tuple[str, str]] = {}

    @property
    def ok(self) -> bool:
        return self.finished and self.reason is None

    # -- what the devices say --------------------------------------------------------------------------------
    def on_status(self, device: str, doc: Mapping[str, Any]) -> None:
        if device in self.devices:
            self.devices[device].online = doc.get("state") == "online"
            self._judge(self.devices[device])

    def on_ota_status(self, device: str, doc: Mapping[str, Any]) -> None:
        view = self.devices.get(device)
        if view is None:
            return
        view.ota_state, view.ota_version = doc.get("state"), doc.get("version")
        view.ota_rollout, view.ota_code, view.ota_message = doc.get("rollout_id"), doc.get("code"), doc.get("message")
        if view.ota_state == "active":
            view.serving = view.ota_version
        elif view.ota_state == "rolled_back":
            view.serving = view.ota_version or "base"
        self._judge(view)

    def on_health(self, device: str, doc: Mapping[str, Any]) -> None:
        view = self.devices.get(device)
        if view is not None:
            system = doc.get("system")
            view.pipeline_state = system.get("pipeline_state") if isinstance(system, Mapping) else None
            self._judge(view)

    # -- decisions -------------------------------------------------------------------------------------------
    def step(self) -> list[Action]:
        """Judge every device, then move the rollout on; returns what to do now."""
        now = self._clock()
        for view in self.devices.values():
            self._judge(view)
        if self.finished:
            return []
        if self.reason is not None:
            return self._stopping(now)
        if self.current < 0:
            return self._start_group(0, now)
        name, members = self.groups[self.current]
        views = [self.devices[d] for d in members]
        bad = [v for v in views if v.verdict in BAD]
        if bad:
            return self._stop(now, f"group {name}: " + "; ".join(f"{v.device} {v.verdict} ({v.detail})" for v in bad))
        if self._soak_started is None:
            if all(v.verdict == "soaking" for v in views):
                self._soak_started = now
            elif now - self._group_started > self.timeout_s:
                late = [v.device for v in views if v.verdict != "soaking"]
                return self._stop(now, f"group {name}: {', '.join(late)} not active on {self.version} within "
                                       f"{self.timeout_s:g} s")
            return []
        if now - self._soak_started < self.soak_s:
            return []
        for v in views:
            v.verdict, v.detail = "healthy", f"{self.version}, soaked {self.soak_s:g} s"
        if self.current + 1 < len(self.groups):
            return self._start_group(self.current + 1, now)
        self.finished = True
        return []

    def _start_group(self, index: int, now: float) -> list[Action]:
        self.current, self._group_started, self._soak_started = index, now, None
        return [Action("publish", self.groups[index][0])]  # its devices are judged from the next step on

    def _stop(self, now: float, reason: str) -> list[Action]:
        self.reason, self._stopped_at = reason, now
        actions = [Action("stop", name) for name, _ in self.groups[:self.current + 1]]
        for d in self.groups[self.current][1]:
            view = self.devices[d]
            # only what still serves the new version: one that already left it must not be taken further back
            if view.verdict == "unhealthy" and view.ota_state == "active" and view.ota_version == self.version:
                view.rollback_sent, view.verdict = True, "rolling_back"
                actions.append(Action("rollback", d))
        return [*actions, *self._stopping(now)]

    def _stopping(self, now: float) -> list[Action]:
        assert self._stopped_at is not None
        pending = [v for v in self.devices.values() if v.verdict == "rolling_back"]
        if not pending or now - self._stopped_at >= self.rollback_wait_s:
            self.finished = True
        return []

    def _judge(self, view: DeviceView) -> None:
        index = next(i for i, (name, _) in enumerate(self.groups) if name == view.group)
        if view.verdict == "healthy" or index > self.current:
            return
        if view.rollback_sent:
            if view.verdict == "rolled_back":
                return  # confirmed; what it reports later (e.g. refusing the still-retained version) changes nothing
            if view.ota_state == "rolled_back" and view.ota_code == "manual":
                view.verdict, view.detail = "rolled_back", f"serving {view.serving} again"
            else:
                view.verdict = "rolling_back"
            return
        ours = view.ota_rollout == self.rollout_id
        on_target = view.ota_state == "active" and view.ota_version == self.version
        if on_target:
            if view.online is False:
                view.verdict, view.detail = "unhealthy", "offline"
            elif view.pipeline_state not in (None, "serving"):
                view.verdict, view.detail = "unhealthy", f"pipeline {view.pipeline_state}"
            elif view.verdict != "unhealthy":  # once unhealthy, it stays so for this rollout
                view.verdict, view.detail = "soaking", self.version
        elif ours and view.ota_state in ("rejected", "rolled_back"):
            view.verdict, view.detail = "failed", f"{view.ota_state} {view.ota_code}: {view.ota_message}"
        elif ours:
            view.verdict, view.detail = "updating", str(view.ota_state)
        elif view.verdict == "soaking":  # it was on the version and now reports something else
            view.verdict, view.detail = "unhealthy", f"left {self.version}: {view.ota_state} {view.ota_code or ''}"
        elif view.verdict not in BAD:
            view.verdict, view.detail = "pending", ""

    # -- reporting -------------------------------------------------------------------------------------------
    def changes(self) -> list[DeviceView]:
        """The devices whose verdict or detail changed since the last call (one progress line each)."""
        changed = []
        for view in self.devices.values():
            key = (view.verdict, view.detail)
            if self._reported.get(view.device) != key:
                self._reported[view.device] = key
                changed.append(view)
        return changed

    def table(self) -> list[dict[str, Any]]:
        return [self.devices[d].row() for _, members in self.groups for d in members]
