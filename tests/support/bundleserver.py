"""Real HTTP(S) servers on loopback for bundle downloads (the ``url`` delivery and fleet rollouts):
``serve_directory`` serves one directory; ``Server`` serves files with their Content-Length, an endless body, a
body trickled a byte at a time until released, and redirects; ``self_signed`` makes a certificate for
127.0.0.1 that a test trusts through SSL_CERT_FILE."""

from __future__ import annotations

import contextlib
import datetime
import functools
import http.server
import ipaddress
import ssl
import threading
from pathlib import Path
from typing import Any, Iterator


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass


@contextlib.contextmanager
def serve_directory(directory: Path) -> Iterator[str]:
    """Serve ``directory`` until the block ends; yields the base URL (``http://127.0.0.1:PORT``)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class Server:
    """http.server on 127.0.0.1 in a thread. ``/files/<name>`` serves a file of ``root`` with its Content-Length;
    ``/endless`` sends no Content-Length and streams ``endless_bytes`` (a server that sends more than it should);
    ``/trickle/<name>`` sends the file's Content-Length, then one byte every ``trickle_interval_s`` until
    ``release`` is set, then the rest (a server that holds a download as long as a test needs);
    ``redirects[path]`` answers ``path`` with a 302 to that location."""

    def __init__(self, root: Path, tls: ssl.SSLContext | None = None) -> None:
        self.root = root
        self.endless_bytes = 0
        self.requests: list[str] = []
        self.sent = 0
        self.redirects: dict[str, str] = {}
        self.release = threading.Event()
        self.trickle_interval_s = 0.2
        self.trickling = threading.Event()  # set once a trickled body has started
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.requests.append(self.path)
                try:
                    server._answer(self)
                except OSError:
                    pass  # the client hung up (at its limit, or its deadline)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def _answer(self, request: http.server.BaseHTTPRequestHandler) -> None:
        path = request.path
        if path in self.redirects:
            request.send_response(302)
            request.send_header("Location", self.redirects[path])
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        if path == "/endless":
            request.send_response(200)
            request.end_headers()  # no Content-Length: the body ends when the connection closes
            while self.sent < self.endless_bytes:
                request.wfile.write(b"e" * 65536)
                self.sent += 65536
            return
        kind, _, name = path.lstrip("/").partition("/")
        file = self.root / name
        if kind not in ("files", "trickle") or not file.is_file():
            request.send_error(404)
            return
        data = file.read_bytes()
        request.send_response(200)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        sent = 0
        if kind == "trickle":
            self.trickling.set()
            while sent < len(data) - 1 and not self.release.wait(self.trickle_interval_s):
                request.wfile.write(data[sent:sent + 1])
                request.wfile.flush()
                sent += 1
        request.wfile.write(data[sent:])

    def url(self, path: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.httpd.server_port}{path}"

    def publish(self, bundle: Path) -> str:
        """Copy ``bundle`` into the served directory; returns its ``/files/`` URL."""
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / bundle.name).write_bytes(bundle.read_bytes())
        return self.url(f"/files/{bundle.name}")

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(10)


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def tls_server(tmp_path: Path) -> tuple[Server, Path]:
    """An HTTPS ``Server`` with a fresh self-signed certificate, and that certificate (for SSL_CERT_FILE)."""
    cert, key = self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    return Server(tmp_path / "www", tls), cert
