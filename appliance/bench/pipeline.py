"""Triton ensemble vs a plain Python loop (letterbox + ONNX Runtime + decode/NMS) on the same frames, 1 and 4 cameras.

``appliance bench pipeline``: the alternatives run in short alternating rounds and a ratio is the median of the
paired per-round ratios, so background load hits them alike. The last line is ``in_graph_vs_python_stages``, the
one before the in-graph lines ``ensemble_vs_plain_loop``; layouts, columns and today's figures: docs/models.md,
"Benchmark: appliance bench pipeline"."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from appliance.detector.profile import ModelProfile
from appliance.detector.repository.materialize import Repository, RepositoryOptions
from appliance.exitcodes import ExitCode
from appliance.helptext import plain_help
from appliance.paths import models_dir, profiles_dir
from appliance.triton.server import Server

IMAGES = Path("/usr/share/darknet/data")
IMAGE_NAMES = ("dog", "person", "horses", "kite", "eagle", "giraffe")


@dataclass
class Run:
    frames: int = 0
    seconds: float = 0.0
    stage_ms: dict[str, float] = field(default_factory=dict)  # summed ms, divided by frames when reported
    round_fps: list[float] = field(default_factory=list)

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds else 0.0

    def add(self, frames: int, seconds: float) -> None:
        self.frames += frames
        self.seconds += seconds
        self.round_fps.append(frames / seconds)

    def ratio_to(self, base: "Run") -> float:
        """Median over rounds of this path's fps over ``base``'s in the same round: rounds run back to back,
        so a burst of load from other processes hits a pair together and the median ignores it."""
        ratios = sorted(a / b for a, b in zip(self.round_fps, base.round_fps))
        mid = len(ratios) // 2
        return ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2

    def per_frame(self, stage: str) -> float:
        return self.stage_ms.get(stage, 0.0) / self.frames if self.frames else 0.0


def _frames() -> list[np.ndarray]:
    frames = []
    for name in IMAGE_NAMES:
        frame = cv2.imread(str(IMAGES / f"{name}.jpg"))
        if frame is None:
            raise SystemExit(f"error: the darknet test images are missing from {IMAGES} (apt package 'darknet')")
        frames.append(frame)
    return frames


class PlainLoop:
    def __init__(self, profile: ModelProfile, onnx_path: Path, spinning: bool) -> None:
        import onnxruntime as ort

        from appliance.detector.prepost.pipeline import Postprocessor, Preprocessor

        self.pre, self.post = Preprocessor(profile), Postprocessor(profile)
        opts = ort.SessionOptions()  # the same session settings the ensemble's detector uses
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        self.session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0].name

    def time_detector(self, frame: np.ndarray) -> float:
        """ms per frame on every core, timed as the engine build times it: what the appliance's layout weighs."""
        from appliance.detector.engines.manager import time_engine

        feeds = {self.input: self.pre.frame(frame, "BGR")[0][None]}
        return time_engine(lambda f: self.session.run(None, f), feeds, batch=1)["frame_ms"]

    def run(self, frames: list[np.ndarray], cameras: int, per_camera: int, into: Run) -> None:
        clock = time.perf_counter
        start = clock()
        for i in range(per_camera):
            for cam in range(cameras):
                frame = frames[(i + cam) % len(frames)]
                t0 = clock()
                tensor, lb = self.pre.frame(frame, "BGR")
                t1 = clock()
                raw = self.session.run(None, {self.input: tensor[None]})[0]
                t2 = clock()
                self.post(raw[0], lb)
                t3 = clock()
                for stage, dt in (("pre", t1 - t0), ("detector", t2 - t1), ("post", t3 - t2)):
                    into.stage_ms[stage] = into.stage_ms.get(stage, 0.0) + dt * 1e3
        into.add(cameras * per_camera, clock() - start)


class Ensemble:
    def __init__(self, server: Server, repo: Repository) -> None:
        self.server, self.repo = server, repo
        self.stages = {"pre": repo.preprocess, "detector": repo.detector, "post": repo.postprocess}

    def _compute_ns(self) -> dict[str, int]:
        """Compute time per model, counted once per execution (a batch of frames counts once)."""
        out = {}
        for stage, model in self.stages.items():
            batches = self.server.model_statistics(model)["model_stats"][0].get("batch_stats", [])
            out[stage] = sum(int(b[k]["ns"]) for b in batches for k in ("compute_input", "compute_infer",
                                                                        "compute_output"))
        return out

    def run(self, frames: list[np.ndarray], cameras: int, per_camera: int, into: Run, in_flight: int = 1,
            total_in_flight: int | None = None) -> None:
        errors: list[BaseException] = []
        total = threading.BoundedSemaphore(total_in_flight or cameras * in_flight)

        def camera(cam: int) -> None:
            try:
                pending: list = []
                for i in range(per_camera):
                    if len(pending) == in_flight:
                        pending.pop(0).result()
                    total.acquire()
                    future = self.server.infer_async(self.repo.ensemble, {"IMAGE": frames[(i + cam) % len(frames)]})
                    future.add_done_callback(lambda _f: total.release())
                    pending.append(future)
                for fut in pending:
                    fut.result()
            except BaseException as exc:  # reported after the threads are joined
                errors.append(exc)

        before = self._compute_ns()
        threads = [threading.Thread(target=camera, args=(c,), daemon=True) for c in range(cameras)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - start
        if errors:
            raise errors[0]
        after = self._compute_ns()
        for stage in self.stages:
            into.stage_ms[stage] = into.stage_ms.get(stage, 0.0) + (after[stage] - before[stage]) / 1e6
        into.add(cameras * per_camera, seconds)


def _table(results: dict[int, dict[str, Run]]) -> str:
    head = (f"{'cameras':>7}  {'path':<40} {'frames':>6} {'fps':>7} {'pre ms':>7} {'det ms':>7} {'post ms':>8}"
            f"  vs plain (median of rounds)")
    lines = [head, "-" * len(head)]
    for cams, runs in results.items():
        plain = runs["plain"]
        for label, r in runs.items():
            ratio = f"{r.ratio_to(plain):5.2f}x" if label != "plain" else ""
            lines.append(f"{cams:>7}  {label:<40} {r.frames:>6} {r.fps:>7.2f} {r.per_frame('pre'):>7.2f} "
                         f"{r.per_frame('detector'):>7.2f} {r.per_frame('post'):>8.2f}  {ratio}")
    return "\n".join(lines)


def _layouts(opts: Options, frame_ms: float) -> tuple[dict[str, RepositoryOptions], dict[int, str], dict[str, int]]:
    """The detector layouts to compare, by name: the one the appliance runs for each camera count when the
    cameras send as fast as they can, as here (appliance.detector.repository.layout, with the detector's
    ``frame_ms``), and
    the lowest-latency one (one instance on every core) beside it; or the one layout the flags describe, for every
    count. Also the name of the appliance's layout per count, and by name the requests in flight in all that keep
    the layout busy (the appliance scheduler's default bound)."""
    from appliance.appconfig.app import ModelConfig
    from appliance.detector.repository.layout import DetectorLayout, detector_layout

    base = RepositoryOptions(ort_spinning=opts.ort_spinning, max_batch_size=ModelConfig().max_batch_size,
                             queue_delay_us=0)
    if opts.preprocess_instances:
        base = base.model_copy(update={"preprocess_instances": opts.preprocess_instances})
    custom = opts.detector_instances or opts.intra_op_threads is not None or opts.max_batch
    if custom:
        layout = DetectorLayout(opts.detector_instances or 1, opts.intra_op_threads or 0,
                                opts.max_batch or base.max_batch_size)
        per_count = {n: layout for n in opts.camera_counts}
        compared = [layout]
    else:
        per_count = {n: detector_layout("onnxruntime", n, base.max_batch_size, frame_ms=frame_ms)
                     for n in opts.camera_counts}
        compared = [DetectorLayout(1, 0, base.max_batch_size), *per_count.values()]
    name = {layout: f"{layout.instances}x{layout.intra_op_threads or 'all'}" for layout in compared}
    options = {}
    for i, layout in enumerate(dict.fromkeys(compared)):
        options[name[layout]] = base.model_copy(update={
            "prefix": f"l{i}_", "detector_instances": layout.instances, "intra_op_threads": layout.intra_op_threads,
            "max_batch_size": layout.max_batch_size})
    caps = {name[layout]: layout.requests_to_keep_busy() for layout in compared}
    return options, {n: name[layout] for n, layout in per_count.items()}, caps


@dataclass(frozen=True)
class Options:
    """What ``appliance bench pipeline`` was asked to run."""

    frames_per_round: int  # all cameras together
    rounds: int
    camera_counts: tuple[int, ...]
    model_dir: Path
    profile: Path
    triton_home: Path | None
    in_flight: int
    preprocess_instances: int | None
    max_batch: int | None  # this, detector_instances or intra_op_threads: one custom layout
    detector_instances: int | None
    intra_op_threads: int | None
    ort_spinning: bool


def parse_args(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(prog="appliance bench pipeline", description=plain_help(__doc__))
    parser.add_argument("--quick", action="store_true", help="fewer frames (a smoke run, noisier numbers)")
    parser.add_argument("--frames", type=int, default=None, help="frames per round (all cameras together)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating plain/ensemble rounds")
    parser.add_argument("--cameras", default="1,4", help="comma-separated camera counts (default 1,4)")
    parser.add_argument("--model-dir", type=Path, default=models_dir() / "yolov3-tiny")
    parser.add_argument("--profile", type=Path, default=profiles_dir() / "yolov3-tiny.yaml")
    parser.add_argument("--triton-home", type=Path, default=None)
    parser.add_argument("--in-flight", type=int, default=2,
                        help="frames each camera keeps in flight in the pipelined ensemble run (default 2)")
    parser.add_argument("--preprocess-instances", type=int, default=None,
                        help="preprocess instances in the ensemble (default: the materializer's)")
    parser.add_argument("--max-batch", type=int, default=None,
                        help="one custom layout: the detector's max_batch_size")
    parser.add_argument("--detector-instances", type=int, default=None,
                        help="one custom layout: detector instances (default: compare the appliance's layouts)")
    parser.add_argument("--intra-op-threads", type=int, default=None,
                        help="one custom layout: ONNX Runtime threads per detector instance (0 = all cores)")
    parser.add_argument("--ort-spinning", action="store_true",
                        help="let ONNX Runtime threads spin when idle (both paths; default off for both)")
    args = parser.parse_args(argv)
    camera_counts = tuple(int(c) for c in args.cameras.split(",") if c.strip())
    if not camera_counts or min(camera_counts) < 1:
        parser.error("--cameras needs positive counts, e.g. 1,4")
    if args.in_flight < 1:
        parser.error("--in-flight must be at least 1")
    return Options(args.frames or (8 if args.quick else 16), args.rounds or (2 if args.quick else 10), camera_counts,
                   args.model_dir, args.profile, args.triton_home, args.in_flight, args.preprocess_instances,
                   args.max_batch, args.detector_instances, args.intra_op_threads, args.ort_spinning)


def main(argv: list[str]) -> int:
    return run(parse_args(argv))


def run(opts: Options) -> int:
    """The rounds, then the table and the ratios on stdout. BAD_INPUT (the reason on stderr): no detector."""
    onnx_path = opts.model_dir / "model.onnx"
    if not onnx_path.is_file():
        print(f"error: {onnx_path} missing; run scripts/setup.sh (or scripts/fetch_detector.py)", file=sys.stderr)
        return ExitCode.BAD_INPUT

    from appliance.appconfig.app import TritonConfig
    from appliance.detector.profile import load_profile
    from appliance.detector.repository.materialize import DetectorSource, materialize
    from appliance.triton import stubsite
    from appliance.triton.locate import locate
    from appliance.triton.server import ServerOptions

    profile = load_profile(opts.profile)
    frames = _frames()
    plain = PlainLoop(profile, onnx_path, opts.ort_spinning)
    if stubsite.needed():
        stubsite.ensure()
    frame_ms = plain.time_detector(frames[0])
    shm_bytes = TritonConfig().python_shm_bytes  # the stubs' shared memory as the appliance sizes it
    layouts, appliance_layout, caps = _layouts(opts, frame_ms)
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        repos = {name: materialize(profile, DetectorSource(kind="onnxruntime", path=onnx_path), Path(tmp) / "repo",
                                   lay) for name, lay in layouts.items()}
        python = DetectorSource(kind="onnxruntime", path=onnx_path, in_graph="off")
        repos.update({f"{name}-py": materialize(profile, python, Path(tmp) / "repo", lay.model_copy(
            update={"prefix": f"py{lay.prefix}"})) for name, lay in layouts.items()})
        caps.update({f"{name}-py": caps[name] for name in layouts})
        # Triton's CUDA warnings/errors on a CPU host are noise here; failures still raise.
        server = Server(ServerOptions(repositories=[Path(tmp) / "repo"],
                                      startup_models=[m for r in repos.values() for m in r.models],
                                      backend_config={"python": {"shm-default-byte-size": str(shm_bytes)}},
                                      log_warn=False, log_error=False), locate(opts.triton_home))
        server.start(timeout=180)
        try:
            results = _rounds(opts, plain, {name: Ensemble(server, repo) for name, repo in repos.items()}, frames,
                              caps)
        finally:
            server.stop(timeout=60)
    print(_header(opts, profile, len(frames), frame_ms, appliance_layout, caps))
    print(_table(results))
    _print_ratios(opts, appliance_layout, results)
    return 0


def _rounds(opts: Options, plain: PlainLoop, ensembles: dict[str, Ensemble], frames: list[np.ndarray],
            caps: dict[str, int]) -> dict[int, dict[str, Run]]:
    """After a warm-up, per camera count: ``opts.rounds`` rounds of the plain loop and of every ensemble at each
    depth in flight (pipelined runs bounded in all by ``caps``). The runs by camera count, then by path."""
    warm = Run()
    plain.run(frames, 1, 2, warm)
    for ensemble in ensembles.values():
        ensemble.run(frames, max(opts.camera_counts), 2, warm, in_flight=opts.in_flight)
    depths = sorted({1, opts.in_flight})
    results: dict[int, dict[str, Run]] = {}
    for cams in opts.camera_counts:
        per_camera = max(1, -(-opts.frames_per_round // cams))
        runs = results[cams] = {"plain": Run()}
        for name in ensembles:
            for depth in _depths(name, depths, opts.in_flight):
                runs[f"ensemble {name}, {depth} in flight"] = Run()
        for _ in range(opts.rounds):
            plain.run(frames, cams, per_camera, runs["plain"])
            for name, ensemble in ensembles.items():
                for depth in _depths(name, depths, opts.in_flight):
                    ensemble.run(frames, cams, per_camera, runs[f"ensemble {name}, {depth} in flight"],
                                 in_flight=depth, total_in_flight=caps[name] if depth > 1 else None)
    return results


def _header(opts: Options, profile: ModelProfile, images: int, frame_ms: float, appliance_layout: dict[int, str],
            caps: dict[str, int]) -> str:
    return (f"pipeline: {profile.name} {profile.input.width}x{profile.input.height}, {images} darknet test images, "
            f"{opts.rounds} alternating rounds of about {opts.frames_per_round} frames, {os.cpu_count()} CPUs, load "
            f"average {os.getloadavg()[0]:.1f} at the end; per-stage columns: ms per frame; layouts: detector "
            f"instances x ONNX Runtime threads each (the detector alone: {frame_ms:.1f} ms per frame on every core; "
            f"cameras here send as fast as they can, so the appliance runs "
            f"{'/'.join(dict.fromkeys(appliance_layout.values()))}); pipelined runs keep at most "
            f"{', '.join(f'{n} ({name})' for name, n in caps.items() if not name.endswith('-py'))} frames in flight "
            "in all, as the appliance does; <layout>-py: the Python pre/post stages instead of the in-graph ones")


def _print_ratios(opts: Options, appliance_layout: dict[int, str], results: dict[int, dict[str, Run]]) -> None:
    """Every ensemble against the plain loop, the appliance's layout's headline, and in-graph against the Python
    stages: key=value lines, the headlines last."""
    for cams, runs in results.items():
        for label, run in runs.items():
            if label != "plain":
                key = label.replace("ensemble ", "").replace(", ", "_").replace(" in flight", "_in_flight")
                print(f"ensemble_{key}_vs_plain_loop_{cams}cam={run.ratio_to(runs['plain']):.3f}")
    headline = {}
    for cams, runs in results.items():
        name = appliance_layout[cams]
        headline[cams] = runs[f"ensemble {name}, {opts.in_flight} in flight"].ratio_to(runs["plain"])
        print(f"appliance_layout_{cams}cam={name} ensemble_vs_plain_loop_{cams}cam={headline[cams]:.3f}")
    print(f"ensemble_vs_plain_loop={headline[max(opts.camera_counts)]:.3f}")
    in_graph = {}
    for cams, runs in results.items():
        name = appliance_layout[cams]
        after, before = (runs[f"ensemble {n}, {opts.in_flight} in flight"] for n in (name, f"{name}-py"))
        for label, r in (("python_stages", before), ("in_graph", after)):
            print(f"stage_ms_{cams}cam_{label} pre={r.per_frame('pre'):.2f} detector={r.per_frame('detector'):.2f} "
                  f"post={r.per_frame('post'):.2f}")
        in_graph[cams] = after.ratio_to(before)
        print(f"in_graph_vs_python_stages_{cams}cam={in_graph[cams]:.3f}")
    print(f"in_graph_vs_python_stages={in_graph[max(opts.camera_counts)]:.3f}")


def _depths(name: str, depths: list[int], in_flight: int) -> list[int]:
    """The Python-stages variants run pipelined only (the comparison with in-graph is the appliance's way)."""
    return [in_flight] if name.endswith("-py") else depths
