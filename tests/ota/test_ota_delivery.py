"""Getting bundles to the manager: chunked uploads (MQTT QoS 1 may redeliver any chunk), with a fake clock for
expiry; refused deliveries on the status stream; URL downloads from a real HTTP(S) server on loopback (a
self-signed certificate the test trusts through SSL_CERT_FILE). Real files, a real OtaManager (tiny real ONNX
model, ONNX Runtime builder) behind the command handler."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from support.bundleserver import Server, tls_server
from support.otamanager import ota_manager
from support.ports import free_port
from support.schemas import validate_ota_status

from appliance.fleet.push import chunk_payloads
from appliance.ota.config import HealthPolicy, OtaConfig
from appliance.ota.delivery import ChunkAssembler, DeliveryError, OtaCommandHandler
from appliance.ota.errors import OtaRejected
from appliance.ota.manager import OtaManager
from appliance.ota.offline import OfflineSwitcher


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def assembler(tmp_path: Path, max_bytes: int = 1000, timeout_s: float = 60) -> tuple[ChunkAssembler, Clock]:
    clock = Clock()
    return ChunkAssembler(tmp_path / "chunks", max_bytes, timeout_s, clock), clock


def leftovers(chunks: ChunkAssembler) -> list[str]:
    return sorted(p.name for p in chunks.directory.iterdir() if not p.name.endswith(".bundle"))


def test_a_redelivered_chunk_0_is_ignored(tmp_path: Path) -> None:
    chunks, _ = assembler(tmp_path)
    assert chunks.add("u", 0, 3, b"aa") is None and chunks.add("u", 1, 3, b"bb") is None
    assert chunks.add("u", 0, 3, b"aa") is None  # QoS 1 redelivery: must not restart the upload
    done = chunks.add("u", 2, 3, b"cc")
    assert done is not None and done.read_bytes() == b"aabbcc" and leftovers(chunks) == []


def test_a_redelivered_middle_chunk_and_a_late_redelivery_are_ignored(tmp_path: Path) -> None:
    chunks, _ = assembler(tmp_path)
    chunks.add("u", 0, 3, b"aa")
    chunks.add("u", 1, 3, b"bb")
    assert chunks.add("u", 1, 3, b"bb") is None
    done = chunks.add("u", 2, 3, b"cc")
    assert done is not None and done.read_bytes() == b"aabbcc"
    done.unlink()  # the handler hands the bundle on
    # after completion: no error, no new upload, no new file
    for index, data in ((2, b"cc"), (0, b"aa"), (1, b"bb")):
        assert chunks.add("u", index, 3, data) is None
    assert list(chunks.directory.iterdir()) == []


def test_a_chunk_received_again_with_other_bytes_is_refused_and_the_upload_goes_on(tmp_path: Path) -> None:
    chunks, _ = assembler(tmp_path)
    chunks.add("u", 0, 2, b"aa")
    with pytest.raises(DeliveryError, match="chunk 0 was received before with other bytes"):
        chunks.add("u", 0, 2, b"zz")
    done = chunks.add("u", 1, 2, b"bb")
    assert done is not None and done.read_bytes() == b"aabb"


def test_an_out_of_order_chunk_is_refused_and_the_upload_goes_on(tmp_path: Path) -> None:
    chunks, _ = assembler(tmp_path)
    with pytest.raises(DeliveryError, match="got chunk 1, expected 0"):
        chunks.add("u", 1, 3, b"bb")
    chunks.add("u", 0, 3, b"aa")
    with pytest.raises(DeliveryError, match="got chunk 2, expected 1 .send in order."):
        chunks.add("u", 2, 3, b"cc")
    with pytest.raises(DeliveryError, match="count changed from 3 to 4"):
        chunks.add("u", 1, 4, b"bb")
    chunks.add("u", 1, 3, b"bb")
    done = chunks.add("u", 2, 3, b"cc")
    assert done is not None and done.read_bytes() == b"aabbcc"


def test_an_abandoned_upload_expires(tmp_path: Path) -> None:
    chunks, clock = assembler(tmp_path, timeout_s=60)
    chunks.add("u", 0, 3, b"aa")
    clock.t += 59  # within the timeout the upload goes on
    chunks.add("u", 1, 3, b"bb")
    clock.t += 61
    chunks.add("v", 0, 2, b"vv")  # any chunk drops what expired
    assert leftovers(chunks) == ["v.part"]
    with pytest.raises(DeliveryError, match="got chunk 2, expected 0 .unknown or expired upload."):
        chunks.add("u", 2, 3, b"cc")
    # the sender starts over (same or new id) and gets the whole bundle
    for index, data in enumerate((b"aa", b"bb")):
        chunks.add("u", index, 3, data)
    done = chunks.add("u", 2, 3, b"cc")
    assert done is not None and done.read_bytes() == b"aabbcc"


def test_an_abandoned_upload_expires_with_no_further_chunk(tmp_path: Path) -> None:
    chunks, clock = assembler(tmp_path, timeout_s=60)
    chunks.add("u", 0, 3, b"aa")
    clock.t += 59
    chunks.expire()  # the supervisor calls this every tick
    assert leftovers(chunks) == ["u.part"]
    clock.t += 2
    chunks.expire()
    assert leftovers(chunks) == []
    with pytest.raises(DeliveryError, match="expected 0 .unknown or expired upload."):
        chunks.add("u", 1, 3, b"bb")


def test_an_upload_over_the_limit_is_too_large_and_leaves_nothing(tmp_path: Path) -> None:
    chunks, _ = assembler(tmp_path, max_bytes=10)
    chunks.add("u", 0, 3, b"123456")
    with pytest.raises(OtaRejected) as info:
        chunks.add("u", 1, 3, b"789012")
    assert info.value.code == "too_large"
    assert leftovers(chunks) == []
    with pytest.raises(DeliveryError, match="expected 0"):  # the upload is gone, not half-kept
        chunks.add("u", 2, 3, b"x")
    with pytest.raises(OtaRejected, match="too_large"):  # one chunk alone over the limit
        chunks.add("w", 0, 1, b"x" * 11)
    assert leftovers(chunks) == []


def handler_for(tmp_path: Path, keys: Any, events: list[Any], **config: Any) -> OtaCommandHandler:
    m = ota_manager(tmp_path / "state", keys.trusted(), events=events, health=HealthPolicy(period_s=0), **config)
    return OtaCommandHandler(m, m.config, tmp_path / "state" / "ota" / "incoming", background=False)


def test_what_an_earlier_run_left_while_receiving_is_removed_at_start(tmp_path, keys, sign, tiny_source) -> None:
    incoming = tmp_path / "state" / "ota" / "incoming"
    (incoming / "chunks").mkdir(parents=True)
    left = [incoming / "bundle-41-1.bundle", incoming / ".download-41-2.bundle.part",
            incoming / "chunks" / "u7.part", incoming / "chunks" / "u6.bundle"]
    for path in left:
        path.write_bytes(b"x" * 1000)
    events: list[Any] = []
    handler = handler_for(tmp_path, keys, events)
    assert [p for p in left if p.exists()] == [] and (incoming / "chunks").is_dir()
    # the sender sends again, under the same upload id, and it installs
    data = sign(tiny_source("2"), "v2.bundle").read_bytes()
    half = len(data) // 2
    for index, piece in enumerate((data[:half], data[half:])):
        reply = handler.handle({"upload_id": "u7", "index": index, "count": 2,
                                "data": base64.b64encode(piece).decode()})
    assert reply["state"] == "active" and events[-1].state == "active"


def test_chunks_redelivered_through_the_command_handler_install_once(tmp_path, keys, sign, tiny_source) -> None:
    events: list[Any] = []
    handler = handler_for(tmp_path, keys, events)
    payloads = list(chunk_payloads(sign(tiny_source("2")), 64 << 10))
    assert len(payloads) >= 3
    replies = [handler.handle(p) for p in (payloads[0], payloads[1], payloads[0], *payloads[1:])]
    assert replies[-1]["state"] == "active" and replies[-1]["version"] == "2"
    assert handler.handle(payloads[-1]) == {"chunk": len(payloads) - 1, "count": len(payloads)}  # late duplicate
    assert [e.state for e in events].count("active") == 1
    assert list((handler.incoming / "chunks").iterdir()) == []


# -- refused deliveries reach ota/status -------------------------------------------------------------------------

def assert_refused(events: list[Any], code: str, request_id: str, incoming: Path) -> None:
    """The delivery ended in a `rejected` status (it would be the retained ota/status) and left no file."""
    assert events and events[-1].state == "rejected" and events[-1].code == code, events[-1:]
    assert events[-1].request_id == request_id
    for e in events:
        validate_ota_status(e)
    assert [p.name for p in incoming.iterdir() if p.name != "chunks"] == []
    assert not (incoming / "chunks").exists() or list((incoming / "chunks").iterdir()) == []


def test_a_path_over_the_limit_is_rejected_on_the_status_stream(tmp_path: Path, keys: Any) -> None:
    events: list[Any] = []
    handler = handler_for(tmp_path, keys, events, max_bundle_bytes=1000)
    big = tmp_path / "big.bundle"
    big.write_bytes(b"x" * 1001)
    with pytest.raises(OtaRejected, match="too_large"):
        handler.handle({"path": str(big)}, request_id="r-path")
    assert_refused(events, "too_large", "r-path", handler.incoming)


def test_a_bundle_that_does_not_fit_on_the_disk_is_disk_full_on_the_status_stream(tmp_path: Path, keys: Any,
                                                                                 small_tmpfs: Path) -> None:
    events: list[Any] = []
    cfg = OtaConfig(health=HealthPolicy(period_s=0))
    manager = OtaManager(small_tmpfs / "state", keys.trusted(), OfflineSwitcher(), config=cfg,
                         status_cb=events.append)
    handler = OtaCommandHandler(manager, cfg, small_tmpfs / "incoming", background=False)
    big = tmp_path / "big.bundle"  # under max_bundle_bytes, over the 200 KB filesystem: the copy hits ENOSPC
    big.write_bytes(b"x" * 300_000)
    with pytest.raises(OtaRejected, match="disk_full"):
        handler.handle({"path": str(big)}, request_id="r-full")
    assert_refused(events, "disk_full", "r-full", handler.incoming)


def test_chunks_over_the_limit_are_rejected_on_the_status_stream(tmp_path: Path, keys: Any) -> None:
    events: list[Any] = []
    handler = handler_for(tmp_path, keys, events, max_bundle_bytes=1000)
    handler.handle({"upload_id": "u", "index": 0, "count": 2, "data": "eHh4"}, request_id="r-0")
    assert events == []  # a chunk that fits says nothing on the status stream
    with pytest.raises(OtaRejected, match="too_large"):
        handler.handle({"upload_id": "u", "index": 1, "count": 2, "data": "eHh4" * 400}, request_id="r-1")
    assert_refused(events, "too_large", "r-1", handler.incoming)


def test_bad_arguments_are_a_bad_request_not_an_update(tmp_path: Path, keys: Any) -> None:
    from appliance.mqtt.errors import CommandError

    class Command:
        args = {"path": str(tmp_path / "missing.bundle")}
        request_id = "r-bad"

    events: list[Any] = []
    with pytest.raises(CommandError) as info:
        handler_for(tmp_path, keys, events)(Command())
    assert info.value.code == "bad_request" and events == []


# -- downloads from a real HTTP(S) server on loopback ------------------------------------------------------------

def publish(server: Server, bundle: Path) -> str:
    return server.publish(bundle)


def test_a_good_https_download_installs(tmp_path, keys, sign, tiny_source, monkeypatch) -> None:
    server, cert = tls_server(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the device trusts this server's certificate
    try:
        url = publish(server, sign(tiny_source("2")))
        assert url.startswith("https://")
        events: list[Any] = []
        handler = handler_for(tmp_path, keys, events)  # allow_http is off: https is always allowed
        result = handler.handle({"url": url}, request_id="r-https")
        assert result["state"] == "active" and result["version"] == "2", result
        assert server.requests == ["/files/update.bundle"]
        assert events[-1].state == "active" and handler.manager.store.serving() == "2"
        assert [p.name for p in handler.incoming.iterdir()] == []  # the download is gone once installed
    finally:
        server.close()


def test_plain_http_is_refused_unless_allowed(tmp_path, keys, sign, tiny_source, http_server) -> None:
    url = publish(http_server, sign(tiny_source("2")))
    events: list[Any] = []
    with pytest.raises(DeliveryError, match="url must be https://, got 'http://"):
        handler_for(tmp_path / "a", keys, events).handle({"url": url})
    assert http_server.requests == [] and events == []  # refused before any request, no update started
    allowed = handler_for(tmp_path / "b", keys, events, allow_http=True)
    assert allowed.handle({"url": url})["state"] == "active"
    assert http_server.requests == ["/files/update.bundle"]


def test_a_content_length_over_the_limit_is_too_large(tmp_path, keys, sign, tiny_source, http_server) -> None:
    bundle = sign(tiny_source("2"))
    url = publish(http_server, bundle)
    events: list[Any] = []
    handler = handler_for(tmp_path, keys, events, allow_http=True, max_bundle_bytes=bundle.stat().st_size - 1)
    with pytest.raises(OtaRejected) as info:
        handler.handle({"url": url}, request_id="r-len")
    assert info.value.code == "too_large" and f"is {bundle.stat().st_size} bytes" in info.value.reason
    assert_refused(events, "too_large", "r-len", handler.incoming)


def test_a_server_streaming_past_the_limit_is_cut_off(tmp_path, keys, http_server) -> None:
    http_server.endless_bytes = 64 << 20
    events: list[Any] = []
    handler = handler_for(tmp_path, keys, events, allow_http=True, max_bundle_bytes=1 << 20)
    with pytest.raises(OtaRejected) as info:
        handler.handle({"url": http_server.url("/endless")}, request_id="r-endless")
    assert info.value.code == "too_large" and "sent more than the limit of 1048576 bytes" in info.value.reason
    assert_refused(events, "too_large", "r-endless", handler.incoming)


@pytest.mark.parametrize("where", ["404", "closed port"])
def test_a_failed_download_is_rejected_as_delivery(tmp_path, keys, http_server, where) -> None:
    url = http_server.url("/files/missing.bundle")
    if where == "closed port":
        url = url.rsplit(":", 1)[0] + f":{free_port()}/x.bundle"
    events: list[Any] = []
    handler = handler_for(tmp_path, keys, events, allow_http=True)
    with pytest.raises(OtaRejected) as info:
        handler.handle({"url": url}, request_id="r-fail")
    assert info.value.code == "delivery" and f"download of {url} failed" in info.value.reason
    assert_refused(events, "delivery", "r-fail", handler.incoming)


def test_a_replayed_old_bundle_sent_as_chunks_is_a_downgrade_on_the_status_stream(tmp_path, keys, sign,
                                                                                  tiny_source) -> None:
    """The MQTT `ota` command path: a captured bundle of version 1, replayed after 2 is active, is refused."""
    events: list[Any] = []
    handler = handler_for(tmp_path, keys, events)
    old = list(chunk_payloads(sign(tiny_source("1"), "1.bundle"), 64 << 10))
    assert [handler.handle(p) for p in old][-1]["state"] == "active"
    new = list(chunk_payloads(sign(tiny_source("2"), "2.bundle"), 64 << 10))
    assert [handler.handle(p) for p in new][-1]["state"] == "active"
    events.clear()
    for payload in old[:-1]:
        handler.handle({**payload, "upload_id": "replay"}, request_id="cmd-9")
    with pytest.raises(OtaRejected) as info:
        handler.handle({**old[-1], "upload_id": "replay"}, request_id="cmd-9")
    assert info.value.code == "downgrade"
    assert_refused(events, "downgrade", "cmd-9", handler.incoming)
    assert events[-1].version == "1" and "not newer than 2" in events[-1].message
    assert handler.manager.store.serving() == "2"
