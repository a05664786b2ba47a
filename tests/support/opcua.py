"""OPC UA clients for the tests: node-opcua (another stack, tests/opcua/nodeclient, installed by
scripts/setup-test.d/60-interop-clients.sh) and open62541 (o6, tests/opcua/o6client, in its own virtualenv made by
scripts/setup-test.d/62-o6-client.sh), each run as a process, and client certificates. A missing client fails the
test, naming the fix."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from appliance.opcua.certs import make_certificate

SUMMARY = {"ok": True, "served": {"model": "yolov3-tiny", "version": "3"}, "cameras": {"hall": {"fps": 9.5}}}

REPO = Path(__file__).resolve().parents[2]
NODE_CLIENT = REPO / "tests" / "opcua" / "nodeclient"
O6_CLIENT = REPO / "tests" / "opcua" / "o6client"


def require_node_client() -> Path:
    """The node-opcua client script, with its packages installed; otherwise fail the calling test."""
    if shutil.which("node") is None or not (NODE_CLIENT / "node_modules" / "node-opcua-client").is_dir():
        pytest.fail(f"node and node-opcua are needed in {NODE_CLIENT}: run scripts/setup.sh "
                    "(scripts/setup-test.d/60-interop-clients.sh runs `npm ci` there)", pytrace=False)
    return NODE_CLIENT / "client.js"


@dataclass(frozen=True)
class ClientIdentity:
    uri: str
    certificate: Path  # DER
    private_key: Path  # PEM


def client_identity(folder: Path, name: str) -> ClientIdentity:
    """A fresh self-signed client application certificate ``urn:test:<name>`` in ``folder``."""
    identity = ClientIdentity(f"urn:test:{name}", folder / f"{name}.der", folder / f"{name}-key.pem")
    make_certificate(identity.certificate, identity.private_key, identity.uri, "localhost", client=True)
    return identity


def trust(identity: ClientIdentity, trusted_dir: Path) -> None:
    trusted_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(identity.certificate, trusted_dir / identity.certificate.name)


@dataclass(frozen=True)
class NodeRun:
    returncode: int
    output: str

    def lines(self, key: str) -> list[str]:
        return [line.removeprefix(f"{key}: ") for line in self.output.splitlines() if line.startswith(f"{key}: ")]


def _node_options(work: Path, *, endpoint: str, server_certificate: Path, identity: ClientIdentity, policy: str,
                  user: str, password: str, **extra: Any) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    options = {"endpoint": endpoint, "policy": policy, "pki": str(work / "pki"),
               "serverCertificate": str(server_certificate), "applicationUri": identity.uri,
               "certificate": str(identity.certificate), "privateKey": str(identity.private_key),
               "user": user, "password": password, **extra}
    path = work / "options.json"
    path.write_text(json.dumps(options))
    return path


def run_node_client(work: Path, *, timeout_s: float = 60, **options: Any) -> NodeRun:
    """tests/opcua/nodeclient/client.js with these options (``endpoint``, ``server_certificate``, ``identity``,
    ``policy``, ``user``, ``password``; ``browse``, ``namespace``, ``watch``, ``timeoutMs`` to browse and wait for
    a counter to rise; ``call`` a method); its own PKI folder under ``work``."""
    script = require_node_client()
    path = _node_options(work, **options)
    result = subprocess.run(["node", str(script), str(path)], capture_output=True, text=True, timeout=timeout_s,
                            cwd=script.parent)
    return NodeRun(result.returncode, result.stdout + result.stderr)


def start_node_client(work: Path, **options: Any) -> subprocess.Popen[str]:
    """The same client as :func:`run_node_client`, running: its output one line at a time on ``stdout``."""
    script = require_node_client()
    path = _node_options(work, **options)
    return subprocess.Popen(["node", str(script), str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=script.parent)


def require_o6_client() -> Path:
    """The o6 virtualenv's Python, installed from tests/opcua/o6client/requirements.txt as it is now; otherwise
    fail the calling test."""
    digest = hashlib.sha256((O6_CLIENT / "requirements.txt").read_bytes()).hexdigest()[:16]
    python = O6_CLIENT / ".venv" / "bin" / "python"
    if not python.is_file() or not (O6_CLIENT / ".venv" / f".installed-{digest}").is_file():
        pytest.fail(f"the o6 (open62541) client's virtualenv {O6_CLIENT / '.venv'} is missing or out of date: run "
                    "scripts/setup-test-tools.sh (scripts/setup-test.d/62-o6-client.sh)", pytrace=False)
    return python


def _o6_command(work: Path, *, endpoint: str, server_certificate: Path, identity: ClientIdentity, namespace: str,
                sessions: list[dict[str, Any]]) -> list[str]:
    python = require_o6_client()
    work.mkdir(parents=True, exist_ok=True)
    options = {"endpoint": endpoint, "serverCertificate": str(server_certificate), "applicationUri": identity.uri,
               "certificate": str(identity.certificate), "privateKey": str(identity.private_key),
               "namespace": namespace, "sessions": sessions}
    path = work / "o6-options.json"
    path.write_text(json.dumps(options))
    return [str(python), str(O6_CLIENT / "client.py"), str(path)]


def o6_steps(output: str) -> list[dict[str, Any]]:
    """The JSON lines of the o6 client's output (o6's own banner lines are not JSON)."""
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def run_o6_client(work: Path, *, timeout_s: float = 60, **options: Any) -> tuple[int, list[dict[str, Any]], str]:
    """tests/opcua/o6client/client.py with these options (``endpoint``, ``server_certificate``, ``identity``,
    ``namespace``, ``sessions``: see the script), to its end: exit code, its steps, its whole output."""
    result = subprocess.run(_o6_command(work, **options), capture_output=True, text=True, timeout=timeout_s,
                            cwd=work)
    return result.returncode, o6_steps(result.stdout), result.stdout + result.stderr


def start_o6_client(work: Path, **options: Any) -> subprocess.Popen[str]:
    """The same client as :func:`run_o6_client`, running: its output one line at a time on ``stdout``."""
    return subprocess.Popen(_o6_command(work, **options), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=work)


class Resets:
    """The server's ``reset_line`` reading: records the calls; camera ``hall`` has the line ``door``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, camera_id: str, line: str) -> bool:
        self.calls.append((camera_id, line))
        return line == "door"


def start_server(state: Path, port: int, resets: Resets, phase: Any = lambda: (True, False), **config: Any) -> Any:
    """The OPC UA server as the appliance runs it (device ``dev1``, camera ``hall`` with line ``door``), started;
    readings given as plain data, ``phase`` as ``Readings.phase``. Unless ``config`` says otherwise, Halted is not
    kept on stop (``halt_grace_s: 0``). The caller stops it."""
    from appliance.opcua.config import OpcUaConfig
    from appliance.opcua.feed import Feed
    from appliance.opcua.server import OpcUaServer, Readings
    from appliance.opcua.values import CameraLayout

    section = OpcUaConfig.model_validate({"host": "127.0.0.1", "port": port, "interval_s": 0.2, "halt_grace_s": 0,
                                          **config})
    readings = Readings(lambda: SUMMARY, phase, resets)
    return OpcUaServer(section, "dev1", [CameraLayout("hall", (), ("door",))], state, readings, Feed(),
                       boot_id="0" * 32, started_at=time.time()).start()
