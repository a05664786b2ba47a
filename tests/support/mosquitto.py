"""A real mosquitto broker for tests: appliance.harness.localbroker.LocalBroker (free loopback port, generated
config, start / stop / kill / restart on the same port, wait until it accepts connections) plus what only tests
need: a log file, TLS material (CA, server and client certificates), password files and persistence.

    with Mosquitto(tmp_path) as broker:           # anonymous, plain TCP
        client.connect("127.0.0.1", broker.port)

    tls = make_tls_material(tmp_path / "pki")     # CA, server and client certificates (cryptography)
    broker = Mosquitto(tmp_path, tls=tls, require_certificate=True, passwords={"cam": "secret"})
    publish_as(broker, "cam", "secret", "t/x", "{}", tls=tls)   # one QoS 1 publish by that user, then disconnect

Always stopped: the context manager and ``stop()`` terminate the process (SIGKILL after a grace period).
``pause()``/``resume()`` simulate a hung broker; ``kill()`` a crashed one.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import subprocess
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from appliance.harness.localbroker import LocalBroker
from support.ports import free_port
from support.wait import wait_until

MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class TlsMaterial:
    ca: CertPair
    server: CertPair
    client: CertPair


def _write_key_and_cert(directory: Path, name: str, key: object, cert: object) -> CertPair:
    from cryptography.hazmat.primitives import serialization

    directory.mkdir(parents=True, exist_ok=True)
    key_path, cert_path = directory / f"{name}.key", directory / f"{name}.crt"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,  # type: ignore[attr-defined]
                                           serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))  # type: ignore[attr-defined]
    return CertPair(cert_path, key_path)


def make_ca(directory: Path, name: str = "test-ca") -> CertPair:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return _write_key_and_cert(directory, name, key, cert)


def issue_cert(ca: CertPair, directory: Path, name: str, *, server: bool,
               hostnames: Iterable[str] = ("localhost",), ips: Iterable[str] = ("127.0.0.1",)) -> CertPair:
    """A leaf certificate signed by ``ca``: server (SANs for hostnames/ips) or client (CN = name)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
    if server:
        sans: list[x509.GeneralName] = [x509.DNSName(h) for h in hostnames]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = (builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    return _write_key_and_cert(directory, name, key, cert)


def make_tls_material(directory: Path) -> TlsMaterial:
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate, all signed by the CA."""
    ca = make_ca(directory)
    return TlsMaterial(ca, issue_cert(ca, directory, "server", server=True),
                       issue_cert(ca, directory, "client", server=False))


class Mosquitto(LocalBroker):
    """appliance.harness.localbroker.LocalBroker with what tests need on top: a log file in ``workdir`` (every
    log type, connection messages), no cap on queued messages, and optional TLS, passwords and persistence."""

    def __init__(self, workdir: Path, *, port: Optional[int] = None, tls: Optional[TlsMaterial] = None,
                 require_certificate: bool = False, passwords: Optional[Mapping[str, str]] = None,
                 persistence: bool = False, extra_config: Iterable[str] = ()) -> None:
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        self.tls = tls
        lines = [
            "log_type error", "log_type warning", "log_type notice", "log_type information",
            "connection_messages true",
            "max_queued_messages 0",    # subscribers in tests must not lose queued messages during an outage
        ]
        if passwords:
            pw_file = workdir / f"passwords-{port}"
            first = True
            for user, password in passwords.items():
                args = [MOSQUITTO_PASSWD] + (["-c"] if first else []) + ["-b", str(pw_file), user, password]
                subprocess.run(args, check=True, capture_output=True, timeout=30)
                first = False
            lines.append(f"password_file {pw_file}")
        if tls is not None:
            lines += [f"cafile {tls.ca.cert}", f"certfile {tls.server.cert}", f"keyfile {tls.server.key}",
                      f"require_certificate {'true' if require_certificate else 'false'}"]
        if persistence:
            store = workdir / f"persist-{port}"
            store.mkdir(exist_ok=True)
            lines += ["persistence true", f"persistence_location {store}/", "autosave_interval 1"]
        lines += list(extra_config)
        super().__init__(workdir, port=port, allow_anonymous=not passwords, config=lines,
                         log_path=workdir / f"mosquitto-{port}.log")

    def start(self, timeout: float = 15.0) -> "Mosquitto":
        super().start(timeout)
        return self

    def __enter__(self) -> "Mosquitto":
        return self.start()


class MosquittoFromFile(LocalBroker):
    """mosquitto run with a given config file's text (a shipped example), not a generated one. The text must
    open its own listener on 127.0.0.1:``port``; run as root, ``user root`` is added (as LocalBroker does), and
    the log goes to ``workdir``."""

    def __init__(self, workdir: Path, text: str, port: int) -> None:
        super().__init__(workdir, port=port, log_path=Path(workdir) / f"mosquitto-{port}.log")
        extra = ["log_dest stderr", "log_type all"] + (["user root"] if os.geteuid() == 0 else [])
        self.conf_path.write_text(text.rstrip("\n") + "\n" + "\n".join(extra) + "\n")


def publish_as(broker: LocalBroker, username: Optional[str], password: Optional[str], topic: str,
               payload: str | bytes, tls: Optional[TlsMaterial] = None, retain: bool = False) -> None:
    """Connect as ``username`` (None: anonymously; a fresh client, mutual TLS with ``tls``'s client certificate when
    given), publish once with QoS 1 (retained with ``retain``) and wait for the broker's PUBACK or for it to drop
    the connection: either way the broker has handled the message, and routed it to its subscribers if it was
    allowed. Under an ACL that denies it, MQTT 3.1.1 gives the sender no error (mosquitto drops the message, and
    closes the connection), so callers assert on what an allowed reader receives."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"as-{uuid.uuid4().hex[:8]}")
    if tls is not None:
        client.tls_set(ca_certs=str(tls.ca.cert), certfile=str(tls.client.cert), keyfile=str(tls.client.key))
    if username is not None:
        client.username_pw_set(username, password)
    connected, closed = threading.Event(), threading.Event()
    client.on_connect = lambda c, u, f, reason, p: connected.set() if not reason.is_failure else None
    client.on_disconnect = lambda *_: closed.set()

    def served(done: Callable[[], bool]) -> bool:
        """One turn of the client's network loop, here rather than on a thread: no thread to join afterwards."""
        client.loop(0.05)
        return done()

    client.connect(broker.host, broker.port)
    try:
        wait_until(lambda: served(connected.is_set), 10, 0, f"{username} to connect")
        info = client.publish(topic, payload, qos=1, retain=retain)
        wait_until(lambda: served(lambda: info.is_published() or closed.is_set()), 10, 0,
                   f"the broker to acknowledge {username}'s publish on {topic} or close the connection")
    finally:
        client.disconnect()


SHIPPED_ACL = Path(__file__).resolve().parents[2] / "docs/examples/mosquitto/acl"
ACL_EXAMPLE_DEVICE = "line1-box07"  # the shipped ACL's per-device block is written for this device


def shipped_acl(dest: Path, devices: Iterable[str]) -> Path:
    """The shipped ACL as docs/security.md has an operator install it: its per-device block copied once for each
    of ``devices`` (in place of the example device's); written to ``dest``."""
    text = SHIPPED_ACL.read_text()
    head, rest = text.split(f"user {ACL_EXAMPLE_DEVICE}\n", 1)
    block, tail = rest.split("\n\n", 1)
    blocks = "".join(f"user {device}\n{block}\n\n" for device in devices)
    dest.write_text(head + blocks + tail)
    return dest
