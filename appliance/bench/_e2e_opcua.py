"""The OPC UA side of ``appliance bench e2e --opcua``: the config section (a password user, encryption, the
bench's client trusted) and one subscribed client in its own process. It subscribes to every variable of every
camera and to the ResultReady events, so the server does all the work it does in a plant; in a plant the client is
a PLC, so once subscribed it drops to nice 19 (``APPLIANCE_BENCH_OPCUA_CLIENT_NICE``; the smoke test, run beside
the suite's other processes, sets 0 so the starved client still answers) and takes what CPU the appliance leaves
(its CPU time is reported, as the server's). It connects and browses at normal priority."""

from __future__ import annotations

import asyncio
import json
import math
import os
import resource
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.harness.ports import free_port

USER, PASSWORD = "bench", "bench-password"


@dataclass(frozen=True)
class OpcUaSetup:
    port: int
    certificate: Path
    private_key: Path
    section: str  # the config's opcua: section


def opcua_setup(workdir: Path) -> OpcUaSetup:
    from appliance.opcua.certs import make_certificate
    from appliance.opcua.passwords import hash_password

    cert, key = workdir / "opcua-client.der", workdir / "opcua-client-key.pem"
    if not cert.exists():
        make_certificate(cert, key, "urn:bench:client", "localhost", client=True)
    trusted = workdir / "opcua-trusted"
    trusted.mkdir(exist_ok=True)
    (trusted / cert.name).write_bytes(cert.read_bytes())
    port = free_port()
    section = f"""
opcua:
  host: 127.0.0.1
  port: {port}
  trusted_clients_dir: {trusted}
  users: [{{name: {USER}, password_hash: "{hash_password(PASSWORD)}"}}]
"""
    return OpcUaSetup(port, cert, key, section)


SUBSCRIBED = "subscribed"
SUBSCRIBE_TIMEOUT_S = 120.0
REPORT_S = 0.5


def start_client(setup: OpcUaSetup) -> subprocess.Popen[str]:
    """The client, once it has subscribed (RuntimeError after SUBSCRIBE_TIMEOUT_S); ``stop_client`` ends it and
    returns what it received."""
    client = subprocess.Popen([sys.executable, "-m", "appliance.bench._e2e_opcua", str(setup.port),
                               str(setup.certificate), str(setup.private_key)], stdout=subprocess.PIPE, text=True)
    assert client.stdout is not None
    ready, _, _ = select.select([client.stdout], [], [], SUBSCRIBE_TIMEOUT_S)
    line = client.stdout.readline().strip() if ready else ""
    if line != SUBSCRIBED:
        client.kill()
        client.wait()
        raise RuntimeError(f"the OPC UA client did not subscribe within {SUBSCRIBE_TIMEOUT_S:g} s ({line!r})")
    return client


@dataclass
class Window:
    """The measuring window on the machine's monotonic clock (the client's reports use it too), and the server
    thread's CPU time when it opened."""

    server_cpu_s: float
    start: float = field(default_factory=time.monotonic)
    end: float = math.inf


def open_window(app: Any) -> Window:
    """``app``: the running Appliance."""
    return Window(app.opcua.cpu_s if app.opcua is not None else 0.0)


def close_window(window: Window, app: Any, opcua: dict | None) -> None:
    """The window ends now; ``opcua`` gets ``server_cpu_ms``, the server thread's CPU over it."""
    window.end = time.monotonic()
    if opcua is not None and app.opcua is not None:
        opcua["server_cpu_ms"] = round((app.opcua.cpu_s - window.server_cpu_s) * 1000)


def stop_client(client: subprocess.Popen[str], window: Window | None = None) -> dict[str, int]:
    """What the client received by its last report (-1 each when it made none), and ``cpu_ms`` the CPU it spent
    between the reports around ``window``, else in all; the client is ended by SIGTERM, or killed if it does not
    end (a signal needs no cooperation from its event loop)."""
    time.sleep(REPORT_S * 1.5)  # a report that covers the measuring window, which has just ended
    client.terminate()
    try:
        out, _ = client.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        client.kill()
        out, _ = client.communicate()
    reports = [json.loads(line) for line in out.splitlines() if line.startswith("{") and line.endswith("}")]
    if not reports:
        return {"changes": -1, "events": -1, "cpu_ms": -1}
    last = reports[-1]
    if window is not None:
        before = [r for r in reports if r["t"] <= window.start]
        within = [r for r in reports if r["t"] <= window.end + REPORT_S]
        if before and within:
            last = {**within[-1], "cpu_ms": within[-1]["cpu_ms"] - before[-1]["cpu_ms"]}
    return {key: int(value) for key, value in last.items() if key != "t"}


class _Counter:
    def __init__(self) -> None:
        self.counts = {"changes": 0, "events": 0}

    def datachange_notification(self, _node: Any, _value: Any, _data: Any) -> None:
        self.counts["changes"] += 1

    def event_notification(self, _event: Any) -> None:
        self.counts["events"] += 1


async def _subscribe(port: int, cert: str, key: str, counter: _Counter) -> None:
    from asyncua import Client, ua
    from asyncua.crypto.security_policies import SecurityPolicyBasic256Sha256

    client = Client(f"opc.tcp://127.0.0.1:{port}/", timeout=10)
    client.application_uri = "urn:bench:client"
    client.set_user(USER)
    client.set_password(PASSWORD)
    await client.set_security(SecurityPolicyBasic256Sha256, certificate=cert, private_key=key,
                              mode=ua.MessageSecurityMode.SignAndEncrypt)
    async with client:
        ns = await client.get_namespace_index("urn:appliance:bench")
        variables = []
        for camera in await client.get_node(f"ns={ns};s=Cameras").get_children():
            for node in await camera.get_children():
                kids = await node.get_children()
                variables += [node] if not kids else []
                for kid in kids:
                    variables += [kid] + list(await kid.get_children())
        subscription = await client.create_subscription(100, counter)
        variables = [v for v in variables if await v.read_node_class() == ua.NodeClass.Variable]
        await subscription.subscribe_data_change(variables)
        await subscription.subscribe_events(client.get_node(f"ns={ns};s=VisionSystem"))
        print(SUBSCRIBED, flush=True)
        os.nice(int(os.environ.get("APPLIANCE_BENCH_OPCUA_CLIENT_NICE", "19")))
        while True:  # a report a REPORT_S: the bench ends the client by a signal and reads the last one
            await asyncio.sleep(REPORT_S)
            usage = resource.getrusage(resource.RUSAGE_SELF)
            print(json.dumps({**counter.counts, "cpu_ms": round(1000 * (usage.ru_utime + usage.ru_stime)),
                              "t": time.monotonic()}), flush=True)


def _main(argv: list[str]) -> None:
    asyncio.run(_subscribe(int(argv[0]), argv[1], argv[2], _Counter()))


if __name__ == "__main__":
    _main(sys.argv[1:])
