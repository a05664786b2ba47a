"""A device follows its fleet group's desired state (``appliance.ota.desired``): on a new signed document it downloads
the bundle, checks its SHA-256 and installs it through the ordinary pipeline, every status carrying the rollout id.

Refusals and failures are remembered in ``<state>/ota/rollouts.json``, so neither the retained document coming
again on a reconnect nor a restart retries them. ``offer`` runs on the MQTT network thread and only keeps the newest
payload; one worker thread handles it, since installs take minutes. The checks, in order: docs/fleet-rollout.md,
"The device"."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from appliance.durable import sha256_file, write_json_durably
from appliance.mqtt.publisher import MqttPublisher
from appliance.mqtt.topics import group_desired
from appliance.ota import floor
from appliance.ota.config import OtaConfig
from appliance.ota.desired import NAME, DesiredState, parse_desired
from appliance.ota.download import fetch
from appliance.ota.errors import OtaError, OtaRejected
from appliance.ota.manager import OtaManager
from appliance.ota.manifest import version_order

log = logging.getLogger(__name__)
_REMEMBERED = 50


class DesiredStateFollower:
    """``offer(payload)`` from the subscription; ``start()``/``stop()`` the worker; ``handle(payload)`` does one
    document synchronously (the worker's step; tests call it)."""

    def __init__(self, manager: OtaManager, config: OtaConfig, group: str, incoming_dir: Path,
                 clock: Callable[[], float] = time.time) -> None:
        self.manager = manager
        self._clock = clock
        self._newest_issued = -1  # issued_at_ms of the newest document handled
        self.config = config
        self.group = group
        self.incoming = Path(incoming_dir)
        self.memory = manager.store.root / "rollouts.json"
        self._pending: bytes | None = None
        self._last: bytes | None = None
        self._wake = threading.Event()
        self._stopping = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- network thread --------------------------------------------------------------------------------------
    def offer(self, payload: bytes) -> None:
        with self._lock:
            self._pending = payload
        self._wake.set()

    # -- worker ----------------------------------------------------------------------------------------------
    def start(self) -> "DesiredStateFollower":
        self._thread = threading.Thread(target=self._run, name=f"ota-group-{self.group}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop taking documents; an install under way finishes on its own (it is not interrupted)."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            with self._lock:
                payload, self._pending = self._pending, None
            if payload is None:
                continue
            try:
                self.handle(payload)
            except Exception:  # a bug: logged, and the next document is still followed
                log.exception("OTA group %s: handling the desired state failed", self.group)

    def handle(self, payload: bytes) -> str:
        """One document; returns what was done (``ignored``, ``refused``, ``older``, ``stopped``, ``expired``,
        ``current``, ``failed_before``, ``rolled_away``, ``active``, ``rolled_back``)."""
        if payload == self._last or not payload.strip():
            return "ignored"  # a redelivery of the retained document, or the topic cleared
        self._last = payload
        try:
            state = parse_desired(payload, self.manager.trusted, self.group)
        except OtaRejected as exc:
            log.warning("OTA group %s: desired state refused: %s", self.group, exc)
            self.manager.report_rejected(exc, rollout_id=_readable_rollout_id(payload))
            return "refused"
        seen = self._seen(state)
        if seen is not None:
            return seen
        if self.manager.store.read_pointer().version == state.version:
            log.info("OTA group %s: rollout %s wants %s, which is already active", self.group, state.rollout_id,
                     state.version)
            return "current"
        if self._failed_before(state):
            log.info("OTA group %s: rollout %s (version %s) failed here before; not trying it again (a new rollout "
                     "id does)", self.group, state.rollout_id, state.version)
            return "failed_before"
        if self._rolled_away(state):
            log.info("OTA group %s: rollout %s wants %s, which this device served and was rolled back from; not "
                     "taking it again", self.group, state.rollout_id, state.version)
            self._remember(state, "rolled_back_before")
            return "rolled_away"
        return self._install(state)

    def _seen(self, state: DesiredState) -> str | None:
        """What to return for a document that is not to be followed (older, stopped, expired), else None."""
        if state.issued_at_ms < self._newest_issued:
            log.warning("OTA group %s: ignoring a desired state issued at %d ms, before the one handled last (%d ms): "
                        "an old document put back on the topic?", self.group, state.issued_at_ms, self._newest_issued)
            return "older"
        self._newest_issued = state.issued_at_ms
        if state.state == "stopped":
            log.info("OTA group %s: rollout %s of version %s was stopped; not installing it", self.group,
                     state.rollout_id, state.version)
            return "stopped"
        if state.expired(self._clock()):
            log.info("OTA group %s: rollout %s (version %s) expired at %d ms; not installing it (a new rollout "
                     "does)", self.group, state.rollout_id, state.version, state.expires_at_ms)
            return "expired"
        return None

    def _rolled_away(self, state: DesiredState) -> bool:
        """The version is the floor itself but not active: served here, then rolled back from (the rollback's
        status stays the last word on ota/status; a version below the floor is a refusal, reported)."""
        try:
            return floor.version_floor(self.manager.store) == state.version
        except ValueError:
            return False  # an unreadable floor: _check_floor refuses and reports it

    def _install(self, state: DesiredState) -> str:
        asked = self.manager.rollbacks()  # a rollback during the download cancels this update too
        bundle = self.incoming / f"rollout-{state.rollout_id}-{os.getpid()}.bundle"
        try:
            self._check_floor(state)
            self.incoming.mkdir(parents=True, exist_ok=True)
            fetch(state.url, bundle, self.config, self.manager.free_space)
            got = sha256_file(bundle)
            if got != state.sha256:
                raise OtaRejected("hash_mismatch", f"{state.url} has SHA-256 {got}, the desired state says "
                                                   f"{state.sha256}")
        except OtaError as exc:
            rejected = exc if isinstance(exc, OtaRejected) else OtaRejected("delivery", str(exc))
            rejected.version = state.version
            self.manager.report_rejected(rejected, rollout_id=state.rollout_id)
            self._remember(state, rejected.code)
            bundle.unlink(missing_ok=True)
            return "refused"
        try:
            result = self.manager.install(bundle, rollout_id=state.rollout_id, since_rollback=asked)
        except OtaRejected as exc:  # reported by the manager
            self._remember(state, exc.code)
            return "refused"
        finally:
            bundle.unlink(missing_ok=True)
        if result["state"] != "active":
            self._remember(state, result["state"])
        return str(result["state"])

    def _check_floor(self, state: DesiredState) -> None:
        """Refuse a version not newer than the floor before downloading anything (the bundle's own check would
        refuse it too, after the download)."""
        order = version_order(state.version)
        if order is None:
            raise OtaRejected("invalid_manifest", f"version {state.version!r} cannot be ordered")
        try:
            current = floor.version_floor(self.manager.store)
        except ValueError as exc:
            raise OtaRejected("downgrade", f"{exc}; no update installs until it is fixed") from None
        if current is not None and order <= (version_order(current) or ()):
            raise OtaRejected("downgrade", f"rollout {state.rollout_id} wants version {state.version}, which is not "
                                           f"newer than {current}, the newest version this device has served")

    # -- memory of failed rollouts ---------------------------------------------------------------------------
    def _read_memory(self) -> list[dict[str, Any]]:
        try:
            doc = json.loads(self.memory.read_text())
            return [e for e in doc.get("failed", []) if isinstance(e, dict)]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("OTA: %s is unreadable (%s); starting a new list of failed rollouts", self.memory, exc)
            return []

    def _failed_before(self, state: DesiredState) -> bool:
        return any(e.get("rollout_id") == state.rollout_id and e.get("version") == state.version
                   for e in self._read_memory())

    def _remember(self, state: DesiredState, outcome: str) -> None:
        failed = [*self._read_memory(), {"rollout_id": state.rollout_id, "version": state.version,
                                         "outcome": outcome}][-_REMEMBERED:]
        try:
            self.memory.parent.mkdir(parents=True, exist_ok=True)
            write_json_durably(self.memory, {"format": 1, "failed": failed})
        except OSError as exc:  # then only this run remembers (through _last)
            log.error("OTA: could not record failed rollout %s in %s: %s", state.rollout_id, self.memory, exc)


def _readable_rollout_id(payload: bytes) -> str | None:
    """The rollout id of a refused document when it is a plain name (so the operator sees whose it was)."""
    try:
        rid = json.loads(payload).get("rollout_id")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
    return rid if isinstance(rid, str) and NAME.match(rid) else None


def follow_group(publisher: MqttPublisher, manager: OtaManager, config: OtaConfig,
                 incoming_dir: Path) -> DesiredStateFollower | None:
    """When ``config.group`` is set: subscribe ``publisher`` to the group's desired state and start following it
    (the caller stops the returned follower). None when the device is in no group."""
    if config.group is None:
        return None
    follower = DesiredStateFollower(manager, config, config.group, incoming_dir).start()
    topic = group_desired(publisher.config.topic_prefix, config.group)
    publisher.subscribe(topic, follower.offer)
    log.info("OTA: following the desired state of group %s on %s", config.group, topic)
    return follower
