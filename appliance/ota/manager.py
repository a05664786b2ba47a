"""The OTA pipeline: verify -> stage -> build -> check golden frames -> switch -> watch -> keep or roll back.

One update at a time (a thread lock plus ``OtaStore.lock``'s flock across processes). Every step is reported
through ``status_cb``; a refusal is ``OtaRejected`` with a code, and leaves what is served unchanged.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

import appliance
from appliance.ota import compat, golden
from appliance.ota.config import OtaConfig
from appliance.ota.errors import OtaRejected, RollbackError, rejection_for
from appliance.ota.manifest import MANIFEST_NAME, SIGNATURE_NAME, Manifest, version_order
from appliance.ota.signing import TrustedKeys
from appliance.ota.status import FINAL_STATES, OtaStatus, StatusCallback
from appliance.durable import fsync_path
from appliance.ota.store import OtaStore, Pointer
from appliance.ota.unpack import FreeSpace, disk_free, extract_verified, verify_bundle
from appliance.serving.errors import ServingError
from appliance.serving.router import Route
from appliance.serving.switcher import ModelSpec, ModelSwitcher

log = logging.getLogger("appliance.ota")


class OtaManager:
    def __init__(self, state_dir: Path, trusted_keys: TrustedKeys, switcher: ModelSwitcher, *,
                 config: OtaConfig | None = None, status_cb: StatusCallback | None = None,
                 base_spec: Callable[[], ModelSpec] | None = None, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 free_space: FreeSpace = disk_free, appliance_version: str = appliance.__version__,
                 builder: Any = None) -> None:
        self.store = OtaStore(state_dir)
        self.trusted = trusted_keys
        self.switcher = switcher
        self.config = config or OtaConfig()
        self._status_cb = status_cb
        self._base_spec = base_spec
        self._clock, self._monotonic, self._sleep = clock, monotonic, sleep
        self._free_space = free_space
        self._appliance_version = appliance_version
        self._builder = builder
        self._lock = threading.Lock()
        self._journal_owner: int | None = None  # the thread whose install holds the store lock
        self._journaled: str | None = None
        self.last_status: OtaStatus | None = None

    # -- reporting -----------------------------------------------------------------------------------------
    def _report(self, state: str, message: str, manifest: Manifest | None = None, **kw: Any) -> None:
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

    def _report_interrupted(self, entry: dict[str, Any], served: Route) -> None:
        """At start, after an install that never ended: say how it ended on ota/status, whose retained message
        still shows the step the appliance stopped in."""
        version, step = entry.get("version"), entry.get("state", "unknown")
        rid, model = entry.get("request_id"), entry.get("model")
        if version is not None and served.version == version:  # stopped after the pointer moved
            self._report("active", f"{served.label} is serving; the appliance restarted during the update's "
                         f"{step} step, after it had switched", version=version, model=model, request_id=rid)
            return
        rejected = OtaRejected("interrupted", f"the appliance stopped during the {step} step of the update to "
                               f"{version or 'a bundle not yet verified'}; {served.label} serves; send the bundle "
                               "again")
        rejected.version = version  # type: ignore[attr-defined]
        self.report_rejected(rejected, rid)
        pointer = self.store.read_pointer()
        if version is not None and self.store.is_verified(version) and version != pointer.version \
                and version not in pointer.history:  # verified, stopped while watching: never served for good
            log.warning("OTA: removing version %s, verified but never made active", version)
            self.store.remove_version(version)

    # -- start-up --------------------------------------------------------------------------------------------
    def spec(self, version: str | None) -> ModelSpec:
        """The servable spec of an installed version (None = the base model)."""
        from appliance.engines.manager import InstalledEngine

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
            self._report_interrupted(interrupted, route)
            try:
                self.store.clear_journal()
            except OSError as exc:  # the next start reports it again: better than not starting
                log.warning("OTA: could not clear the update journal in %s: %s", self.store.root, exc)
        return route

    # -- install ---------------------------------------------------------------------------------------------
    def install(self, bundle: Path, request_id: str | None = None, wait: bool = True) -> dict[str, Any]:
        """Run the whole pipeline for one bundle. Returns {"state": "active"|"rolled_back", ...}; raises
        OtaRejected. With ``wait=False`` a busy manager rejects instead of queueing."""
        bundle = Path(bundle)
        if not self._lock.acquire(blocking=wait):
            raise OtaRejected("busy", "another update is in progress")
        try:
            self._report("received", f"bundle {bundle.name}", request_id=request_id)
            try:
                with self.store.lock(blocking=wait):
                    self._journal_owner, self._journaled = threading.get_ident(), None
                    return self._install(bundle, request_id)
            except OtaRejected as exc:
                self.report_rejected(exc, request_id)
                raise
            except Exception as exc:  # a bug or an unexpected OS error: still an outcome on ota/status
                log.exception("OTA install of %s failed", bundle.name)
                rejected = _internal(exc)
                self.report_rejected(rejected, request_id)
                raise rejected from exc
        finally:
            self._journal_owner = None
            self._lock.release()

    def report_rejected(self, exc: OtaRejected, request_id: str | None = None) -> None:
        """Report a refusal as the final ``rejected`` status (also for refusals before install(), at delivery)."""
        self._report("rejected", exc.reason, code=exc.code, request_id=request_id,
                     version=getattr(exc, "version", None))

    def _install(self, bundle: Path, rid: str | None) -> dict[str, Any]:
        self.store.ensure()
        self._report("verifying", "signature, manifest and compatibility", request_id=rid)
        opened = verify_bundle(bundle, self.trusted, self.config.max_bundle_bytes)
        m = opened.manifest
        try:
            compat.check_appliance_version(m, self._appliance_version)
            if self.store.read_pointer().version == m.version:
                raise OtaRejected("duplicate", f"version {m.version} is already active")
            self._check_floor(m)
            vdir = self._stage(bundle, opened, rid)
            try:
                compat.check_onnx(m, vdir / m.onnx)
                engine = self._build(m, vdir, rid)
                spec = ModelSpec(m.version, m.model_profile, engine)
                return self._switch(spec, m, engine, opened.key_id, rid)
            except BaseException:
                if not self.store.is_verified(m.version) or self.store.read_pointer().version != m.version:
                    self.store.remove_version(m.version)
                raise
        except OtaRejected as exc:
            exc.version = m.version  # type: ignore[attr-defined]
            raise
        except Exception as exc:
            log.exception("OTA install of %s failed", m.label)
            rejected = _internal(exc)
            rejected.version = m.version  # type: ignore[attr-defined]
            raise rejected from exc

    def version_floor(self) -> str | None:
        """The anti-rollback floor: the newest version ever made active (also the active one, should a power cut
        have come between moving the pointer and raising the floor)."""
        floor, active = self.store.read_floor(), self.store.read_pointer().version
        candidates = [v for v in (floor, active) if v is not None and version_order(v) is not None]
        return max(candidates, key=lambda v: version_order(v) or ()) if candidates else None

    def _check_floor(self, m: Manifest) -> None:
        """Only a newer version installs: a captured old bundle, validly signed, must not be replayed onto the
        device. Going back to a kept version is ``rollback()``, which this does not limit."""
        order = version_order(m.version)
        if order is None:
            raise OtaRejected("invalid_manifest", f"version {m.version!r} cannot be ordered: bundle versions are "
                                                  "dotted numbers (7, 2.1, 2024.05.1), each newer than the last")
        try:
            floor = self.version_floor()
        except ValueError as exc:  # a damaged floor file: refuse rather than let an old bundle in
            raise OtaRejected("downgrade", f"{exc}; no update installs until it is fixed") from None
        if floor is not None and order <= (version_order(floor) or ()):
            raise OtaRejected("downgrade", f"version {m.version} is not newer than {floor}, the newest version this "
                                           "device has served (a replayed old bundle?); go back to a kept version with "
                                           "the rollback action, or ship the fix with a higher version")

    def _stage(self, bundle: Path, opened: Any, rid: str | None) -> Path:
        m = opened.manifest
        self._report("staging", f"{len(m.files)} file(s), {sum(f.size for f in m.files.values())} bytes", m,
                     request_id=rid)
        self.store.remove_version(m.version)  # an earlier, interrupted attempt
        tmp = self.store.staging_dir / f"{m.version}.{os.getpid()}.{threading.get_ident()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            extract_verified(bundle, opened, tmp, self._free_space, self.config.reserve_bytes)
            (tmp / MANIFEST_NAME).write_bytes(opened.manifest_bytes)
            (tmp / SIGNATURE_NAME).write_bytes(opened.signature)
            fsync_path(tmp)
            final = self.store.version_dir(m.version)
            os.replace(tmp, final)
            fsync_path(self.store.versions_dir)
            return final
        except OSError as exc:
            raise OtaRejected("disk_full" if exc.errno == 28 else "delivery", f"staging failed: {exc}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _build(self, m: Manifest, vdir: Path, rid: str | None) -> Any:
        from appliance.engines.builders import select_builder
        from appliance.engines.manager import EngineBuildError, EngineManager
        from appliance.engines.progress import ProgressReporter

        def progress(event: Any) -> None:
            self._report("building", f"{event.phase}: {event.message}", m, percent=round(event.percent, 1),
                         request_id=rid)

        self._report("building", "engine for this device", m, percent=0.0, request_id=rid)
        # Files the profile names (the ONNX, verify.golden, calibration and gate frames) are the staged bundle's:
        # resolve them in vdir. The bundle's model profile is the pre/post an int8 build calibrates and gates with.
        profile = m.engine_profile.model_copy(update={"onnx": m.onnx}).located_in(vdir)
        try:
            builder = self._builder or select_builder(self.config.builder)  # type: ignore[arg-type]
            manager = EngineManager(vdir / "engine-state", vdir, builder, reporter=ProgressReporter(callback=progress),
                                    clock=self._clock)
            return manager.ensure(profile, model_profile=m.model_profile)
        except EngineBuildError as exc:
            raise OtaRejected("build_failed", f"{exc.phase}: {exc.reason}") from None
        except Exception as exc:  # builder unavailable, unexpected toolchain errors
            raise OtaRejected("build_failed", f"{type(exc).__name__}: {exc}") from None

    def _check_golden(self, route: Route, m: Manifest, vdir: Path, rid: str | None) -> str:
        # (label for messages, root of the frame files, frames, tolerance)
        sets: list[tuple[str, Path, list[Any], Any]] = []
        if m.golden:
            sets.append(("", vdir, m.golden, m.golden_tolerance))
        if self.config.device_golden_dir is not None:
            try:
                device = golden.load_device_set(self.config.device_golden_dir)
            except golden.GoldenSetError as exc:
                raise OtaRejected("golden_mismatch", f"device golden set: {exc}") from None
            sets.append((f"device golden set {self.config.device_golden_dir}: ", self.config.device_golden_dir,
                         device.frames, device.tolerance))
        total = sum(len(frames) for _, _, frames, _ in sets)
        self._report("checking", f"{total} golden frame(s)", m, request_id=rid)
        failures = []
        for label, root, frames, tol in sets:
            for frame in frames:
                # A frame that cannot be read or run fails the check like a wrong detection does.
                try:
                    image = golden.read_image(root / frame.file)
                except golden.GoldenSetError as exc:
                    raise OtaRejected("golden_mismatch", f"{label}golden frame {frame.file}: {exc}") from None
                try:
                    det = self.switcher.detect(route, image)
                except OtaRejected:
                    raise
                except Exception as exc:  # Triton refused or failed the request
                    raise OtaRejected("golden_mismatch", f"{label}golden frame {frame.file}: {route.label} failed "
                                                         f"to run it: {type(exc).__name__}: {exc}") from None
                result = golden.compare(frame.file, frame.expected, det.boxes, det.scores, det.class_ids,
                                        m.model_profile.classes, tol)
                if not result.passed:
                    failures.append(label + result.summary())
        if failures:
            raise OtaRejected("golden_mismatch", "; ".join(failures))
        return f"{total} golden frame(s) passed"

    def _switch(self, spec: ModelSpec, m: Manifest, engine: Any, key_id: str, rid: str | None) -> dict[str, Any]:
        self._report("switching", f"loading {m.label} beside the current model", m, request_id=rid)
        old = self.switcher.current()
        new = self._load(spec)
        try:
            summary = self._check_golden(new, m, self.store.version_dir(m.version), rid) \
                if self.config.check_golden else "golden frames skipped"
            installed = self.store.installed()
            self.store.mark_verified(m.version, {
                "version": m.version, "model": m.model, "key_id": key_id, "installed_at": self._clock(),
                "installed_seq": (self.store.verified_record(installed[-1])["installed_seq"] + 1) if installed else 1,
                "golden": summary, "engine": engine.to_dict()})
        except BaseException:
            self.switcher.retire(new)
            raise
        policy = self.config.health
        routed = False
        try:
            t_switch = self._monotonic()
            baseline = self.switcher.health(old, since=t_switch - policy.period_s) if old is not None else None
            self.switcher.route(new)
            routed = True
            self._report("watching", f"traffic moved to {new.ensemble}; watching health for {policy.period_s:g} s",
                         m, request_id=rid)
            problem = self._watch(new, baseline, t_switch) if old is not None else None
            if problem is None:
                history = self._history(self.store.read_pointer())
                self.store.write_pointer(Pointer(m.version, history))
                self._raise_floor(m.version)
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
        self._report("active", f"{m.label} is serving ({summary})", m, request_id=rid)
        return {"state": "active", "version": m.version, "model": m.model, "ensemble": new.ensemble,
                "golden": summary, "pruned": removed}

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

    def _raise_floor(self, version: str) -> None:
        """After the pointer moved: the floor follows (version_floor() also counts the active version, so a floor
        that cannot be written is logged, not a failed update)."""
        try:
            self.store.raise_floor(version)
        except (OSError, ValueError) as exc:
            log.error("OTA: could not raise the version floor to %s in %s: %s", version, self.store.root, exc)

    def _history(self, previous: Pointer) -> tuple[str | None, ...]:
        """The new pointer's history: the base model (None, always servable) and the newest verified versions
        served before, so that with the new active one ``keep_versions`` versions are kept."""
        served = (*previous.history, previous.version)
        versions = [v for v in served if v is not None and self.store.is_verified(v)]
        keep = versions[-(self.config.keep_versions - 1):] if self.config.keep_versions > 1 else []
        return (*((None,) if None in served else ()), *keep)

    def _watch(self, route: Route, baseline: Any, since: float) -> str | None:
        from appliance.ota.health import breach

        policy = self.config.health
        while True:
            elapsed = self._monotonic() - since
            final = elapsed >= policy.period_s
            problem = breach(policy, self.switcher.health(route, since), baseline, final)
            if problem is not None or final:
                return problem
            self._sleep(min(policy.check_interval_s, policy.period_s - elapsed))

    # -- rollback / status -----------------------------------------------------------------------------------
    def rollback(self, request_id: str | None = None) -> dict[str, Any]:
        """Serve the previous complete, verified version (or the base model)."""
        with self._lock, self.store.lock():
            pointer = self.store.read_pointer()
            history = list(pointer.history)
            while history and history[-1] is not None and not self.store.is_verified(history[-1]):
                history.pop()
            if not history:
                raise RollbackError(f"nothing to roll back to from {pointer.version or 'the base model'}")
            target = history.pop()
            if pointer.version is not None:  # in case a power cut came between pointer and floor at install
                self._raise_floor(pointer.version)
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
            floor: str | None = self.version_floor()
        except ValueError as exc:
            floor = f"unreadable: {exc}"
        return {"active": pointer.version, "history": list(pointer.history), "installed": self.store.installed(),
                "version_floor": floor,
                "serving": current.label if current else None,
                "last": self.last_status.to_dict() if self.last_status else None}


def _internal(exc: BaseException) -> OtaRejected:
    """An unexpected failure as a rejection: the status names the exception instead of stopping mid-way."""
    return OtaRejected("internal", f"unexpected {type(exc).__name__}: {exc}")
