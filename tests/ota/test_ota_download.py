"""Bundle downloads (appliance/ota/download.py) from real HTTP(S) servers on loopback: redirects never go to a
weaker scheme (and, when configured, never off the host), a trickling server cannot hold a download past its
deadline, a bundle that cannot fit is refused before its body is read, and tar headers count against the size
limit."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from support.bundleserver import Server, tls_server

from appliance.ota.config import OtaConfig
from appliance.ota.download import fetch
from appliance.ota.errors import OtaRejected
from appliance.ota.signing import TrustedKeys
from appliance.ota.unpack import verify_bundle


def refusal(url: str, dest: Path, **config: Any) -> OtaRejected:
    with pytest.raises(OtaRejected) as info:
        fetch(url, dest, OtaConfig(**config))
    assert not dest.exists() and list(dest.parent.iterdir()) == []  # nothing left behind, not even a .part
    return info.value


def test_an_https_download_is_never_redirected_to_http(tmp_path, http_server, monkeypatch) -> None:
    bundle = tmp_path / "b.bundle"
    bundle.write_bytes(b"x" * 100)
    plain = http_server.publish(bundle)
    (tmp_path / "tls").mkdir()
    server, cert = tls_server(tmp_path / "tls")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    try:
        server.redirects["/model.bundle"] = plain
        (tmp_path / "in").mkdir()
        exc = refusal(server.url("/model.bundle"), tmp_path / "in" / "d.bundle", allow_http=True)
        assert exc.code == "delivery" and "from https:// to http:// is refused" in exc.reason, exc
        assert http_server.requests == []  # the weaker URL was never asked for
    finally:
        server.close()


def test_redirects_follow_the_configured_policy(tmp_path: Path, http_server: Server) -> None:
    bundle = tmp_path / "b.bundle"
    bundle.write_bytes(b"x" * 100)
    http_server.publish(bundle)
    port = http_server.httpd.server_port
    http_server.redirects["/same"] = "/files/b.bundle"
    http_server.redirects["/other"] = f"http://localhost:{port}/files/b.bundle"
    dest = tmp_path / "in" / "d.bundle"
    dest.parent.mkdir()
    for path in ("/same", "/other"):  # any_host, the default, follows both
        assert fetch(http_server.url(path), dest, OtaConfig(allow_http=True)).read_bytes() == bundle.read_bytes()
        dest.unlink()
    assert fetch(http_server.url("/same"), dest, OtaConfig(allow_http=True, download_redirects="same_host"))
    dest.unlink()
    exc = refusal(http_server.url("/other"), dest, allow_http=True, download_redirects="same_host")
    assert "another host (localhost) is refused" in exc.reason, exc
    exc = refusal(http_server.url("/same"), dest, allow_http=True, download_redirects="none")
    assert "redirects are not followed" in exc.reason, exc


def test_a_trickling_server_cannot_hold_a_download_past_its_deadline(tmp_path: Path, http_server: Server) -> None:
    bundle = tmp_path / "b.bundle"
    bundle.write_bytes(b"x" * 10_000)
    http_server.publish(bundle)
    (tmp_path / "in").mkdir()
    started = time.monotonic()
    exc = refusal(http_server.url("/trickle/b.bundle"), tmp_path / "in" / "d.bundle", allow_http=True,
                  download_timeout_s=5, download_deadline_s=1)  # a byte every 0.2 s: no read ever times out
    took = time.monotonic() - started
    assert exc.code == "delivery" and "not done within ota.download_deadline_s 1 s" in exc.reason, exc
    assert took < 5, took  # well before the 10 000 bytes' 2000 s; bounded by the deadline, not the per-read limit


def test_a_bundle_that_cannot_fit_is_refused_before_its_body_is_read(tmp_path, http_server, small_tmpfs) -> None:
    bundle = tmp_path / "big.bundle"
    bundle.write_bytes(b"x" * 300_000)  # under max_bundle_bytes, over the 200 KB filesystem
    url = http_server.publish(bundle).replace("/files/", "/trickle/")
    exc = refusal(url, small_tmpfs / "d.bundle", allow_http=True)
    assert exc.code == "disk_full" and "300000 bytes" in exc.reason and "are free" in exc.reason, exc


def test_tar_headers_count_against_the_size_limit(tmp_path: Path) -> None:
    """A PAX header is not a member's size, yet it is bytes read into memory: it counts."""
    path = tmp_path / "headers.bundle"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = 2
        info.pax_headers = {"comment": "h" * 200_000}
        tar.addfile(info, io.BytesIO(b"{}"))
    with pytest.raises(OtaRejected) as info_:
        verify_bundle(path, TrustedKeys({}), max_bytes=100_000)
    assert info_.value.code == "too_large", info_.value
