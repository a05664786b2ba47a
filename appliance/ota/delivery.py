"""Getting bundles to the manager: the MQTT ``ota`` command and a watched inbox directory.

Everything but ``{"action": "status"}`` changes what is served, so it must be signed by an operator, every chunk of
an upload too. Downloads and installs run on background threads, never on the commands thread, one install at a
time; the reply only says the bundle was accepted, and the outcome follows on ``ota/status`` (docs/ota.md,
"Delivery")."""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from appliance.ota.config import OtaConfig
from appliance.ota.download import DeliveryError, check_scheme, fetch
from appliance.ota.errors import OtaError, OtaRejected, out_of_space

__all__ = ["ChunkAssembler", "DeliveryError", "InboxWatcher", "OtaCommandHandler", "clear_leftovers", "is_read_only"]

log = logging.getLogger(__name__)
_UPLOAD_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def is_read_only(args: Mapping[str, Any]) -> bool:
    """True for the one ``ota`` use that changes nothing and needs no signature: ``{"action": "status"}``."""
    return dict(args) == {"action": "status"}


@dataclass
class _Upload:
    count: int
    ends: list[int]  # end offset in the .part file of each chunk written so far (chunk i is ends[i-1]..ends[i])
    seen: float      # last chunk, for chunk_timeout_s


class ChunkAssembler:
    """Chunks of one upload, written to ``<dir>/<upload_id>.part`` in order; complete -> the bundle path.

    MQTT QoS 1 may deliver a chunk twice: a chunk already written (or any chunk of an upload completed within
    ``timeout_s``) is ignored when it carries the same bytes. A sender restarts with a new upload_id."""

    def __init__(self, directory: Path, max_bytes: int, timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self._clock = clock
        self._uploads: dict[str, _Upload] = {}
        self._completed: dict[str, float] = {}  # upload id -> when its last chunk arrived
        self._lock = threading.Lock()

    def add(self, upload_id: str, index: int, count: int, data: bytes) -> Path | None:
        """The bundle when this chunk completes the upload, else None (more to come, or a redelivery)."""
        if not _UPLOAD_ID.match(upload_id):
            raise DeliveryError(f"upload_id must be 1-64 of A-Z a-z 0-9 _ . -, got {upload_id[:80]!r}")
        if count < 1 or not 0 <= index < count:
            raise DeliveryError(f"chunk index {index} is outside 0..count-1 (count {count})")
        with self._lock:
            now = self._clock()
            self._expire(now)
            if upload_id in self._completed:
                return None  # a redelivery after the bundle was handed on
            self.directory.mkdir(parents=True, exist_ok=True)
            part = self.directory / f"{upload_id}.part"
            upload = self._uploads.get(upload_id)
            if upload is None:
                if index != 0:
                    raise DeliveryError(f"upload {upload_id}: got chunk {index}, expected 0 (unknown or expired "
                                        "upload)")
                part.unlink(missing_ok=True)  # a leftover of an earlier process
                upload = _Upload(count, [], now)
                self._uploads[upload_id] = upload
            if count != upload.count:
                raise DeliveryError(f"upload {upload_id}: count changed from {upload.count} to {count}")
            upload.seen = now
            if index < len(upload.ends):
                self._check_same(part, upload, index, data)
                return None
            if index > len(upload.ends):
                raise DeliveryError(f"upload {upload_id}: got chunk {index}, expected {len(upload.ends)} "
                                    "(send in order)")
            size = upload.ends[-1] if upload.ends else 0
            if size + len(data) > self.max_bytes:
                self._drop(upload_id)
                raise OtaRejected("too_large", f"upload {upload_id} exceeds {self.max_bytes} bytes")
            with open(part, "ab") as f:
                f.write(data)
            upload.ends.append(size + len(data))
            if len(upload.ends) < count:
                return None
            del self._uploads[upload_id]
            self._completed[upload_id] = now
            final = self.directory / f"{upload_id}.bundle"
            os.replace(part, final)
            return final

    def _check_same(self, part: Path, upload: _Upload, index: int, data: bytes) -> None:
        start = upload.ends[index - 1] if index else 0
        with open(part, "rb") as f:
            f.seek(start)
            same = f.read(upload.ends[index] - start) == data
        if not same:
            raise DeliveryError(f"chunk {index} was received before with other bytes; to send another bundle, "
                                "use a new upload_id")

    def expire(self) -> None:
        """Drop uploads that got no chunk for ``timeout_s`` (called periodically: a sender that gave up sends
        nothing more that would trigger it)."""
        with self._lock:
            self._expire(self._clock())

    def _drop(self, upload_id: str) -> None:
        self._uploads.pop(upload_id, None)
        (self.directory / f"{upload_id}.part").unlink(missing_ok=True)

    def _expire(self, now: float) -> None:
        for uid, upload in list(self._uploads.items()):
            if now - upload.seen > self.timeout_s:
                log.warning("OTA upload %s expired (no chunk for %.0f s)", uid, self.timeout_s)
                self._drop(uid)
        for uid, done in list(self._completed.items()):
            if now - done > self.timeout_s:
                del self._completed[uid]


def clear_leftovers(incoming: Path) -> None:
    """Remove what an earlier process left in ``incoming`` (killed or powered off while receiving or installing):
    partial chunks and downloads, and bundles it never finished installing. None can be resumed, since uploads
    live in memory, and each may be as large as ``max_bundle_bytes``; the sender sends again."""
    for path in sorted([*Path(incoming).glob("*"), *(Path(incoming) / "chunks").glob("*")]):
        if path.is_file():
            size = path.stat().st_size
            path.unlink(missing_ok=True)
            log.info("OTA: removed %s (%d bytes), left by an earlier run that stopped while receiving or "
                     "installing it; send the bundle again if it is still wanted", path, size)


class OtaCommandHandler:
    """``handler(command) -> dict`` for ``MqttPublisher.on_command("ota", handler)``."""

    def __init__(self, manager: Any, config: OtaConfig, incoming_dir: Path, *, background: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.manager = manager
        self.config = config
        self.incoming = Path(incoming_dir)
        self.background = background
        self.chunks = ChunkAssembler(self.incoming / "chunks", config.max_bundle_bytes, config.chunk_timeout_s, clock)
        self._threads: list[threading.Thread] = []
        self._seq = 0
        self._naming = threading.Lock()  # commands thread and download workers
        clear_leftovers(self.incoming)

    def __call__(self, command: Any) -> dict[str, Any]:
        from appliance.mqtt.errors import CommandError

        try:
            return self.handle(dict(command.args), command.request_id)
        except DeliveryError as exc:
            raise CommandError(str(exc), code="bad_request") from None
        except OtaError as exc:
            raise CommandError(str(exc)) from None

    def handle(self, args: Mapping[str, Any], request_id: str | None = None) -> dict[str, Any]:
        keys = set(args) & {"path", "url", "upload_id", "action"}
        if len(keys) != 1:
            raise DeliveryError("give exactly one of: path, url, upload_id (with index, count, data), action")
        if "action" in args:
            if args["action"] == "rollback":
                return dict(self.manager.rollback(request_id))
            if args["action"] == "status":
                return dict(self.manager.status())
            raise DeliveryError(f"action must be 'rollback' or 'status', got {args['action']!r}")
        asked = self.manager.rollbacks()
        if "url" in args:
            url = str(args["url"])
            check_scheme(url, self.config.allow_http)
            return self._start(lambda: self._download(url, request_id), request_id, asked, url[:200])
        try:
            bundle = self._receive(args)
        except OtaRejected as exc:  # the update ends here: say so on ota/status too, not only in the reply
            self.manager.report_rejected(exc, request_id)
            raise
        if isinstance(bundle, dict):
            return bundle
        return self._start(lambda: bundle, request_id, asked, bundle.name)

    def _download(self, url: str, request_id: str | None) -> Path:
        with self._naming:
            self._seq += 1
            dest = self.incoming / f"download-{os.getpid()}-{self._seq}.bundle"
        try:
            self.incoming.mkdir(parents=True, exist_ok=True)
            return fetch(url, dest, self.config, self.manager.free_space)
        except OSError as exc:  # the incoming directory
            rejected = OtaRejected("disk_full" if out_of_space(exc) else "delivery", f"download of {url}: {exc}")
            self.manager.report_rejected(rejected, request_id)
            raise rejected from None
        except OtaRejected as exc:
            self.manager.report_rejected(exc, request_id)
            raise

    def _receive(self, args: Mapping[str, Any]) -> Path | dict[str, Any]:
        """The bundle, or the reply to a chunk that did not complete its upload. Bad arguments raise
        DeliveryError (no update started); a refused or failed delivery raises OtaRejected."""
        try:
            self.incoming.mkdir(parents=True, exist_ok=True)
            if "path" in args:
                src = Path(str(args["path"]))
                if not src.is_file():
                    raise DeliveryError(f"path {src} is not a file")
                if src.stat().st_size > self.config.max_bundle_bytes:
                    raise OtaRejected("too_large", f"{src} is over {self.config.max_bundle_bytes} bytes")
                return self._claim(src, copy=True)
            try:
                index, count = int(args["index"]), int(args["count"])
                data = base64.b64decode(str(args["data"]), validate=True)
            except (KeyError, ValueError, TypeError, binascii.Error) as exc:
                raise DeliveryError(f"a chunk needs upload_id, index, count and base64 data: {exc}") from None
            done = self.chunks.add(str(args["upload_id"]), index, count, data)
            return {"chunk": index, "count": count} if done is None else done
        except OSError as exc:  # copying the path or writing a chunk
            raise OtaRejected("disk_full" if out_of_space(exc) else "delivery",
                              f"receiving the bundle failed: {exc}") from None

    def _claim(self, src: Path, copy: bool) -> Path:
        with self._naming:
            self._seq += 1
            dest = self.incoming / f"bundle-{os.getpid()}-{self._seq}.bundle"
        tmp = dest.with_name(f".{dest.name}.part")
        try:
            shutil.copyfile(src, tmp) if copy else os.replace(src, tmp)
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)  # a copy that failed half-way
        return dest

    def _start(self, receive: Callable[[], Path], request_id: str | None, asked: int,
               label: str) -> dict[str, Any]:
        """Receive the bundle (a download, or the one at hand) and install it; on a worker thread unless
        ``background`` is off. ``asked``: the manager's rollbacks() when the command came."""
        def run() -> dict[str, Any]:
            bundle = receive()
            try:
                return dict(self.manager.install(bundle, request_id=request_id, since_rollback=asked))
            finally:
                bundle.unlink(missing_ok=True)

        if not self.background:
            return run()

        def guarded() -> None:
            try:
                run()
            except OtaError:
                pass  # reported through the status callback
            except Exception:
                log.exception("OTA update from %s crashed", label)

        thread = threading.Thread(target=guarded, name="ota-update", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
        return {"accepted": True, "bundle": label}

    def join(self, timeout: float | None = None) -> None:
        for thread in list(self._threads):
            thread.join(timeout)


class InboxWatcher:
    """Polls ``inbox`` for ``*.bundle`` files (written elsewhere and renamed in: ``appliance ota push --inbox``)
    and installs each, oldest first. A processed bundle is moved to ``inbox/done/`` or ``inbox/rejected/``."""

    def __init__(self, manager: Any, inbox: Path, poll_s: float = 2.0) -> None:
        self.manager = manager
        self.inbox = Path(inbox)
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> list[tuple[str, str]]:
        """Install whatever is waiting; returns (bundle name, outcome) pairs."""
        self.inbox.mkdir(parents=True, exist_ok=True)
        outcomes = []
        for path in sorted(self.inbox.glob("*.bundle"), key=lambda p: (p.stat().st_mtime, p.name)):
            try:
                result = self.manager.install(path)
                outcome, where = result["state"], "done"
            except OtaError as exc:
                outcome, where = f"rejected: {exc}", "rejected"
            (self.inbox / where).mkdir(exist_ok=True)
            if path.exists():
                os.replace(path, self.inbox / where / path.name)
            outcomes.append((path.name, outcome))
        return outcomes

    def start(self) -> "InboxWatcher":
        def loop() -> None:
            while not self._stop.wait(self.poll_s):
                try:
                    self.poll_once()
                except Exception:
                    log.exception("OTA inbox %s: poll failed", self.inbox)

        self._thread = threading.Thread(target=loop, name="ota-inbox", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
