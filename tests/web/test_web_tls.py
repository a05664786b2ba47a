"""The page over https (``web.tls_cert``/``web.tls_key``): the real WebServer with the real page routes and a
self-signed certificate for 127.0.0.1; a login's cookie is then ``Secure``, and plain http gets no answer."""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import ssl
import urllib.parse
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from appliance.health.routes import health_routes
from appliance.pipeline.layouts import Layouts
from appliance.supervisor.page import ApplianceSite
from appliance.web.auth import Auth, hash_password
from appliance.web.config import UserConfig, WebConfig
from appliance.web.feed import EventFeed
from appliance.web.live import LiveFrames
from appliance.web.routes import page_routes
from appliance.webserver.server import WebServer


def _self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "page.crt", folder / "page.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_over_https_the_login_cookie_is_secure_and_plain_http_is_not_answered(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    config = WebConfig(users=[UserConfig(name="olga", role="operator", password_hash=hash_password("pw-o"))],
                       tls_cert=cert, tls_key=key)
    site = ApplianceSite({"id": "d", "name": "d"}, lambda: {"ok": True}, Layouts([], tmp_path, lambda: []), ["hall"])
    auth = Auth({u.name: u for u in config.users}, open_access=False, session_s=config.session_s)
    routes = health_routes(lambda: b"", lambda: {"ok": True}) + page_routes(site, auth, LiveFrames(), EventFeed())
    server = WebServer("127.0.0.1", 0, routes, tls=config.tls)
    try:
        context = ssl.create_default_context(cafile=str(cert))
        conn = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=30, context=context)
        conn.request("POST", "/login", urllib.parse.urlencode({"name": "olga", "password": "pw-o"}),
                     {"Content-Type": "application/x-www-form-urlencoded"})
        response = conn.getresponse()
        response.read()
        cookie = response.getheader("Set-Cookie") or ""
        assert response.status == 303 and "; Secure" in cookie and "Max-Age=28800" in cookie, cookie
        conn.request("GET", "/healthz")
        assert json.loads(conn.getresponse().read()) == {"ok": True}
        conn.close()
        plain = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            plain.request("GET", "/healthz")
            plain.getresponse()
        plain.close()
    finally:
        server.close()


def test_https_needs_both_the_certificate_and_the_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="https needs both tls_cert and tls_key"):
        WebConfig(tls_cert=tmp_path / "page.crt")
    assert WebConfig().tls is None
