"""The soak's checks (scripts/soakcheck.py, used by scripts/soak.py): a known loss and a known duplicate are
found, under the per-camera counter contract and in the seq fallback for today's messages; a clean stream
reports nothing; RSS and fd growth skip the first minute."""

from __future__ import annotations

import os
from pathlib import Path

from support.scripts import load_script

from appliance.mqtt.messages import DetectionsMessage, ModelInfo, detections_payload
from appliance.mqtt.numbering import MessageNumber

soakcheck = load_script("soakcheck")
Sample, Seen, growth, parse_status_rss_kib = (soakcheck.Sample, soakcheck.Seen, soakcheck.growth,
                                              soakcheck.parse_status_rss_kib)
check_camera, check_contract, check_fallback, check_messages = (soakcheck.check_camera, soakcheck.check_contract,
                                                                soakcheck.check_fallback, soakcheck.check_messages)


def _contract(camera: str, boot: str, numbers: list[int], ids: list[str] | None = None) -> list[Seen]:
    """Messages numbered ``numbers`` (message_seq) in that arrival order; frame seq = 10 x message_seq, and
    frames_skipped = 9 explains each jump of 10."""
    ids = ids or [f"{boot}-{n}" for n in numbers]
    return [Seen(camera, seq=10 * n, message_id=i, boot_id=boot, message_seq=n, frames_skipped=9 if n > 1 else 0)
            for n, i in zip(numbers, ids)]


def test_a_clean_stream_reports_no_loss_and_no_duplicate() -> None:
    check = check_contract(_contract("cam1", "b1", list(range(1, 21))))
    assert (check.received, check.lost, check.duplicates, check.boots, check.unexplained_seq_gaps) == (20, 0, 0, 1, 0)
    assert check.missing == []


def test_a_known_loss_and_a_known_redelivery_are_found() -> None:
    # 1..10 with 4 never received, and 7 received twice with the same message_id (a QoS 1 redelivery)
    messages = _contract("cam1", "b1", [1, 2, 3, 5, 6, 7, 7, 8, 9, 10])
    check = check_contract(messages)
    assert (check.received, check.lost, check.duplicates, check.redeliveries) == (10, 1, 1, 1)
    assert check.missing == [("b1", 4, 4)]


def test_a_duplicate_under_another_message_id_is_not_a_redelivery() -> None:
    messages = _contract("cam1", "b1", [1, 2, 2, 3], ids=["a", "b", "OTHER", "c"])
    check = check_contract(messages)
    assert (check.lost, check.duplicates, check.redeliveries) == (0, 1, 0)


def test_each_boot_counts_from_one_and_a_lost_first_message_is_found() -> None:
    # boot b1 ran 1..5 (its spool replayed after the restart, so its tail arrives late); boot b2's message 1 is lost
    messages = _contract("cam1", "b1", [1, 2, 3]) + _contract("cam1", "b2", [2, 3]) + _contract("cam1", "b1", [4, 5])
    check = check_contract(messages)
    assert (check.boots, check.lost, check.duplicates) == (2, 1, 0)
    assert check.missing == [("b2", 1, 1)]


def test_a_seq_gap_that_frames_skipped_does_not_explain_is_counted() -> None:
    messages = [Seen("cam1", 1, "a", "b1", 1, 0), Seen("cam1", 2, "b", "b1", 2, 0),
                Seen("cam1", 6, "c", "b1", 3, 3),  # 3 frames (3, 4, 5) skipped: explained
                Seen("cam1", 9, "d", "b1", 4, 0)]  # frames 7 and 8 unaccounted for
    check = check_contract(messages)
    assert (check.lost, check.unexplained_seq_gaps) == (0, 1)


def _payload(camera: str, seq: int, message_id: str) -> dict:
    """A detections payload as an appliance from before the message counter sent it: today's payload without
    boot_id, message_seq and frames_skipped (what the soak's fallback has to read)."""
    msg = DetectionsMessage(camera_id=camera, seq=seq, capture_time=1700000000.0 + seq,
                            model=ModelInfo("yolov3-tiny", "base", "sha256:" + "0" * 64), image_width=640,
                            image_height=480, latency_ms={"queue": 1.0, "inference": 2.0, "total": 3.0})
    payload = detections_payload(msg, "dev1", message_id, MessageNumber("0" * 32, seq, 0))
    for key in ("boot_id", "message_seq", "frames_skipped"):
        del payload[key]
    return payload


def test_todays_payloads_fall_back_to_seq_gaps_and_message_id_redeliveries() -> None:
    # seq 1..6 with 4 missing, 3 redelivered late (after 5), then the capture restarted at seq 1
    order = [(1, "m1"), (2, "m2"), (3, "m3"), (5, "m5"), (3, "m3"), (6, "m6"), (1, "n1"), (2, "n2")]
    messages = [Seen.from_payload(_payload("cam2", seq, mid)) for seq, mid in order]
    assert messages[0].message_seq is None and messages[0].message_id == "m1"
    check = check_fallback(messages)
    assert (check.counter, check.received, check.lost, check.duplicates, check.redeliveries) == ("seq", 8, 1, 1, 1)
    assert check.missing == [("run1", 4, 4)]
    assert check.boots == 2  # the restart at seq 1 is a new run, not 5 lost frames backwards


def test_the_same_frame_under_two_message_ids_is_a_duplicate_in_the_fallback() -> None:
    messages = [Seen("cam1", 1, "a"), Seen("cam1", 2, "b"), Seen("cam1", 2, "c"), Seen("cam1", 3, "d")]
    check = check_fallback(messages)
    assert (check.lost, check.duplicates, check.redeliveries) == (0, 1, 0)


def test_cameras_are_checked_apart_and_a_mixed_camera_gets_both_checks() -> None:
    new = _contract("cam1", "b1", [1, 2, 4])
    old = [Seen("cam1", 100, "x"), Seen("cam1", 102, "y")]
    other = _contract("cam2", "b1", [1, 2, 3])
    checks = check_messages(old + new + other)
    assert sorted(checks) == ["cam1", "cam2"]
    assert [(c.counter, c.lost) for c in checks["cam1"]] == [("message_seq", 1), ("seq", 1)]
    assert [(c.counter, c.lost) for c in checks["cam2"]] == [("message_seq", 0)]
    assert check_camera([]) == []


def test_growth_skips_the_first_minute_and_needs_two_steady_samples() -> None:
    samples = [Sample(5, 900_000, 300), Sample(60, 200_000, 40), Sample(120, 201_024, 41), Sample(180, 202_048, 40)]
    assert growth(samples) == (2.0, 0)  # 200,000 -> 202,048 KiB; the start-up reading at 5 s is left out
    assert growth(samples[:2]) is None
    assert growth([Sample(60, 100, 10), Sample(120, 100 - 512, 12)], warmup_s=60) == (-0.5, 2)


def test_rss_is_read_from_proc_status() -> None:
    text = Path(f"/proc/{os.getpid()}/status").read_text()
    rss = parse_status_rss_kib(text)
    assert rss is not None and rss > 1024  # a Python process is bigger than 1 MiB
    assert parse_status_rss_kib("Name:\tkthreadd\nState:\tS (sleeping)\n") is None
    assert parse_status_rss_kib("VmRSS:\t  12345 kB\n") == 12345
