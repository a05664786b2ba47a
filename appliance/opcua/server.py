"""The OPC UA server on its own thread and event loop (``opcua-server``). The frame path hands counts and events
to its ``Feed`` and never waits for it; device and camera readings are sampled from the health summary every
``opcua.interval_s``. ``start`` returns once clients can connect, or raises ``OpcUaStartError``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from asyncua import Server, ua
from asyncua.common.callback import CallbackType
from asyncua.crypto.security_policies import SECURITY_POLICY_TYPE_MAP
from asyncua.crypto.truststore import TrustStore
from asyncua.crypto.validator import CertificateValidator, CertificateValidatorOptions

from appliance.opcua.access import ApplianceUsers, ReadOnlyUnlessOperator, user_executable
from appliance.opcua.certs import ClientTrust, server_identity
from appliance.opcua.config import OpcUaConfig
from appliance.opcua.errors import OpcUaStartError
from appliance.opcua.feed import Feed
from appliance.opcua.guard import NONE_URI, Guard, GuardedServer
from appliance.opcua.passwords import UserEntry, read_users_file
from appliance.opcua.space import Space, build
from appliance.opcua.updater import Readings, Updater
from appliance.opcua.values import CameraLayout

log = logging.getLogger(__name__)
_POLICIES = {"Basic256Sha256": ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt,
             "Aes256Sha256RsaPss": ua.SecurityPolicyType.Aes256Sha256RsaPss_SignAndEncrypt}
_VALIDATION = (CertificateValidatorOptions.TIME_RANGE | CertificateValidatorOptions.URI
               | CertificateValidatorOptions.TRUSTED | CertificateValidatorOptions.PEER_CLIENT)


def offered(config: OpcUaConfig, ruleset: ReadOnlyUnlessOperator) -> Guard:
    """The channels the config offers: each policy with SignAndEncrypt, and None/None with allow_unencrypted."""
    pairs = {(cast(Any, SECURITY_POLICY_TYPE_MAP[_POLICIES[name]][0]).URI, ua.MessageSecurityMode.SignAndEncrypt)
             for name in config.security_policies}
    if config.allow_unencrypted:
        pairs.add((NONE_URI, ua.MessageSecurityMode.None_))
    return Guard(frozenset(pairs), ruleset)


def application_uri(device_id: str) -> str:
    return f"urn:appliance:{device_id}"


class OpcUaServer:
    def __init__(self, config: OpcUaConfig, device_id: str, cameras: Sequence[CameraLayout], state_dir: Path,
                 readings: Readings, feed: Feed, *, boot_id: str, started_at: float) -> None:
        self.config, self.device_id, self.cameras = config, device_id, list(cameras)
        self.feed, self._readings, self._state_dir = feed, readings, state_dir
        self._boot = (boot_id, started_at)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._updater: Updater | None = None
        self._ready = threading.Event()
        self._cpu_clock: int | None = None  # the server thread's CPU clock while it runs
        self._cpu_at_stop = 0.0
        self._error: BaseException | None = None
        self.endpoint = f"opc.tcp://{config.host}:{config.port}/"

    def start(self, timeout_s: float = 30.0) -> OpcUaServer:
        self._thread = threading.Thread(target=self._run, name="opcua-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise OpcUaStartError(f"OPC UA server on {self.endpoint} did not start within {timeout_s:.0f} s")
        if self._error is not None:
            self._thread.join(5.0)
            raise OpcUaStartError(f"OPC UA server on {self.endpoint}: {self._error}") from self._error
        return self

    def halt(self) -> None:
        """The vision state to Halted now (the appliance begins to stop), from any thread; no wait."""
        loop, updater = self._loop, self._updater
        if loop is not None and updater is not None and not loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(updater.halt(), loop)
            except RuntimeError:  # the loop closed meanwhile
                pass

    def stop(self, timeout_s: float = 5.0) -> None:
        """Halted (unless already), kept for ``halt_grace_s`` so subscribers get it, then the server closes."""
        timeout_s += self.config.halt_grace_s
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop closed meanwhile
                pass
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.feed.attach(None)

    @property
    def cpu_s(self) -> float:
        """The server thread's CPU time so far (the benchmark reads it around its measuring window)."""
        clock = self._cpu_clock
        if clock is not None:
            try:
                return time.clock_gettime(clock)
            except OSError:  # the thread has just ended
                pass
        return self._cpu_at_stop

    def _run(self) -> None:
        self._cpu_clock = time.pthread_getcpuclockid(threading.get_ident())
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by start(), or logged when it fails later
            if not self._ready.is_set():
                self._error = exc
            else:
                log.error("OPC UA server stopped: %s", exc)
        finally:
            self._cpu_at_stop, self._cpu_clock = time.thread_time(), None
            self._ready.set()

    def _users(self) -> list[UserEntry]:
        users = [UserEntry(u.name, u.role, u.password_hash) for u in self.config.users]
        if self.config.users_file is not None:
            users += read_users_file(self.config.users_file)
        return users

    async def _configure(self, trust: TrustStore) -> Server:
        config, uri = self.config, application_uri(self.device_id)
        identity = server_identity(self._state_dir, uri, config.certificate, config.private_key,
                                   config.trusted_clients_dir)
        users = ApplianceUsers(self._users(), allow_anonymous=config.allow_anonymous, trust=trust)
        ruleset = ReadOnlyUnlessOperator(users.operators)
        server = GuardedServer(offered(config, ruleset), user_manager=users)
        await server.init()
        server.set_endpoint(self.endpoint)
        server.set_server_name(f"Edge vision appliance {self.device_id}")
        await server.set_application_uri(uri)
        await server.load_certificate(str(identity.certificate))
        await server.load_private_key(str(identity.private_key))
        policies = [_POLICIES[name] for name in config.security_policies]
        if config.allow_unencrypted:
            policies.append(ua.SecurityPolicyType.NoSecurity)
        server.set_security_policy(policies, permission_ruleset=cast(Any, ruleset))  # typed as its own ruleset
        server.subscribe_server_callback(CallbackType.PostRead, user_executable(users.operators))
        tokens: list[type] = [ua.UserNameIdentityToken, ua.X509IdentityToken]
        if config.allow_anonymous:
            tokens.append(ua.AnonymousIdentityToken)
        server.set_identity_tokens(tokens)
        trust.trust_locations.append(identity.trusted_dir)
        await trust.load()
        server.set_certificate_validator(CertificateValidator(_VALIDATION, trust))
        return server

    async def _main(self) -> None:
        trust = ClientTrust([], [])
        server = await self._configure(trust)
        counter = ua.VariantType.UInt32 if self.config.counter_type == "UInt32" else ua.VariantType.UInt64
        space: Space = await build(server, application_uri(self.device_id), self.device_id, self.cameras,
                                   self._reset, counter)
        updater = Updater(server, space, self.cameras, self._readings, self._boot)
        await updater.init()
        await server.start()
        self._loop, self._stop, self._updater = asyncio.get_running_loop(), asyncio.Event(), updater
        log.info("OPC UA server on %s (%s; anonymous %s)", self.endpoint, ", ".join(self.config.security_policies),
                 "allowed" if self.config.allow_anonymous else "refused")
        self._ready.set()
        try:
            await updater.run(self.feed, self._stop, self.config.interval_s, trust)
            await updater.halt()
            halted_for = time.monotonic() - (updater.halted_at or time.monotonic())
            await asyncio.sleep(max(0.0, self.config.halt_grace_s - halted_for))  # subscribers' next publish
        finally:
            await server.stop()

    async def _reset(self, camera_id: str, line: str) -> bool:
        done = self._readings.reset_line(camera_id, line)
        log.info("OPC UA: %s counts of line %s on camera %s", "reset the" if done else "no such line: kept the",
                 line, camera_id)
        return done


