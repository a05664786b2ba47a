"""Downloading a bundle over HTTP(S) for the ``url`` command and fleet rollouts: a size limit, a free-space check
before the body is read, a deadline for the whole download (not only per read), and redirects that never go to
a weaker scheme (https -> http) and, when configured, never off the URL's host.

Built on ``http.client`` rather than urllib, so that every redirect is checked here and the socket's timeout can
shrink to what is left of the deadline before each read.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import time
from pathlib import Path
from typing import Callable, Literal
from urllib.parse import urljoin, urlsplit

from appliance.ota.config import OtaConfig
from appliance.ota.errors import OtaError, OtaRejected, out_of_space
from appliance.ota.unpack import FreeSpace, disk_free

Redirects = Literal["any_host", "same_host", "none"]
_MAX_REDIRECTS = 5
_REDIRECT = (301, 302, 303, 307, 308)


class DeliveryError(OtaError):
    """A command's arguments are wrong (reply code bad_request)."""


def check_scheme(url: str, allow_http: bool) -> None:
    """https:// always; http:// only with ``allow_http``. Raises DeliveryError."""
    if not (url.startswith("https://") or (allow_http and url.startswith("http://"))):
        raise DeliveryError(f"url must be https://{' or http://' if allow_http else ''}, got {url[:80]!r}")


def download(url: str, dest: Path, max_bytes: int, timeout_s: float, allow_http: bool = False, *,
             deadline_s: float = 1800.0, redirects: Redirects = "any_host", free_space: FreeSpace = disk_free,
             clock: Callable[[], float] = time.monotonic) -> Path:
    """Stream ``url`` into ``dest``. ``timeout_s`` bounds each read, ``deadline_s`` the whole download. Refusals
    are OtaRejected: ``too_large`` (Content-Length or bytes read over ``max_bytes``), ``disk_full`` (Content-Length
    over the free space of ``dest``'s directory, or ENOSPC), ``delivery`` (anything else, redirects included)."""
    check_scheme(url, allow_http)
    deadline = clock() + deadline_s
    tmp = dest.with_name(f".{dest.name}.part")
    opened: tuple[http.client.HTTPConnection, socket.socket, http.client.HTTPResponse] | None = None
    try:
        opened = _open(url, timeout_s, allow_http, redirects)
        _conn, sock, resp = opened
        length = resp.getheader("Content-Length")
        if length is not None and length.isdigit():
            if int(length) > max_bytes:
                raise OtaRejected("too_large", f"{url} is {length} bytes, the limit is {max_bytes}")
            free = free_space(dest.parent)
            if int(length) > free:
                raise OtaRejected("disk_full", f"{url} is {length} bytes, {free} are free in {dest.parent}")
        with open(tmp, "wb") as out:
            got = 0
            while True:
                left = deadline - clock()
                if left <= 0:
                    raise TimeoutError("deadline")
                sock.settimeout(min(timeout_s, left))
                block = resp.read1(1 << 20)
                if not block:
                    break
                got += len(block)
                if got > max_bytes:
                    raise OtaRejected("too_large", f"{url} sent more than the limit of {max_bytes} bytes")
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dest)
        return dest
    except TimeoutError:
        if clock() >= deadline:
            raise OtaRejected("delivery", f"download of {url} failed: not done within ota.download_deadline_s "
                                          f"{deadline_s:g} s") from None
        raise OtaRejected("delivery", f"download of {url} failed: no data for ota.download_timeout_s "
                                      f"{timeout_s:g} s") from None
    except OSError as exc:
        if out_of_space(exc):
            raise OtaRejected("disk_full", f"ran out of space downloading {url} into {dest.parent}") from None
        raise OtaRejected("delivery", f"download of {url} failed: {exc}") from None
    except (http.client.HTTPException, ValueError) as exc:
        raise OtaRejected("delivery", f"download of {url} failed: {type(exc).__name__}: {exc}") from None
    finally:
        if opened is not None:
            opened[2].close()
            opened[0].close()
        tmp.unlink(missing_ok=True)


def fetch(url: str, dest: Path, config: OtaConfig, free_space: FreeSpace = disk_free) -> Path:
    """``download`` with the limits of the ``ota:`` config section."""
    return download(url, dest, config.max_bundle_bytes, config.download_timeout_s, config.allow_http,
                    deadline_s=config.download_deadline_s, redirects=config.download_redirects,
                    free_space=free_space)


def _open(url: str, timeout_s: float, allow_http: bool,
          redirects: Redirects) -> tuple[http.client.HTTPConnection, socket.socket, http.client.HTTPResponse]:
    """The connection, its socket and the 200 response for ``url``, after the redirects this policy allows. The
    socket is taken before the response: http.client drops it from the connection when the server closes after
    the body."""
    current = url
    for _ in range(_MAX_REDIRECTS + 1):
        parts = urlsplit(current)
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=timeout_s,
                                               context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout_s)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("GET", target, headers={"User-Agent": "appliance-ota"})
        sock = conn.sock
        resp = conn.getresponse()
        if resp.status == 200 and sock is not None:
            return conn, sock, resp
        location = resp.getheader("Location")
        conn.close()
        if resp.status not in _REDIRECT or not location:
            raise OtaRejected("delivery", f"download of {url} failed: HTTP {resp.status} {resp.reason}")
        current = _redirect(url, current, urljoin(current, location), allow_http, redirects)
    raise OtaRejected("delivery", f"download of {url} failed: more than {_MAX_REDIRECTS} redirects")


def _redirect(url: str, current: str, target: str, allow_http: bool, redirects: Redirects) -> str:
    """``target`` when the policy allows going there from ``current``, else a ``delivery`` refusal."""
    why = None
    src, dst = urlsplit(current), urlsplit(target)
    if redirects == "none":
        why = "redirects are not followed (ota.download_redirects: none)"
    elif dst.scheme not in ("https", "http") or (dst.scheme == "http" and (src.scheme == "https" or not allow_http)):
        why = f"a redirect from {src.scheme}:// to {dst.scheme}:// is refused (never to a weaker scheme)"
    elif redirects == "same_host" and (dst.hostname, dst.port) != (src.hostname, src.port):
        why = (f"a redirect to another host ({dst.hostname}) is refused (ota.download_redirects: same_host)")
    if why is not None:
        raise OtaRejected("delivery", f"download of {url} failed: {why}; redirected to {target[:120]}")
    return target
