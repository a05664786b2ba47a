"""The server's certificate and the clients it trusts (docs/opcua.md, "Certificates").

Made on first start into ``<state_dir>/opcua/`` (an RSA 2048 key, mode 0600, and a self-signed certificate for
ten years naming the application URI and this host) unless the config provides both files; kept across restarts
and OTA updates, so a client that trusted it once keeps trusting it.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from asyncua.crypto.cert_gen import dump_private_key_as_pem, generate_private_key, generate_self_signed_app_certificate
from asyncua.crypto.truststore import TrustStore
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID

log = logging.getLogger(__name__)
VALID_DAYS = 3650


@dataclass(frozen=True)
class ServerIdentity:
    certificate: Path
    private_key: Path
    trusted_dir: Path


def make_certificate(cert_path: Path, key_path: Path, app_uri: str, host: str, *, client: bool = False,
                     days: int = VALID_DAYS) -> None:
    """A key (PEM, 0600) and a self-signed application certificate (DER) for ``app_uri`` and ``host``; a client
    certificate with ``client`` (tests and docs make them for PLC-side clients too)."""
    key = generate_private_key()
    use = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [ExtendedKeyUsageOID.SERVER_AUTH,
                                                            ExtendedKeyUsageOID.CLIENT_AUTH]
    names = [x509.UniformResourceIdentifier(app_uri), x509.DNSName(host)]
    cert = generate_self_signed_app_certificate(key, app_uri, {}, names, extended=use, days=days)
    key_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(dump_private_key_as_pem(key))
    cert_path.write_bytes(cert.public_bytes(Encoding.DER))


def server_identity(state_dir: Path, app_uri: str, certificate: Path | None, private_key: Path | None,
                    trusted_dir: Path | None) -> ServerIdentity:
    """The configured files, or those in ``<state_dir>/opcua/`` (made now when missing); the trusted clients'
    directory exists afterwards."""
    home = state_dir / "opcua"
    trusted = trusted_dir or home / "trusted"
    trusted.mkdir(parents=True, exist_ok=True)
    if certificate is not None and private_key is not None:
        return ServerIdentity(certificate, private_key, trusted)
    cert, key = home / "server-cert.der", home / "server-key.pem"
    if not (cert.is_file() and key.is_file()):
        log.info("OPC UA: making the server certificate %s (clients must trust it once)", cert)
        make_certificate(cert, key, app_uri, socket.gethostname())
    return ServerIdentity(cert, key, trusted)


class ClientTrust(TrustStore):
    """asyncua's trust store over the trusted clients' directory (certificates, or the CAs that issued them),
    which may be empty: then no client certificate is trusted."""

    async def load_trust(self) -> None:
        certs: list[x509.Certificate] = []
        for location in self.trust_locations:
            certs.extend(await self._load_trust_location(location))
        self._trust_store = x509.verification.Store(certs) if certs else None
