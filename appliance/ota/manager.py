"""The OTA pipeline: verify -> stage -> build -> check golden frames -> switch -> watch -> keep or roll back.

One update at a time (a thread lock plus ``OtaStore.lock``'s flock across processes). Every step is reported
through ``status_cb``; a refusal is ``OtaRejected`` with a code, and leaves what is served unchanged.

A rollback cancels every update asked for before it: an update checks between its steps (and while it watches
health) and stops as ``cancelled``. The rollback waits ``rollback_wait_s`` for it to stop; an update still inside
a step that cannot be interrupted (an engine build) is *superseded*: the rollback goes ahead under the serving
lock, which an update holds from the moment it routes traffic until it commits or undoes, and the update stops
at its next check.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any, Callable

import appliance
from appliance.detector.engines.manager import InstalledEngine
from appliance.detector.serving.errors import ServingError
from appliance.detector.serving.router import Route
from appliance.detector.serving.switcher import ModelSpec, ModelSwitcher
from appliance.ota import compat, floor, steps
from appliance.ota.config import OtaConfig
from appliance.ota.errors import OtaRejected, RollbackError, rejection_for
from appliance.ota.health import breach
from appliance.ota.manifest import Manifest
from appliance.ota.reporter import StatusReporter
from appliance.ota.signing import TrustedKeys
from appliance.ota.status import OtaStatus, StatusCallback
from appliance.ota.store import OtaStore, Pointer
from appliance.ota.unpack import FreeSpace, disk_free, verify_bundle

log = logging.getLogger(__name__)


class OtaManager:
    def __init__(self, state_dir: Path, trusted_keys: TrustedKeys, switcher: ModelSwitcher, *,
                 config: OtaConfig | None = None, status_cb: StatusCallback | None = None,
                 base_spec: Callable[[], ModelSpec] | None = None, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 free_space: FreeSpace = disk_free, appliance_version: str = appliance.__version__,
                 builder: Any = None, filter_classes: Collection[str] = ()) -> None:
        """``filter_classes``: the classes the config's class filters name; a model that lacks one is named on
        ota/status (``missing_classes``), or refused with ``ota.require_classes``."""
        self.store = OtaStore(state_dir)
        self.trusted = trusted_keys
        self.switcher = switcher
        self.config = config or OtaConfig()
        self._reporter = StatusReporter(self.store, status_cb, clock)
        self._report = self._reporter.report
        self._base_spec = base_spec
        self._clock, self._monotonic, self._sleep = clock, monotonic, sleep
        self._free_space = free_space
        self._appliance_version = appliance_version
        self._builder = builder
        self._filter_classes = frozenset(filter_classes)
        self._lock = threading.Lock()      # one update (or rollback) at a time
        self._serving = threading.Lock()   # what is routed and the pointer: install's switch, a rollback
        self._rollbacks = 0                # rollbacks asked for so far; an update started before one is cancelled
        self._counting = threading.Lock()
        self._updating: str | None = None  # the update in this process: its bundle, then its version
        self._holds_store = threading.Event()

    @property
    def free_space(self) -> FreeSpace:
        return self._free_space

    def rollbacks(self) -> int:
        """How many rollbacks were asked for: pass it to ``install(since_rollback=...)`` when an update is asked
        for, so that a rollback that comes while it is still being delivered cancels it too."""
        return self._rollbacks

    @property
    def last_status(self) -> OtaStatus | None:
        """The latest status reported (the last outcome, or the step an update is in)."""
        return self._reporter.last_status

    # -- start-up --------------------------------------------------------------------------------------------
    def spec(self, version: str | None) -> ModelSpec:
        """The servable spec of an installed version (None = the base model)."""
        if version is None:
            if self._base_spec is None:
                raise RollbackError("no base model is configured")
            return self._base_spec()
        record = self.store.verified_record(version)
        eng = dict(record["engine"])
        for key in ("engine_path", "manifest_path", "onnx_path"):
            eng[key] = Path(eng[key])
        return ModelSpec(version, self.store.manifest(version).model_profile, InstalledEngine(**eng))

    def _load(self, spec: ModelSpec) -> Route:
        """Load ``spec`` beside what serves; the serving layer's refusal becomes this update's rejection."""
        try:
            return self.switcher.load(spec)
        except ServingError as exc:
            raise rejection_for(exc) from exc

    def start_serving(self) -> Route:
        """At appliance start: recover the state dir, load and route the version the pointer names (a complete,
        verified one; the base model when there is none or it fails to load)."""
        version = self.store.recover()
        interrupted = self.store.read_journal()
        try:
            route = self._load(self.spec(version))
        except OtaRejected as exc:
            if version is None:
                raise
            log.error("OTA version %s failed to load at start (%s); serving the base model", version, exc)
            route = self._load(self.spec(None))
        self.switcher.route(route)
        if interrupted is not None:
            if not self._reporter.interrupted(interrupted, route):
                self._remove_unfinished(interrupted.get("version"))
            try:
                self.store.clear_journal()
            except OSError as exc:  # the next start reports it again: better than not starting
                log.warning("OTA: could not clear the update journal in %s: %s", self.store.root, exc)
        return route

    def _remove_unfinished(self, version: str | None) -> None:
        """After an interrupted install: a version verified, then stopped while watching, was never served for
        good; it goes."""
        pointer = self.store.read_pointer()
        if version is not None and self.store.is_verified(version) and version != pointer.version \
                and version not in pointer.history:
            log.warning("OTA: removing version %s, verified but never made active", version)
            self.store.remove_version(version)

    # -- install ---------------------------------------------------------------------------------------------
    def install(self, bundle: Path, request_id: str | None = None, wait: bool = True,
                rollout_id: str | None = None, since_rollback: int | None = None) -> dict[str, Any]:
        """Run the whole pipeline for one bundle. Returns {"state": "active"|"rolled_back", ...}; raises
        OtaRejected. With ``wait=False`` a busy manager rejects instead of queueing. ``rollout_id``: the fleet
        rollout that asked for it, carried by every status of this install. ``since_rollback``: ``rollbacks()``
        when the update was asked for (default: now); a rollback after that cancels it."""
        bundle = Path(bundle)
        asked = self._rollbacks if since_rollback is None else since_rollback
        if not self._lock.acquire(blocking=wait):
            raise OtaRejected("busy", "another update is in progress")
        self._reporter.tag_this_thread(rollout_id)
        self._updating = bundle.name
        try:
            self._report("received", f"bundle {bundle.name}", request_id=request_id)
            try:
                with self.store.lock(blocking=wait):
                    self._holds_store.set()
                    self._reporter.journal_this_thread()
                    return self._install(bundle, request_id, asked)
            except OtaRejected as exc:
                self.report_rejected(exc, request_id)
                raise
            except Exception as exc:  # a bug or an unexpected OS error: still an outcome on ota/status
                log.exception("OTA install of %s failed", bundle.name)
                rejected = _internal(exc)
                self.report_rejected(rejected, request_id)
                raise rejected from exc
        finally:
            self._holds_store.clear()
            self._updating = None
            self._reporter.stop_journaling()
            self._reporter.tag_this_thread(None)
            self._lock.release()

    def _check_cancel(self, asked: int) -> None:
        """Between steps: a rollback since the update was asked for stops it."""
        if self._rollbacks != asked:
            raise OtaRejected("cancelled", "a rollback was asked for after this update; it stopped before "
                                           "becoming active (send it again to install it)")

    def report_rejected(self, exc: OtaRejected, request_id: str | None = None, rollout_id: str | None = None) -> None:
        """Report a refusal as the final ``rejected`` status (also for refusals before install(), at delivery)."""
        self._reporter.rejected(exc, request_id, rollout_id)

    def _install(self, bundle: Path, rid: str | None, asked: int) -> dict[str, Any]:
        self._check_cancel(asked)
        self.store.ensure()
        self._report("verifying", "signature, manifest and compatibility", request_id=rid)
        opened = verify_bundle(bundle, self.trusted, self.config.max_bundle_bytes)
        m = opened.manifest
        self._updating = m.version  # what a rollback's result names from now on
        try:
            compat.check_appliance_version(m, self._appliance_version)
            missing = self._missing_classes(m)
            if self.store.read_pointer().version == m.version:
                raise OtaRejected("duplicate", f"version {m.version} is already active")
            floor.check_floor(self.store, m)
            vdir = steps.stage(self.store, bundle, opened, self._free_space, self.config.reserve_bytes, self._report,
                               rid)
            try:
                compat.check_onnx(m, vdir / m.onnx)
                self._check_cancel(asked)
                engine = steps.build(m, vdir, self._builder, self.config.builder, self._clock, self._report, rid)
                self._check_cancel(asked)
                spec = ModelSpec(m.version, m.model_profile, engine)
                return self._switch(spec, m, engine, opened.key_id, rid, asked, missing)
            except BaseException:
                if not self.store.is_verified(m.version) or self.store.read_pointer().version != m.version:
                    self.store.remove_version(m.version)
                raise
        except OtaRejected as exc:
            exc.version = m.version
            raise
        except Exception as exc:
            log.exception("OTA install of %s failed", m.label)
            rejected = _internal(exc)
            rejected.version = m.version
            raise rejected from exc

    def _missing_classes(self, m: Manifest) -> tuple[str, ...]:
        """The filter classes ``m``'s model lacks; refuses when ``ota.require_classes`` is on."""
        missing = tuple(sorted(self._filter_classes - set(m.model_profile.classes)))
        if missing and self.config.require_classes:
            raise OtaRejected("missing_classes", f"{m.label} lacks the class(es) {', '.join(missing)} that the "
                                                 "config's analytics.classes name (ota.require_classes is on)")
        return missing

    def version_floor(self) -> str | None:
        """The anti-rollback floor (see :mod:`appliance.ota.floor`)."""
        return floor.version_floor(self.store)

    def _switch(self, spec: ModelSpec, m: Manifest, engine: InstalledEngine, key_id: str, rid: str | None,
                asked: int, missing: tuple[str, ...] = ()) -> dict[str, Any]:
        self._report("switching", f"loading {m.label} beside the current model", m, request_id=rid)
        old = self.switcher.current()
        new = self._load(spec)
        try:
            summary = steps.check_golden(self.switcher, new, m, self.store.version_dir(m.version),
                                         self.config.device_golden_dir, self._report, rid) \
                if self.config.check_golden else "golden frames skipped"
            installed = self.store.installed()
            self.store.mark_verified(m.version, {
                "version": m.version, "model": m.model, "key_id": key_id, "installed_at": self._clock(),
                "installed_seq": (self.store.verified_record(installed[-1])["installed_seq"] + 1) if installed else 1,
                "golden": summary, "engine": engine.to_dict()})
        except BaseException:
            self.switcher.retire(new)
            raise
        with self._serving:
            return self._route_and_watch(new, old, m, summary, rid, asked, missing)

    def _route_and_watch(self, new: Route, old: Route | None, m: Manifest, summary: str, rid: str | None,
                         asked: int, missing: tuple[str, ...]) -> dict[str, Any]:
        """Move traffic to ``new``, watch its health, then commit it or go back to ``old`` (under ``_serving``)."""
        policy = self.config.health
        routed = False
        try:
            self._check_cancel(asked)  # a rollback that went ahead while this update was busy
            t_switch = self._monotonic()
            baseline = self.switcher.health(old, since=t_switch - policy.period_s) if old is not None else None
            self.switcher.route(new)
            routed = True
            self._report("watching", f"traffic moved to {new.ensemble}; watching health for {policy.period_s:g} s",
                         m, request_id=rid)
            problem = self._watch(new, baseline, t_switch, asked) if old is not None else None
            if problem is None:
                history = self._history(self.store.read_pointer())
                self.store.write_pointer(Pointer(m.version, history))
                floor.raise_floor(self.store, m.version)
        except BaseException:
            # Nothing is committed before the pointer moves: whatever failed, the old version serves on.
            self._undo(new, old, routed)
            raise
        if problem is not None:
            assert old is not None
            self.switcher.route(old)
            self.switcher.retire(new)
            self.store.remove_version(m.version)
            self._report("rolled_back", f"{m.label} rolled back to {old.label}: {problem}", m, code="health",
                         request_id=rid)
            return {"state": "rolled_back", "version": m.version, "reason": problem, "serving": old.label}
        # Committed: the new version is active whatever happens to the clean-up below.
        removed: list[str] = []
        try:
            if old is not None:
                self.switcher.retire(old)
            # Only what rollback can reach stays on disk: the active version and its history.
            removed = self.store.prune(0, protect={m.version, *history})  # keep_versions is in _history()
        except Exception:
            log.exception("OTA: cleaning up after %s became active failed", m.label)
        lacks = f"; it lacks the filtered class(es) {', '.join(missing)}: those entries are inactive" if missing else ""
        self._report("active", f"{m.label} is serving ({summary}){lacks}", m, request_id=rid,
                     missing_classes=missing or None)
        return {"state": "active", "version": m.version, "model": m.model, "ensemble": new.ensemble,
                "golden": summary, "pruned": removed, **({"missing_classes": list(missing)} if missing else {})}

    def _undo(self, new: Route, old: Route | None, routed: bool) -> None:
        """Route back to ``old`` (when traffic had moved) and unload ``new``; logs instead of masking the error
        that got us here."""
        try:
            if routed and old is not None:
                self.switcher.route(old)
            if not routed or old is not None:  # with nothing to go back to, new stays routed (never unloaded)
                self.switcher.retire(new)
        except Exception:
            log.exception("OTA: restoring %s after a failed switch to %s failed", old.label if old else "base",
                          new.label)

    def _history(self, previous: Pointer) -> tuple[str | None, ...]:
        """The new pointer's history: the base model (None, always servable) and the newest verified versions
        served before, so that with the new active one ``keep_versions`` versions are kept."""
        served = (*previous.history, previous.version)
        versions = [v for v in served if v is not None and self.store.is_verified(v)]
        keep = versions[-(self.config.keep_versions - 1):] if self.config.keep_versions > 1 else []
        return (*((None,) if None in served else ()), *keep)

    def _watch(self, route: Route, baseline: Any, since: float, asked: int) -> str | None:
        policy = self.config.health
        while True:
            self._check_cancel(asked)
            elapsed = self._monotonic() - since
            final = elapsed >= policy.period_s
            problem = breach(policy, self.switcher.health(route, since), baseline, final)
            if problem is not None or final:
                return problem
            self._sleep(min(policy.check_interval_s, policy.period_s - elapsed))

    # -- rollback / status -----------------------------------------------------------------------------------
    def rollback(self, request_id: str | None = None) -> dict[str, Any]:
        """Serve the previous complete, verified version (or the base model). An update in progress is cancelled
        (it stopped at its next step: ``"cancelled"`` names it) or, when it does not stop within
        ``rollback_wait_s``, superseded (``"superseded"``: it stops when its step ends, never becoming active)."""
        with self._counting:
            self._rollbacks += 1
        updating = self._updating
        if self._lock.acquire(timeout=self.config.rollback_wait_s):
            try:
                last = self.last_status
                stopped = updating is not None and last is not None and last.code == "cancelled"
                with self.store.lock():
                    result = self._roll_back(request_id)
            finally:
                self._lock.release()
            return {**result, **({"cancelled": updating} if stopped else {})}
        if not self._holds_store.is_set():
            raise RollbackError(f"an update is waiting for the OTA store lock, held by another process, for over "
                                f"{self.config.rollback_wait_s:g} s; send the rollback again")
        log.warning("OTA: rollback goes ahead of the update of %s, busy in a step that cannot stop (it stops when "
                    "the step ends)", updating)
        with self._serving:  # the update holds the store's flock and cannot switch while this is held
            result = self._roll_back(request_id)
        return {**result, "superseded": updating}

    def _roll_back(self, request_id: str | None) -> dict[str, Any]:
        pointer = self.store.read_pointer()
        history = list(pointer.history)
        while history and history[-1] is not None and not self.store.is_verified(history[-1]):
            history.pop()
        if not history:
            raise RollbackError(f"nothing to roll back to from {pointer.version or 'the base model'}")
        target = history.pop()
        if pointer.version is not None:  # in case a power cut came between pointer and floor at install
            floor.raise_floor(self.store, pointer.version)
        old = self.switcher.current()
        new = self._load(self.spec(target))
        self.switcher.route(new)
        self.store.write_pointer(Pointer(target, tuple(history)))
        if old is not None:
            self.switcher.retire(old)
        label = target or "base"
        self._report("rolled_back", f"rolled back from {pointer.version or 'base'} to {label}", code="manual",
                     version=target, request_id=request_id)
        return {"state": "rolled_back", "from": pointer.version, "to": target}

    def status(self) -> dict[str, Any]:
        pointer = self.store.read_pointer()
        current = self.switcher.current()
        try:
            version_floor: str | None = self.version_floor()
        except ValueError as exc:
            version_floor = f"unreadable: {exc}"
        return {"active": pointer.version, "history": list(pointer.history), "installed": self.store.installed(),
                "version_floor": version_floor,
                "serving": current.label if current else None,
                "last": self.last_status.to_dict() if self.last_status else None}


def _internal(exc: BaseException) -> OtaRejected:
    """An unexpected failure as a rejection: the status names the exception instead of stopping mid-way."""
    return OtaRejected("internal", f"unexpected {type(exc).__name__}: {exc}")
