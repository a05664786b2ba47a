#!/usr/bin/env python3
"""Soak: the real appliance for N minutes under disruption, then what it lost, duplicated and leaked.

    .venv/bin/python scripts/soak.py --minutes 30

Runs its own mosquitto (persistence on, so a restart keeps queued messages), 4 cameras (3 playing the sample video,
cam4 an RTSP camera served by gst-rtsp-server) and `appliance run --config <generated>` as a real process under a
NOTIFY_SOCKET. A paho subscriber with a persistent session (MQTT 5, clean_start False) records every detections
message. On a schedule spread over the run (fractions of --minutes) it kills the RTSP camera and brings it back,
restarts the broker (stop, --broker-down-s, start on the same port), disconnects its own subscriber for --outage-s,
SIGKILLs the daemon and starts it again, pushes one signed OTA bundle (the same detector as version 2, by
`appliance ota push`), and kills the camera once more. It samples the daemon's RSS and open fds every --sample-s.
At the end it stops the daemon with SIGTERM and reports, key=value lines last: per camera messages received, lost
and duplicated (checks in soakcheck.py), leftover /dev/shm entries and processes, RSS/fd growth per
daemon incarnation, and the soak_* totals. Exit 0 when nothing was lost or leaked, 1 otherwise. Not part of CI
(docs/supervisor.md, "Soak"). The stand-ins it runs (the RTSP camera, the notify socket, the signed bundle) are
appliance.harness, which the tests use too; nothing here comes from tests/.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import yaml
from soakcheck import check_messages, growth
from soakparts import Daemon, Recorder, sampler

from appliance.capture.sample import ensure_sample_video
from appliance.harness.bundle import detector_bundle
from appliance.harness.localbroker import LocalBroker
from appliance.harness.processes import running
from appliance.harness.rtsp import RtspServer
from appliance.ota.signing import generate_keypair
from appliance.paths import models_dir
from appliance.triton.stubs import StubScanner, region_server_pid

REPO = Path(__file__).resolve().parents[1]

# A live H.264 test pattern that never ends (a file would reach EOS and make the camera reconnect on its own).
RTSP_LAUNCH = ("( videotestsrc is-live=true pattern=ball ! video/x-raw,width=640,height=480,framerate={fps}/1 ! "
               "x264enc tune=zerolatency speed-preset=ultrafast key-int-max={fps} ! "
               "rtph264pay name=pay0 pt=96 config-interval=1 )")
# When each disruption happens, as a fraction of the run; each waits for the one before to finish.
SCHEDULE = ((0.15, "camera"), (0.30, "broker"), (0.40, "subscriber"), (0.50, "daemon"), (0.70, "ota"),
            (0.85, "camera"))
OTA_END_STATES = ("active", "rolled_back", "rejected")
# How each disruption's outcome starts when it went as it should; anything else fails the soak.
GOOD_OUTCOMES = {"camera": "back", "broker": "back", "subscriber": "back", "daemon": "pid ", "ota": "active"}


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def write_config(path: Path, device: str, video: Path, rtsp_url: str, broker_port: int, fps: float,
                 shm_root: Path, pubkey: Path) -> None:
    file_cams = [{"id": f"cam{n}", "source": {"type": "file", "path": str(video), "loop": True, "realtime": True},
                  "width": 640, "height": 480, "fps": fps} for n in (1, 2, 3)]
    rtsp_cam = {"id": "cam4", "source": {"type": "rtsp", "url": rtsp_url, "open_timeout_s": 5},
                "width": 640, "height": 480, "resize": True, "fps": fps}
    config = {
        "device": {"id": device},
        "paths": {"state_dir": str(path.parent / "state"), "shm_root": str(shm_root)},
        "cameras": file_cams + [rtsp_cam],
        "mqtt": {"host": "127.0.0.1", "port": broker_port},
        "health": {"port": 0},
        # lenient post-switch checks: this soaks the update path, not the latency of a loaded machine
        "ota": {"trusted_keys": [str(pubkey)],
                "health": {"period_s": 4, "check_interval_s": 0.2, "min_requests": 3, "max_latency_ratio": 50}},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def wait_for(predicate: Callable[[], object], timeout_s: float) -> bool:
    """Whether ``predicate`` came true within ``timeout_s`` (a soak reports a timeout; it does not stop)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def persistent_broker(workdir: Path) -> LocalBroker:
    """mosquitto on a free port that saves its queues (a restart keeps what it queued for the subscriber's session),
    with no cap on queued messages, logging connections to ``workdir``/mosquitto.log."""
    store = workdir / "persist"
    store.mkdir(parents=True)
    return LocalBroker(workdir, config=["log_type error", "log_type warning", "log_type notice",
                                        "log_type information", "connection_messages true", "max_queued_messages 0",
                                        "persistence true", f"persistence_location {store}/", "autosave_interval 1"],
                       log_path=workdir / "mosquitto.log")


class Soak:
    """The parts of one soak run and the disruptions it applies to them."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args, self.workdir = args, workdir
        self.device = f"soak{uuid.uuid4().hex[:6]}"
        self.shm_root = Path("/dev/shm") / f"appliance-soak-{uuid.uuid4().hex[:12]}"
        self.broker = persistent_broker(workdir / "broker")
        self.rtsp = RtspServer(workdir / "none.mp4", launch=RTSP_LAUNCH.format(fps=max(1, round(args.fps))))
        self.recorder = Recorder(self.broker.port, self.device)
        self.daemon = Daemon(workdir / "appliance.yaml", workdir)
        self.events: list[str] = []
        self.failed_events: list[str] = []
        self.ota_done_at: float | None = None  # monotonic; a model switch (and its first engine build) moves RSS
        self.stop_rc: int | None = None

    def setup(self) -> None:
        """Broker, RTSP camera, keys, bundle, config, subscriber: everything but the daemon's start."""
        args, workdir = self.args, self.workdir
        self.shm_root.mkdir()
        video = ensure_sample_video(models_dir() / "sample" / "sample.mp4")
        generate_keypair(workdir / "ota.key", workdir / "ota.pub")
        self.bundle = detector_bundle(workdir, workdir / "ota.key", "2")
        self.broker.start()
        self.rtsp.start()
        write_config(self.daemon.config, self.device, video, self.rtsp.url, self.broker.port, args.fps,
                     self.shm_root, workdir / "ota.pub")
        self.recorder.start()

    def event(self, name: str) -> None:
        t0 = time.monotonic()
        outcome = getattr(self, f"_{name}")()
        if not outcome.startswith(GOOD_OUTCOMES[name]):
            self.failed_events.append(name)
        self.events.append(f"{name}@{t0 - self.t0:.0f}s:{outcome} ({time.monotonic() - t0:.0f} s)")
        say(f"{name}: {outcome}")

    def _camera(self) -> str:
        """SIGKILL the RTSP camera (a camera losing power), bring it back after --outage-s, wait for its frames."""
        self.rtsp.kill()
        time.sleep(self.args.outage_s)
        self.rtsp.start()
        before = self.recorder.count("cam4")
        back = wait_for(lambda: self.recorder.count("cam4") > before, 180)
        return "back" if back else "NOT back after 180 s"

    def _broker(self) -> str:
        """Stop mosquitto (it saves its persistence), keep it down --broker-down-s, start it on the same port."""
        self.broker.stop()
        time.sleep(self.args.broker_down_s)
        self.broker.start()
        before = self.recorder.count()
        return "back" if wait_for(lambda: self.recorder.count() > before, 120) else "no messages after 120 s"

    def _subscriber(self) -> str:
        """Take our own subscriber away for --outage-s: the broker must queue for its persistent session."""
        self.recorder.away(self.args.outage_s)
        before = self.recorder.count()
        return "back" if wait_for(lambda: self.recorder.count() > before, 120) else "no messages after 120 s"

    def _daemon(self) -> str:
        """SIGKILL the daemon, then start it again after 2 s (the unit's RestartSec)."""
        self.daemon.kill()
        time.sleep(2)
        t = time.monotonic()
        inc = self.daemon.start(self.args.ready_timeout_s)
        return f"pid {inc.pid} READY after {time.monotonic() - t:.0f} s"

    def _ota(self) -> str:
        """Push the signed version-2 bundle with the CLI; wait for its end state."""
        done = subprocess.run([sys.executable, "-m", "appliance", "ota", "push", str(self.bundle), "--mqtt",
                               f"127.0.0.1:{self.broker.port}", "--device", self.device, "--chunk-bytes",
                               str(1 << 20), "--sign-key", str(self.workdir / "ota.key")],
                              capture_output=True, text=True, timeout=300, cwd=REPO)
        if done.returncode != 0:
            return f"push failed ({done.returncode}): {done.stderr.strip()[-300:]}"

        def ended() -> list[dict[str, Any]]:
            return [p for p in list(self.recorder.ota) if p.get("version") == "2" and p["state"] in OTA_END_STATES]

        if not wait_for(lambda: bool(ended()), self.args.ota_timeout_s):
            return f"no end state after {self.args.ota_timeout_s:.0f} s"
        last = ended()[-1]
        self.ota_done_at = time.monotonic()
        return last["state"] + (f" ({last.get('code')})" if last.get("code") else "")

    def run(self) -> None:
        say(f"workdir {self.workdir}; broker :{self.broker.port}; camera cam4 {self.rtsp.url}; daemon log "
            f"{self.daemon.log}")
        self.daemon.start(self.args.ready_timeout_s)
        self.t0 = time.monotonic()
        say(f"daemon READY (pid {self.daemon.proc.pid if self.daemon.proc else '?'}); soaking "
            f"{self.args.minutes:g} min")
        stop = threading.Event()
        thread = threading.Thread(target=sampler, args=(self.daemon, self.args.sample_s, stop), daemon=True)
        thread.start()
        total = self.args.minutes * 60
        for fraction, name in SCHEDULE:
            while time.monotonic() - self.t0 < fraction * total:
                time.sleep(0.5)
            self.event(name)
        while time.monotonic() - self.t0 < total:
            time.sleep(0.5)
        say("stopping the daemon (SIGTERM)")
        self.stop_rc = self.daemon.stop()
        stop.set()
        thread.join()
        wait_for(lambda: time.monotonic() - self.recorder.last_at > 5, 60)  # the queue drained

    def leftovers(self) -> tuple[list[str], list[int]]:
        """Our /dev/shm entries and processes still there after the stop (given 10 s to go away)."""
        pids = {inc.pid for inc in self.daemon.incarnations}

        def shm() -> list[str]:
            rings = [str(p) for p in self.shm_root.iterdir()]
            regions = [str(p) for p in Path("/dev/shm").glob("appliance_*") if region_server_pid(p.name) in pids]
            return sorted(rings + regions)

        def procs() -> list[int]:
            stubs = {s.pid for s in StubScanner().scan()
                     if not s.zombie and (s.server_pid in pids or s.ppid in pids)}
            return sorted(stubs | {pid for pid in self.daemon.descendants if running(pid)})

        wait_for(lambda: not shm() and not procs(), 10)
        return shm(), procs()

    def close(self) -> None:
        """Whatever is still running, however the run ended; leftovers are reported before this."""
        if self.daemon.proc is not None and self.daemon.proc.poll() is None:
            self.daemon.proc.kill()
            self.daemon.proc.wait()
        pids = {inc.pid for inc in self.daemon.incarnations}
        for stub in StubScanner().scan():
            if stub.server_pid in pids and not stub.zombie:
                os.kill(stub.pid, signal.SIGKILL)
        for path in Path("/dev/shm").glob("appliance_*"):
            if region_server_pid(path.name) in pids:
                path.unlink(missing_ok=True)
        self.recorder.close()
        self.daemon.notify.close()
        self.rtsp.kill()
        self.broker.stop()
        shutil.rmtree(self.shm_root, ignore_errors=True)


def report(soak: Soak, shm: list[str], procs: list[int]) -> bool:
    """Prints the report, key=value lines last; True when nothing was lost or leaked."""
    checks = check_messages(soak.recorder.seen)
    print(f"\nsoak of {soak.args.minutes:g} min, 4 cameras at {soak.args.fps:g} fps, load average "
          f"{os.getloadavg()[0]:.1f}; subscriber connected {soak.recorder.connects} time(s); "
          f"model versions seen {soak.recorder.versions}; {soak.recorder.malformed} malformed message(s)")
    for line in soak.events:
        print(f"event {line}")
    if any(c.counter == "seq" for cs in checks.values() for c in cs):
        print("note: messages without message_seq/boot_id: lost counts gaps in seq, which are lost OR skipped "
              "frames (latest frame wins), so it is an upper bound")
    lost = dups = redelivered = 0
    for camera, camera_checks in checks.items():
        for c in camera_checks:
            print(f"{camera}_{c.counter}_received={c.received}\n{camera}_{c.counter}_lost={c.lost}\n"
                  f"{camera}_{c.counter}_duplicates={c.duplicates}\n{camera}_{c.counter}_redeliveries={c.redeliveries}"
                  f"\n{camera}_{c.counter}_runs={c.boots}")
            if c.counter == "message_seq":
                print(f"{camera}_unexplained_seq_gaps={c.unexplained_seq_gaps}")
            if c.missing:
                print(f"{camera}_{c.counter}_missing={c.missing[:10]}")
            lost, dups, redelivered = lost + c.lost, dups + c.duplicates, redelivered + c.redeliveries
    rss_growth, fd_growth = 0.0, 0
    for inc in soak.daemon.incarnations:
        rss = ",".join(f"{s.rss_kib / 1024:.0f}" for s in inc.samples)
        fds = ",".join(str(s.fds) for s in inc.samples)
        tree = ",".join(f"{k / 1024:.0f}" for k in inc.tree_rss_kib)
        print(f"daemon{inc.number}_pid={inc.pid}\ndaemon{inc.number}_ended={inc.ended}\n"
              f"daemon{inc.number}_rss_mib={rss}\ndaemon{inc.number}_fds={fds}\ndaemon{inc.number}_tree_rss_mib={tree}")
        g = growth(inc.samples, warmup_s=soak.args.sample_s)
        if soak.ota_done_at is not None and inc.ready_at is not None and soak.ota_done_at > inc.ready_at and (
                inc.samples and inc.samples[-1].t_s > soak.ota_done_at - inc.ready_at):
            # The OTA switch built and loaded a model in this incarnation: a one-time step in RSS (the first
            # in-process engine build maps ONNX Runtime's arenas), not growth. Growth counts from a full
            # --sample-s after the switch; the whole span is printed beside it.
            whole = g
            g = growth(inc.samples, warmup_s=soak.ota_done_at - inc.ready_at + soak.args.sample_s)
            print(f"daemon{inc.number}_rss_step_over_ota_switch_mib="
                  f"{'n/a' if whole is None else f'{whole[0]:.1f}'} (growth below counts after the switch)")
        print(f"daemon{inc.number}_rss_growth_mib={'n/a' if g is None else f'{g[0]:.1f}'}\n"
              f"daemon{inc.number}_fd_growth={'n/a' if g is None else g[1]}")
        if g is not None:
            rss_growth, fd_growth = max(rss_growth, g[0]), max(fd_growth, g[1])
    print(f"daemon_stop_exit={soak.stop_rc}")
    print(f"leaked_shm={shm}\nleaked_processes={procs}")
    print(f"soak_redeliveries={redelivered}")
    print(f"soak_lost_messages={lost}\nsoak_duplicates={dups}\nsoak_leaked_shm={len(shm)}\n"
          f"soak_leaked_stubs={len(procs)}\nsoak_rss_growth_mib={rss_growth:.1f}\nsoak_fd_growth={fd_growth}")
    gaps = sum(c.unexplained_seq_gaps for cs in checks.values() for c in cs if c.counter == "message_seq")
    unexpected_dups = dups - redelivered
    print(f"soak_unexplained_seq_gaps={gaps}\nsoak_failed_events={len(soak.failed_events)}")
    failures = {
        "lost messages": lost, "unexplained seq gaps": gaps, "duplicates that are not redeliveries": unexpected_dups,
        "malformed messages": soak.recorder.malformed, "leaked shm": len(shm), "leaked processes": len(procs),
        f"disruptions that did not end well ({', '.join(soak.failed_events)})": len(soak.failed_events),
        f"RSS growth over {soak.args.max_rss_growth_mib:g} MiB": rss_growth > soak.args.max_rss_growth_mib,
        f"fd growth over {soak.args.max_fd_growth}": fd_growth > soak.args.max_fd_growth,
        f"daemon stop exit {soak.stop_rc}": soak.stop_rc != 0,
    }
    failed = [what for what, bad in failures.items() if bad]
    print("soak: " + ("FAILED: " + "; ".join(failed) if failed else "ok"))
    return not failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="soak time after the first READY")
    parser.add_argument("--fps", type=float, default=2.0, help="frames per second each of the 4 cameras plays")
    parser.add_argument("--sample-s", type=float, default=60.0, help="daemon RSS/fd reading interval")
    parser.add_argument("--outage-s", type=float, default=20.0,
                        help="how long the RTSP camera and the subscriber stay away")
    parser.add_argument("--broker-down-s", type=float, default=5.0, help="how long the broker stays stopped")
    parser.add_argument("--ready-timeout-s", type=float, default=600.0)
    parser.add_argument("--ota-timeout-s", type=float, default=600.0)
    parser.add_argument("--max-rss-growth-mib", type=float, default=16.0,
                        help="largest daemon RSS growth (first full minute to the end) that still passes")
    parser.add_argument("--max-fd-growth", type=int, default=8, help="largest open-fd growth that still passes")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, spool, config)")
    args = parser.parse_args(argv)
    if not (models_dir() / "yolov3-tiny" / "model.onnx").exists():
        print("error: the detector is missing; run scripts/setup.sh", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    soak = Soak(args, workdir)
    try:
        soak.setup()
        soak.run()
        shm, procs = soak.leftovers()
    finally:
        soak.close()
    ok = report(soak, shm, procs)
    if args.keep:
        print(f"workdir kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
