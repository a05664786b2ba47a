"""The whole appliance on the sample video versus the detector alone and the naive design, in one run.

``appliance bench e2e``: results/s and latency are what an MQTT subscriber sees, so they include capture, the
scheduler, embedded Triton and the durable spool. The last line is ``e2e_vs_detector_alone=<ratio>``, with
``--analytics`` ``e2e_analytics_vs_detector_alone``, with ``--opcua`` ``e2e_opcua_vs_without``. The alternatives,
every line and today's figures: docs/supervisor.md, "Benchmark: appliance bench e2e"; the OPC UA runs:
docs/opcua.md; ``--record`` (recording off and on, ``e2e_record_vs_off``): docs/capture.md; ``--restream`` (off,
unwatched, one and four RTSP clients, ``e2e_restream_unwatched_vs_off``): docs/restream.md; the detector-plus-decode
baseline and ``--profile`` (CPU by part): docs/benchmarks.md."""

from __future__ import annotations

import argparse
import gc
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from appliance.bench._broker import start_local_broker
from appliance.bench._e2e_baselines import PROFILE, bench_detector, bench_naive, python_stages_engines, video_frames
from appliance.bench._e2e_cameras import appliance_config, camera_configs, cameras_yaml
from appliance.bench._e2e_decode import bench_detector_plus_decode
from appliance.bench._e2e_opcua import Window, close_window, opcua_setup, open_window, start_client, stop_client
from appliance.bench._e2e_profile import Profile
from appliance.bench._e2e_record import record_vs_off
from appliance.bench._e2e_restream import alternate, restream_section, watch_rtsp
from appliance.bench._e2e_stages import STAGES, pct, split_line, stage_means, stage_totals
from appliance.bench._e2e_subscriber import Received, subscriber, topic_counter
from appliance.bench._e2e_viewer import health_section, side_by_side, watch
from appliance.exitcodes import ExitCode
from appliance.helptext import plain_help
from appliance.paths import models_dir

OFFERED_VS_DETECTOR = 1.5  # the cameras together offer this many times what the detector alone does


def _config_name(*tags: str) -> str:
    """``bench-<the tags that are not empty, joined by ->.yaml``."""
    return f"bench-{'-'.join(tag for tag in tags if tag)}.yaml"


def warm_up(seconds: float) -> None:
    """A full collection first: what an earlier alternative left (an OPC UA server's address space) is not this
    one's to collect. Then a third of the measuring time, 1 to 3 s: first batches, capture processes settling."""
    gc.collect()
    time.sleep(min(3.0, max(1.0, seconds / 3)))


def bench_appliance(workdir: Path, video: Path, port: int, cameras: int, fps: float, seconds: float,
                    split: dict[str, float] | None = None, analytics: dict[str, int] | None = None,
                    engines_dir: Path | None = None, page: dict[str, int] | None = None, opcua: dict | None = None,
                    record: bool = False, restream: dict | None = None, profile: Profile | None = None
                    ) -> tuple[float, list[float]]:
    """The appliance's results/s (as a subscriber receives them) and capture→subscriber latencies; ``split``
    gets the mean ms per stage over the same window (see ``stage_totals``) and ``capture_to_submit``. Given
    ``analytics``, every camera runs ANALYTICS, and it gets the ``events`` and ``snapshot`` messages received
    over the measuring window (proof that the analytics did work). Given ``page``, the page is served; with
    ``page["viewers"]`` 1, someone watches cam0's live view, and ``page["pictures"]`` gets how many pictures they
    saw. ``opcua``: the OPC UA server runs with a client; it gets what that client received. ``record``: RECORD.
    ``profile``: started and stopped around the measuring window."""
    from appliance.appconfig.app import AppConfig
    from appliance.config.validate import load_config
    from appliance.supervisor.app import Appliance

    setup = opcua_setup(workdir) if opcua is not None else None
    shm_root = Path(tempfile.mkdtemp(prefix="appliance-bench-", dir="/dev/shm"))  # a fresh name nobody took first
    cams = cameras_yaml(video, cameras, fps, record=record, analytics=analytics is not None)
    config_path = workdir / _config_name(str(cameras), "analytics" * (analytics is not None),
                                         engines_dir.name if engines_dir else "", "opcua" * bool(setup),
                                         "record" * record, "raw" * video.is_dir())
    config_path.write_text(appliance_config(workdir, shm_root, port, cams, engines_dir, f"{health_section(page)}"
                                            f"{restream_section(restream)}\n" + (setup.section if setup else "")))
    received = Received()
    sub = subscriber(port, "appliance/bench/+/detections", received)
    counted: dict[str, int] = {"events": 0, "snapshot": 0}
    counter = (topic_counter(port, ("appliance/bench/+/events", "appliance/bench/+/snapshot"), counted)
               if analytics is not None else None)
    app, client = Appliance(load_config(config_path, AppConfig)), None
    window: Window | None = None
    try:
        app.start()
        client = start_client(setup) if setup is not None else None
        server = app.running.server
        warm_up(seconds)
        start_count, counted_before = received.count(), dict(counted)
        viewer, clients = watch(app, page), watch_rtsp(app, restream)
        before = stage_totals(server) if split is not None else {}
        window = open_window(app)
        if profile is not None:
            profile.start(app)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            app.tick()
            time.sleep(0.5)
        elapsed, got = time.perf_counter() - t0, received.since(start_count)
        close_window(window, app, opcua)  # the OPC UA server's CPU over the window: start-up is not its cost
        if profile is not None:
            profile.stop(len(got))
        if viewer is not None and page is not None:
            page["pictures"] = viewer.stop()
        clients.stop()
        if analytics is not None:
            analytics.update({key: counted[key] - counted_before[key] for key in counted})
        if split is not None:
            time.sleep(1.1)  # the stages push their own timers at most once a second
            split.update(stage_means(before, stage_totals(server)))
            with received.lock:
                to_submit = received.to_submit_ms[start_count:]
            if to_submit:
                split["capture_to_submit"] = statistics.fmean(to_submit)
    finally:
        try:
            if client is not None and opcua is not None:
                opcua.update(stop_client(client, window))
        finally:
            app.stop()  # whatever the client did: a running appliance would keep this process alive
        sub.loop_stop()
        sub.disconnect()
        if counter is not None:
            counter.loop_stop()
            counter.disconnect()
        shutil.rmtree(shm_root, ignore_errors=True)
    return len(got) / elapsed, got


@dataclass(frozen=True)
class Options:
    """What ``appliance bench e2e`` was asked to run."""

    seconds: float  # measuring time per alternative
    cameras: int
    fps: float | None  # per camera; None: together OFFERED_VS_DETECTOR times the detector alone's rate
    latency_fps: float
    triton_home: Path | None
    analytics: bool
    opcua: bool = False
    viewer: bool = False
    record: bool = False
    restream: bool = False
    profile: bool = False


def parse_args(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(prog="appliance bench e2e", description=plain_help(__doc__))
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring time per alternative")
    parser.add_argument("--cameras", type=int, default=4)
    parser.add_argument("--fps", type=float, default=None,
                        help="frames each camera plays per second; by default together 1.5x the detector alone's "
                             "rate measured first, so the appliance is measured at capacity, not at what it is fed")
    parser.add_argument("--latency-fps", type=float, default=4.0, help="the one camera's rate in the latency run")
    parser.add_argument("--quick", action="store_true", help="8 s per alternative")
    parser.add_argument("--triton-home", type=Path, default=None)
    parser.add_argument("--analytics", action="store_true",
                        help="also run the appliance with analytics on every camera (tracking, a zone, a line, "
                             "snapshots); ends with e2e_analytics_vs_detector_alone=<ratio>")
    parser.add_argument("--opcua", action="store_true",
                        help="also run it with analytics and the OPC UA server, one client subscribed to every "
                             "camera variable and result event (implies --analytics); ends with "
                             "e2e_opcua_vs_without=<ratio>")
    parser.add_argument("--viewer", action="store_true",
                        help="only the appliance with its page served: nobody watching, one viewer on cam0's live "
                             "view, nobody again; ends with e2e_viewer_vs_unwatched=<ratio>")
    parser.add_argument("--record", action="store_true",
                        help="only the appliance with recording off and on, alternated, for the file camera and "
                             "the same frames as a raw (images) camera; ends with e2e_record_vs_off=<ratio> and "
                             "e2e_record_raw_vs_off=<ratio>")
    parser.add_argument("--restream", action="store_true",
                        help="only the appliance with the restream off, on and unwatched, with one and with four "
                             "RTSP clients; ends with e2e_restream_unwatched_vs_off=<ratio>")
    parser.add_argument("--profile", action="store_true",
                        help="also profile the appliance's run at capacity (py-spy and /proc; it adds the sampler's "
                             "load to that run): a table of CPU by part, then profile_<part>_ms_per_frame=<ms>")
    args = parser.parse_args(argv)
    return Options(8.0 if args.quick else args.seconds, args.cameras, args.fps, args.latency_fps, args.triton_home,
                   args.analytics or args.opcua, args.opcua, args.viewer, args.record, args.restream,
                   args.profile)


@dataclass(frozen=True)
class _Rate:
    """One alternative as the subscriber saw it: results/s and capture→subscriber latencies in ms."""

    fps: float
    latencies: list[float]


@dataclass(frozen=True)
class _Results:
    detector_fps: tuple[float, float]  # the detector alone, measured before and after the others
    detector_p50: float
    detector_paced_p50: float  # paced at the latency run's rate
    detector_plus_decode: tuple[float, float]  # the detector alone while the cameras decode: frames/s, p50 ms
    offered_fps: float  # per camera
    naive: _Rate
    appliance: _Rate  # the cameras at capacity, in-graph pre/post
    python_stages: _Rate  # the same with the Python pre/post stages
    analytics: _Rate | None  # the same with analytics, when asked for
    analytics_counts: dict[str, int]  # events and snapshot messages in the analytics run's window
    opcua: _Rate | None  # the analytics run again, twice, with the OPC UA server and a subscribed client
    opcua_without: _Rate | None  # then the analytics run once more without it
    opcua_counts: dict[str, int]  # what that client received: data changes and result events
    latency: _Rate  # one camera below capacity
    in_graph_split: dict[str, float]
    python_split: dict[str, float]
    latency_split: dict[str, float]
    profile: list[str]  # the --profile table and its key=value lines; empty without it


def main(argv: list[str]) -> int:
    return run(parse_args(argv))


def run(opts: Options) -> int:
    """Every alternative, then the table and the ratios on stdout. BAD_INPUT (the reason on stderr): no detector,
    or no tritonserver for the naive design."""
    from appliance.capture.sample import ensure_sample_video
    from appliance.detector.prepost.pipeline import Preprocessor
    from appliance.detector.profile import load_profile
    from appliance.triton import stubmalloc, stubsite
    from appliance.triton.locate import locate

    onnx = models_dir() / "yolov3-tiny" / "model.onnx"
    if not onnx.exists():
        print(f"error: {onnx} is missing; run scripts/setup.sh", file=sys.stderr)
        return ExitCode.BAD_INPUT
    dist = locate(opts.triton_home)
    if dist.server_binary is None:
        print(f"error: {dist.home} ships no bin/tritonserver for the naive design", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if stubsite.needed():
        stubsite.ensure()
    stubmalloc.keep_frame_blocks()  # every alternative's processes alike, not only those after the first server
    video = ensure_sample_video(models_dir() / "sample" / "sample.mp4")
    profile = load_profile(PROFILE)
    pre = Preprocessor(profile)
    tensors = [pre.frame(f, "BGR")[0] for f in video_frames(video, every=4)]
    if opts.viewer or opts.record or opts.restream:
        return _viewer(opts, onnx, video, tensors)
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp:
        results = _measure(opts, Path(tmp), onnx, dist, video, profile, tensors)
    _print_report(opts, video, results)
    return 0


def _viewer(opts: Options, onnx: Path, video: Path, tensors: list[np.ndarray]) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp:
        broker = start_local_broker(Path(tmp))
        try:
            fps = opts.fps or math.ceil(OFFERED_VS_DETECTOR * bench_detector(onnx, tensors, opts.seconds / 2)[0]
                                        / opts.cameras)
            compare = record_vs_off if opts.record else alternate if opts.restream else side_by_side
            lines = compare(bench_appliance, Path(tmp), video, broker.port, opts.cameras, fps, opts.seconds)
        finally:
            broker.stop()
    mode = "--record" if opts.record else "--restream" if opts.restream else "--viewer"
    print(f"e2e {mode} on {video.name} (640x480), {opts.cameras} cameras x {fps:g} fps offered, "
          f"{os.cpu_count()} CPUs, {opts.seconds:g} s per run, load average {os.getloadavg()[0]:.1f} at the end")
    print("\n".join(lines))
    return 0


def _measure(opts: Options, workdir: Path, onnx: Path, dist: Any, video: Path, profile: Any,
             tensors: list[np.ndarray]) -> _Results:
    """Every alternative in turn, the appliance's runs one after another under the same load."""
    from appliance.detector.repository.materialize import DetectorSource, materialize

    seconds = opts.seconds
    # the naive design sends preprocessed tensors to the plain detector: no in-graph pre/post
    repo = materialize(profile, DetectorSource(kind="onnxruntime", path=onnx, in_graph="off"), workdir / "repo")
    python_engines = python_stages_engines(workdir)
    broker = start_local_broker(workdir)
    port = broker.port
    try:
        det_fps_a, det_p50 = bench_detector(onnx, tensors, seconds / 2)
        # Offered below capacity, the appliance's rate is the offered rate and its ratios say nothing.
        offered_fps = (opts.fps if opts.fps is not None
                       else math.ceil(OFFERED_VS_DETECTOR * det_fps_a / opts.cameras))
        plus_decode = bench_detector_plus_decode(camera_configs(video, opts.cameras, offered_fps), onnx, tensors,
                                                 seconds / 2)
        naive = _Rate(*bench_naive(repo, dist, video, port, seconds, workdir))
        in_graph_split: dict[str, float] = {}
        profile = Profile(workdir, broker.pid) if opts.profile else None
        app = _Rate(*bench_appliance(workdir, video, port, opts.cameras, offered_fps, seconds, in_graph_split,
                                     profile=profile))
        python_split: dict[str, float] = {}
        python = _Rate(*bench_appliance(workdir, video, port, opts.cameras, offered_fps, seconds, python_split,
                                        engines_dir=python_engines))
        counts: dict[str, int] = {}
        analytics = None
        if opts.analytics:  # right after the plain appliance: the two compare under the same load
            analytics = _Rate(*bench_appliance(workdir, video, port, opts.cameras, offered_fps, seconds,
                                               analytics=counts))
        opcua_counts: dict[str, int] = {}
        opcua, without_again = None, None
        if opts.opcua:  # A B B A, the analytics run the first A: a drift in the machine's load cancels out
            runs = [bench_appliance(workdir, video, port, opts.cameras, offered_fps, seconds, analytics={},
                                    opcua=opcua_counts) for _ in range(2)]
            opcua = _Rate(sum(r[0] for r in runs) / 2, runs[0][1] + runs[1][1])
            without_again = _Rate(*bench_appliance(workdir, video, port, opts.cameras, offered_fps, seconds,
                                                   analytics={}))
        split: dict[str, float] = {}
        latency = _Rate(*bench_appliance(workdir, video, port, 1, opts.latency_fps, seconds, split))
        det_fps_b, _ = bench_detector(onnx, tensors, seconds / 2)
        _, det_paced_p50 = bench_detector(onnx, tensors, seconds, pace_fps=opts.latency_fps)
    finally:
        broker.stop()
    return _Results((det_fps_a, det_fps_b), det_p50, det_paced_p50, plus_decode, offered_fps, naive, app, python,
                    analytics, counts, opcua, without_again, opcua_counts, latency, in_graph_split, python_split,
                    split, profile.lines if profile is not None else [])


def _rows(opts: Options, r: _Results) -> list[tuple[str, float | None, float, float | None]]:
    """The table's rows: (alternative, results/s, p50 ms, p99 ms)."""
    det_fps_a, det_fps_b = r.detector_fps
    det_fps = (det_fps_a + det_fps_b) / 2
    naive, app, py, lat = r.naive.latencies, r.appliance.latencies, r.python_stages.latencies, r.latency.latencies
    rows: list[tuple[str, float | None, float, float | None]] = [
        (f"detector alone (ONNX Runtime, preprocessed, batch 1; {det_fps_a:.1f} then {det_fps_b:.1f})",
         det_fps, r.detector_p50, None),
        (f"detector alone, paced at {opts.latency_fps:g} fps (compute time only)", None, r.detector_paced_p50, None),
        (f"detector + decode ({opts.cameras} cameras x {r.offered_fps:g} fps decoding, frames unread)",
         r.detector_plus_decode[0], r.detector_plus_decode[1], None),
        ("naive (OpenCV client + tritonclient HTTP to tritonserver, QoS 1)", r.naive.fps, pct(naive, 0.5),
         pct(naive, 0.99)),
        (f"appliance ({opts.cameras} cameras x {r.offered_fps:g} fps offered, capture to subscriber)", r.appliance.fps,
         pct(app, 0.5), pct(app, 0.99)),
        (f"appliance, Python pre/post stages ({opts.cameras} cameras, as above)", r.python_stages.fps, pct(py, 0.5),
         pct(py, 0.99)),
        (f"appliance (1 camera x {opts.latency_fps:g} fps, below capacity)", None, pct(lat, 0.5), pct(lat, 0.99)),
    ]
    if r.analytics is not None:
        an = r.analytics.latencies
        rows.insert(5, (f"appliance + analytics ({opts.cameras} cameras, {r.analytics_counts['events']} events, "
                        f"{r.analytics_counts['snapshot']} snapshots)",
                        r.analytics.fps, pct(an, 0.5), pct(an, 0.99)))
    if r.opcua is not None:
        op = r.opcua.latencies
        rows.insert(6, (f"appliance + analytics + OPC UA client (twice; last: {r.opcua_counts.get('changes')} "
                        f"changes, {r.opcua_counts.get('events')} events)", r.opcua.fps, pct(op, 0.5), pct(op, 0.99)))
    return rows


def _print_report(opts: Options, video: Path, r: _Results) -> None:
    det_fps = (r.detector_fps[0] + r.detector_fps[1]) / 2
    app_fps, py_fps, naive_fps = r.appliance.fps, r.python_stages.fps, r.naive.fps
    app_lat, split = r.latency.latencies, r.latency_split
    print(f"e2e on {video.name} (640x480), {os.cpu_count()} CPUs, {opts.seconds:g} s per alternative, "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print(f"{'alternative':<62}{'results/s':>10}{'p50 ms':>9}{'p99 ms':>9}")
    for label, fps, p50, p99 in _rows(opts, r):
        cells = [f"{fps:>10.1f}" if fps is not None else f"{'':>10}", f"{p50:>9.1f}",
                 f"{p99:>9.1f}" if p99 is not None else f"{'':>9}"]
        print(f"{label:<62}{''.join(cells)}")
    offered = opts.cameras * r.offered_fps
    if app_fps >= 0.95 * offered:
        print(f"note: the appliance kept up with all {offered:g} frames/s it was offered, so it was not measured at "
              f"capacity and the ratios below are floors; offer more with --fps")
    for line in r.profile:
        print(line)
    print(split_line(split, statistics.fmean(app_lat) if app_lat else float("nan")))
    if "detector:inside" in split:  # the detector's compute measured inside the appliance, in the same run
        print(f"latency_beyond_detector_compute_same_run_p50_ms={pct(app_lat, 0.5) - split['detector:inside']:.1f}")
    print(f"latency_overhead_p50_ms={pct(app_lat, 0.5) - r.detector_paced_p50:.1f}")
    for design, stage_split in (("python_stages", r.python_split), ("in_graph", r.in_graph_split)):
        print(f"stage_ms_{design}_{opts.cameras}cam " + " ".join(
            f"{stage}={stage_split.get(f'{stage}:inside', float('nan')):.2f}" for stage in STAGES))
    print(f"e2e_python_stages_vs_detector_alone={py_fps / det_fps:.2f}")
    print(f"in_graph_vs_python_stages_e2e={app_fps / py_fps:.2f}")
    # What e2e_vs_naive would be if the appliance matched the detector alone: where the detector is most of the
    # naive loop's time (a CPU host), no pipeline can go far past it.
    print(f"detector_alone_vs_naive={det_fps / naive_fps:.2f}")
    print(f"e2e_vs_naive={app_fps / naive_fps:.2f}")
    print(f"e2e_vs_detector_plus_decode={app_fps / r.detector_plus_decode[0]:.2f}")
    print(f"e2e_vs_detector_alone={app_fps / det_fps:.2f}")
    if r.analytics is not None:
        print(f"e2e_analytics_vs_e2e={r.analytics.fps / app_fps:.2f}")
        print(f"e2e_analytics_vs_detector_alone={r.analytics.fps / det_fps:.2f}")
    if r.opcua is not None and r.analytics is not None:
        assert r.opcua_without is not None
        without = (r.analytics.fps + r.opcua_without.fps) / 2
        print(f"OPC UA runs, results/s: without {r.analytics.fps:.2f}, with (mean of two) {r.opcua.fps:.2f}, "
              f"without {r.opcua_without.fps:.2f}")
        for key in ("changes", "events", "cpu_ms", "server_cpu_ms"):  # the client's; the server thread's in the window
            print(f"opcua_{key}={r.opcua_counts.get(key, -1)}")
        print(f"e2e_opcua_vs_without={r.opcua.fps / without:.3f}")
