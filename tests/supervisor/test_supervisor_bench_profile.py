"""``appliance bench e2e --profile`` splits each thread's measured CPU among the parts its py-spy samples fall in.
The samples below are written by hand in py-spy's raw format (``record --format raw --threads``), the expected
milliseconds worked out by hand from the rules in docs/benchmarks.md. The smoke test of the whole profile is in
test_supervisor_bench_e2e.py."""

from __future__ import annotations

import re

import pytest

from appliance.bench._e2e_profile import stub_part
from appliance.bench._profile_parts import PART_KEYS, ProcessCpu, attribute, key_lines, parse_raw, table

BOOT = "Thread._bootstrap (threading.py:1002);Thread._bootstrap_inner (threading.py:1045);Thread.run (threading.py:982)"
WAIT = "Event.wait (threading.py:629);Condition.wait (threading.py:331)"
SUPERVISOR = f"""\
thread (101): scheduler;{BOOT};Scheduler._run (appliance/supervisor/scheduler.py:258);Scheduler._lease (appliance/supervisor/scheduler.py:120) 3
thread (101): scheduler;{BOOT};Scheduler._run (appliance/supervisor/scheduler.py:260);FramePath.submit (appliance/supervisor/framepath.py:80);encode (appliance/mqtt/messages.py:56);dumps (json/__init__.py:231);JSONEncoder.encode (json/encoder.py:200) 1
thread (101): scheduler;{BOOT};Scheduler._run (appliance/supervisor/scheduler.py:258);Doorbell.wait (appliance/capture/doorbell.py:35) 10
thread (102): mqtt-sender;{BOOT};Sender.run (appliance/mqtt/sender.py:71);{WAIT} 5
thread (103);Runtime._response_complete (appliance/triton/requests.py:237);Scheduler._finish (appliance/supervisor/scheduler.py:246);Doorbell.ring (appliance/capture/doorbell.py:31) 2
thread (103) 2
thread (104): paho-mqtt-client-bench-sub-7-3;{BOOT};Client._thread_main (paho/mqtt/client.py:4478);Client._loop (paho/mqtt/client.py:1690);Client.loop_read (paho/mqtt/client.py:2102) 1
thread (100): MainThread;bench_appliance (appliance/bench/e2e.py:94);Appliance.tick (appliance/supervisor/app.py:327);ModelProbe.faults (appliance/detector/serving/probe.py:108);Server.stub_counts (appliance/triton/server.py:128);StubScanner.scan (appliance/triton/stubs.py:113);stat_fields (appliance/procs.py:20) 3
thread (100): MainThread;bench_appliance (appliance/bench/e2e.py:94);Appliance.tick (appliance/supervisor/app.py:314);SupervisedCamera.refresh (appliance/supervisor/cameras.py:69) 1
thread (100): MainThread;bench_appliance (appliance/bench/e2e.py:95) 1
thread (106): mqtt-spool;{BOOT};Spool.append (/opt/venv/lib/python3.11/site-packages/appliance/mqtt/spool.py:50) 4
"""
CAPTURE = f"""\
thread (201): MainThread;capture_main (appliance/capture/process.py:115);CaptureLoop._stream (appliance/capture/loop.py:162);FileCapture.read_into (appliance/capture/sources/opencv.py:141) 6
thread (201): MainThread;capture_main (appliance/capture/process.py:115);CaptureLoop._stream (appliance/capture/loop.py:170);fit_frame (appliance/capture/sources/base.py:109) 2
thread (201): MainThread;capture_main (appliance/capture/process.py:115);CaptureLoop._stream (appliance/capture/loop.py:186);RingWriter.publish (appliance/capture/ring.py:90) 1
thread (201): MainThread;capture_main (appliance/capture/process.py:115);CaptureLoop._stream (appliance/capture/loop.py:187);Doorbell.ring (appliance/capture/doorbell.py:31) 1
thread (201): MainThread;capture_main (appliance/capture/process.py:115);CaptureLoop._stream (appliance/capture/loop.py:149);{WAIT} 20
"""
# By hand: 100 is the bench's loop ticking the appliance, 5 samples of 100 ms: 3 counting the stubs (health: reading
# /proc in procs.py is passed over), 1 in the tick, 1 in the bench itself; 101 runs 4 samples (3 scheduling, 1 JSON; its 10 in the doorbell's wait do not count) of 400 ms; 102
# only waited, so its 50 ms go where it waited (MQTT's sender); 103 is Triton's completion thread, 2 samples in our
# callback (the doorbell passed over: the scheduler rang it) and 2 in native code only; 104 is the bench's
# subscriber; 105 never ran Python. In the capture process, 201 splits 100 ms over 10 running samples, and 202
# (FFmpeg's or OpenCV's own thread) was never sampled.
EXPECTED = {"scheduling": 300 + 40, "json": 100, "mqtt": 50, "triton_core": 40 + 60, "bench": 20 + 20, "spool": 30,
            "health": 60, "supervisor_other": 20,
            "decode": 60 + 40, "ring_copy": 20 + 10, "capture_other": 10, "stub_detector": 600, "profiler": 70}


def _processes() -> list[ProcessCpu]:
    return [
        ProcessCpu({100: 100, 101: 400, 102: 50, 103: 80, 104: 20, 105: 60, 106: 30}, "triton_core", parse_raw(SUPERVISOR)),
        ProcessCpu({201: 100, 202: 40}, "decode", parse_raw(CAPTURE)),
        ProcessCpu({301: 500, 302: 100}, "stub_detector"),  # a stub: /proc only, never sampled
        ProcessCpu({401: 70}, "profiler"),
    ]


def test_each_threads_cpu_is_split_by_its_running_samples() -> None:
    ms = attribute(_processes())
    assert set(ms) == set(EXPECTED)
    for part, expected in EXPECTED.items():
        assert ms[part] == pytest.approx(expected), part


def test_the_raw_format_is_read_per_thread_with_waits_apart() -> None:
    threads = parse_raw(SUPERVISOR + "not a sample line\n")
    assert sorted(threads) == [100, 101, 102, 103, 104, 106]
    assert threads[101].name == "scheduler" and threads[103].name == ""
    assert dict(threads[101].parts) == {"scheduling": 3, "json": 1}
    assert dict(threads[101].waiting) == {"scheduling": 10}
    assert dict(threads[102].parts) == {} and dict(threads[102].waiting) == {"mqtt": 5}


def test_the_table_and_key_lines_agree_with_the_split() -> None:
    ms = attribute(_processes())
    frames, seconds = 10, 2.0
    lines = table(ms, seconds, frames, cameras=2)
    rows = {line[:62].strip(): line[62:].split() for line in lines[1:]}
    appliance = rows.pop("the appliance, all parts above not marked otherwise")
    assert sum(float(share) for share, _, _ in rows.values()) == pytest.approx(100, abs=0.3)
    assert len(rows) == len(EXPECTED)
    assert float(appliance[1]) == pytest.approx((1550 - 40 - 70) / frames, abs=0.01)
    assert float(rows["Triton stub: detector (with its in-graph pre/post)"][2]) == pytest.approx(600 / seconds / 2,
                                                                                              abs=0.05)
    keys = [re.fullmatch(r"profile_(\w+)_ms_per_frame=([\d.]+)", line) for line in key_lines(ms, frames)]
    assert all(keys)
    per_frame = {m.group(1): float(m.group(2)) for m in keys if m}
    assert list(per_frame) == [*PART_KEYS, "appliance"]
    assert per_frame["scheduling"] == 34.0 and per_frame["analytics"] == 0.0 and per_frame["appliance"] == 144.0


def test_a_stubs_part_is_named_by_its_model() -> None:
    assert [stub_part(m) for m in ("preprocess", "detector", "l0_postprocess", "detect")] == [
        "stub_preprocess", "stub_detector", "stub_postprocess", "stub_detector"]
