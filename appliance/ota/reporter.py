"""How an update tells its progress: every step and outcome as an ``OtaStatus`` to ``status_cb`` (published
on ota/status), and the install's latest step in the store's journal, so that after a kill the next start can
say how the interrupted update ended."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from appliance.detector.serving.router import Route
from appliance.ota.errors import OtaRejected
from appliance.ota.manifest import Manifest
from appliance.ota.status import FINAL_STATES, OtaStatus, StatusCallback
from appliance.ota.store import OtaStore

log = logging.getLogger(__name__)


class Report(Protocol):
    """``StatusReporter.report``, as the install steps call it."""

    def __call__(self, state: str, message: str, manifest: Manifest | None = None, **kw: Any) -> None: ...


class StatusReporter:
    """Reports for one ``OtaManager``; journals only the steps of the running install."""

    def __init__(self, store: OtaStore, status_cb: StatusCallback | None, clock: Callable[[], float]) -> None:
        self.store = store
        self._status_cb = status_cb
        self._clock = clock
        self._journal_owner: int | None = None  # the thread whose install holds the store lock
        self._journaled: str | None = None
        self._rollouts: dict[int, str] = {}  # thread -> the rollout id its install reports under
        self.last_status: OtaStatus | None = None

    def journal_this_thread(self) -> None:
        """From now on journal this thread's reports (the install that holds the store lock), until
        :meth:`stop_journaling`; its final outcome, reported after the lock is given back, clears the journal."""
        self._journal_owner, self._journaled = threading.get_ident(), None

    def stop_journaling(self) -> None:
        self._journal_owner = None

    def tag_this_thread(self, rollout_id: str | None) -> None:
        """Until called again with None, this thread's reports carry ``rollout_id`` (an install a fleet
        rollout asked for)."""
        if rollout_id is None:
            self._rollouts.pop(threading.get_ident(), None)
        else:
            self._rollouts[threading.get_ident()] = rollout_id

    def report(self, state: str, message: str, manifest: Manifest | None = None, **kw: Any) -> None:
        if kw.get("rollout_id") is None:
            kw["rollout_id"] = self._rollouts.get(threading.get_ident())
        status = OtaStatus(state, message, manifest.version if manifest else kw.pop("version", None),
                           manifest.model if manifest else kw.pop("model", None), time=self._clock(), **kw)
        self.last_status = status
        (log.warning if state in ("rejected", "rolled_back") else log.info)("OTA %s: %s", state, message)
        # A step is journaled before it is published and an outcome after: a kill in between makes the restart
        # report the outcome (again), never leaves it unsaid.
        journal = threading.get_ident() == self._journal_owner  # not a delivery refusal from another thread
        if journal and state not in FINAL_STATES:
            self._journal(status)
        if self._status_cb is not None:
            try:
                self._status_cb(status)
            except Exception:
                log.exception("OTA status callback failed")
        if journal and state in FINAL_STATES:
            self._journal(status)

    def rejected(self, exc: OtaRejected, request_id: str | None = None, rollout_id: str | None = None) -> None:
        """Report a refusal as the final ``rejected`` status."""
        self.report("rejected", exc.reason, code=exc.code, request_id=request_id, rollout_id=rollout_id,
                    version=exc.version)

    def interrupted(self, entry: dict[str, Any], served: Route) -> bool:
        """At start, after an install that never ended (``entry`` is its journal): say how it ended on
        ota/status, whose retained message still shows the step the appliance stopped in. True when it had
        switched (``served`` is its version), False when it was refused."""
        version, step = entry.get("version"), entry.get("state", "unknown")
        rid, model = entry.get("request_id"), entry.get("model")
        if version is not None and served.version == version:  # stopped after the pointer moved
            self.report("active", f"{served.label} is serving; the appliance restarted during the update's "
                        f"{step} step, after it had switched", version=version, model=model, request_id=rid)
            return True
        rejected = OtaRejected("interrupted", f"the appliance stopped during the {step} step of the update to "
                               f"{version or 'a bundle not yet verified'}; {served.label} serves; send the bundle "
                               "again", version)
        self.rejected(rejected, rid)
        return False

    def _journal(self, status: OtaStatus) -> None:
        """Keep the store's journal at the install's latest step (only state changes, not build percent)."""
        try:
            if status.state in FINAL_STATES:
                self.store.clear_journal()
                self._journaled = None
            elif status.state != self._journaled:
                self.store.write_journal(status.to_dict())
                self._journaled = status.state
        except OSError as exc:  # the journal only serves the report after a restart: never fail an update on it
            log.warning("OTA: could not update the journal in %s: %s", self.store.root, exc)
