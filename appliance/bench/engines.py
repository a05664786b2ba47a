"""fp32 against int8 on this CPU, the detector alone and the whole appliance, in one run on the same real frames.

``appliance bench engines`` builds the int8 engine exactly as ``build-engines`` would, runs its detection gate,
then times the detectors alone and the Triton ensembles in alternating rounds; ratios are medians of per-round
ratios. The last lines are ``int8_recall``, ``appliance_int8_vs_fp32_detector_alone`` and
``int8_vs_fp32_detector`` (docs/engines.md, "Benchmark: appliance bench engines")."""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from appliance.bench.pipeline import Ensemble, Run
from appliance.exitcodes import ExitCode
from appliance.helptext import plain_help
from appliance.paths import engines_dir, models_dir


def _session(path: Path, optimize: bool = True) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                     else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as the appliance's detector runs
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _timed_round(session: Any, feeds: list[dict[str, np.ndarray]]) -> float:
    """ms per frame over one pass of every frame."""
    start = time.perf_counter()
    for feed in feeds:
        session.run(None, feed)
    return (time.perf_counter() - start) * 1e3 / len(feeds)


def _median_ratio(num: list[float], den: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(num, den))


def _build_int8(profile: Any, models_root: Path, work: Path) -> tuple[Path, Any, Any, Any, dict[str, object]]:
    """The int8 model as build-engines makes it (the one TensorRT builds too; here without the pre/post, which the
    ensembles add), its gate report, and the gate frames and model profile."""
    from appliance.detector.engines.acceptance import calibration_frames, gate_frames
    from appliance.detector.engines.builders.ort import OnnxRuntimeBuilder, reference_session
    from appliance.detector.engines.gate import run_gate
    from appliance.detector.engines.onnxinfo import inspect_onnx
    from appliance.detector.engines.quantize import build_int8_model

    int8 = profile.model_copy(update={"onnxruntime": profile.onnxruntime.model_copy(update={"precision": "int8"})})
    onnx = inspect_onnx(int8.onnx_path(models_root))
    calib = calibration_frames(int8, "int8", models_root, work / "state", None)
    builder = OnnxRuntimeBuilder()
    engine = work / "int8.onnx"
    with contextlib.redirect_stdout(sys.stderr):  # ORT's calibrator prints its progress; stdout is the report
        details = build_int8_model(onnx.path, onnx.inputs[0].name, calib, int8.quantization, engine, None)
    model_profile, held_out = gate_frames(int8, models_root, None, calib)
    candidate = builder.load(engine, int8)
    reference = reference_session(onnx.path)

    def ref_run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in reference.get_outputs()]
        return dict(zip(names, reference.run(names, feeds)))

    report = run_gate(candidate.run, ref_run, held_out, model_profile, int8.gate, onnx.inputs[0].name,
                      onnx.outputs[0].name)
    return engine, report, held_out, model_profile, details


@dataclass(frozen=True)
class Options:
    """What ``appliance bench engines`` was asked to run."""

    rounds: int
    frames: int | None  # held-out frames per round; None: all of the gate's
    in_flight: int
    engine_profile: Path
    models_dir: Path
    triton_home: Path | None


def parse_args(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(prog="appliance bench engines", description=plain_help(__doc__))
    parser.add_argument("--quick", action="store_true", help="fewer rounds and frames (a smoke run, noisier)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 7, quick 1)")
    parser.add_argument("--frames", type=int, default=None,
                        help="held-out frames per round (default all of the gate's, quick 4)")
    parser.add_argument("--in-flight", type=int, default=2, help="frames in flight in the ensemble (default 2)")
    parser.add_argument("--engine-profile", type=Path, default=engines_dir() / "yolov3-tiny.yaml")
    parser.add_argument("--models-dir", type=Path, default=models_dir())
    parser.add_argument("--triton-home", type=Path, default=None)
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 7)
    if rounds < 1 or args.in_flight < 1 or (args.frames is not None and args.frames < 1):
        parser.error("--rounds, --frames and --in-flight must be at least 1")
    return Options(rounds, args.frames or (4 if args.quick else None), args.in_flight, args.engine_profile,
                   args.models_dir, args.triton_home)


@dataclass(frozen=True)
class _Frames:
    """One round's held-out frames: preprocessed for the detectors alone, BGR for the ensembles."""

    feeds: list[dict[str, np.ndarray]]
    images: list[np.ndarray]

    @property
    def count(self) -> int:
        return len(self.feeds)


@dataclass(frozen=True)
class _Measured:
    build_s: float
    details: dict[str, object]  # the int8 build's, as build-engines records them
    gate: Any  # the int8 engine's GateReport
    frames: int
    detector: dict[str, list[float]]  # ms per frame in each round, by precision
    appliance: dict[str, Run]  # the ensembles, by precision
    alone: Run  # the fp32 detector alone, in the ensembles' rounds
    layout: str


def main(argv: list[str]) -> int:
    return run(parse_args(argv))


def run(opts: Options) -> int:
    """The bench; its report on stdout. BAD_INPUT (the reason on stderr): no profile, ONNX or frames."""
    from appliance.detector.buildprofile import ProfileError, load_profile
    from appliance.detector.calibration.frames import CalibrationError

    try:
        profile = load_profile(opts.engine_profile)
    except (ProfileError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    onnx_path = profile.onnx_path(opts.models_dir)
    if not onnx_path.is_file():
        print(f"error: {onnx_path} missing; run scripts/setup.sh (or scripts/fetch_detector.py)", file=sys.stderr)
        return ExitCode.BAD_INPUT
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        work = Path(tmp)
        build_start = time.monotonic()
        try:
            engine, report, held_out, model_profile, details = _build_int8(profile, opts.models_dir, work)
        except CalibrationError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ExitCode.BAD_INPUT
        build_s = time.monotonic() - build_start
        count = min(opts.frames or len(held_out.tensors), len(held_out.tensors))
        input_name = _session(onnx_path).get_inputs()[0].name
        frames = _Frames([{input_name: t[None]} for t in held_out.tensors[:count]],
                         [f.image for f in held_out.frames[:count]])
        fp32 = _session(onnx_path)
        detector = _detectors_alone(fp32, _session(engine), frames, opts.rounds)
        ensembles, alone, layout = _appliance_rounds(opts, work, model_profile, {"int8": engine, "fp32": onnx_path},
                                                     frames, fp32, statistics.median(detector["int8"]))
    _print_report(profile.model, opts, _Measured(build_s, details, report, count, detector, ensembles, alone, layout))
    return 0


def _detectors_alone(fp32: Any, int8: Any, frames: _Frames, rounds: int) -> dict[str, list[float]]:
    """ms per frame of each session in each of ``rounds`` alternating rounds, after a warm-up."""
    for s in (fp32, int8):  # warm-up: first runs allocate
        _timed_round(s, frames.feeds[:2])
    det: dict[str, list[float]] = {"fp32": [], "int8": []}
    for i in range(rounds):
        order = ("fp32", "int8") if i % 2 == 0 else ("int8", "fp32")
        for name in order:
            det[name].append(_timed_round(fp32 if name == "fp32" else int8, frames.feeds))
    return det


def _appliance_rounds(opts: Options, work: Path, model_profile: Any, engines: dict[str, Path], frames: _Frames,
                      fp32: Any, frame_ms: float) -> tuple[dict[str, Run], Run, str]:
    """The Triton ensemble on each of ``engines`` against the ``fp32`` detector alone, in alternating rounds, in
    the layout the appliance picks for one camera and a detector taking ``frame_ms``. Returns the ensembles' runs,
    the detector alone's run and the layout's name."""
    from appliance.appconfig.app import ModelConfig, TritonConfig
    from appliance.detector.repository.layout import detector_layout
    from appliance.detector.repository.materialize import DetectorSource, RepositoryOptions, materialize
    from appliance.triton import stubsite
    from appliance.triton.locate import locate
    from appliance.triton.server import Server, ServerOptions

    if stubsite.needed():
        stubsite.ensure()
    layout = detector_layout("onnxruntime", 1, ModelConfig().max_batch_size, frame_ms=frame_ms)
    options = RepositoryOptions(detector_instances=layout.instances, intra_op_threads=layout.intra_op_threads,
                                max_batch_size=layout.max_batch_size, queue_delay_us=0)
    repos = {name: materialize(model_profile, DetectorSource(kind="onnxruntime", path=path), work / "repo",
                               options.model_copy(update={"prefix": f"{name}_"}))
             for name, path in engines.items()}
    server = Server(ServerOptions(repositories=[work / "repo"],
                                  startup_models=[m for r in repos.values() for m in r.models],
                                  backend_config={"python": {"shm-default-byte-size":
                                                             str(TritonConfig().python_shm_bytes)}},
                                  log_warn=False, log_error=False), locate(opts.triton_home))
    server.start(timeout=180)
    try:
        ensembles = {name: Ensemble(server, repo) for name, repo in repos.items()}
        for ens in ensembles.values():
            ens.run(frames.images, 1, 2, Run(), in_flight=opts.in_flight)
        app: dict[str, Run] = {"int8": Run(), "fp32": Run()}
        alone = Run()
        count = frames.count
        steps: list[Callable[[], None]] = [
            lambda: ensembles["int8"].run(frames.images, 1, count, app["int8"], in_flight=opts.in_flight),
            lambda: alone.add(count, _timed_round(fp32, frames.feeds) * count / 1e3),
            lambda: ensembles["fp32"].run(frames.images, 1, count, app["fp32"], in_flight=opts.in_flight),
        ]
        for i in range(opts.rounds):
            for step in (steps if i % 2 == 0 else steps[::-1]):
                step()
    finally:
        server.stop(timeout=60)
    return app, alone, f"{layout.instances}x{layout.intra_op_threads or 'all'}"


def _print_report(model: str, opts: Options, m: _Measured) -> None:
    det = m.detector
    print(f"engines: {model}, ONNX Runtime on {os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} "
          f"at the end); int8 built in {m.build_s:.1f} s from {m.details.get('calibration_frames')} calibration "
          f"frames ({m.details.get('quantization')}; {len(report_float_nodes(m.details))} nodes in float: the decode "
          f"head and quantization.float_nodes); "
          f"{opts.rounds} alternating rounds of {m.frames} held-out frames")
    print(m.gate.summary())
    print(f"{'path':<56} {'ms/frame':>9} {'fps':>7}")
    print(f"{'detector alone fp32 (every core)':<56} {statistics.median(det['fp32']):>9.1f} "
          f"{1e3 / statistics.median(det['fp32']):>7.2f}")
    print(f"{'detector alone int8 (every core)':<56} {statistics.median(det['int8']):>9.1f} "
          f"{1e3 / statistics.median(det['int8']):>7.2f}")
    for name, run in m.appliance.items():
        label = f"appliance ensemble {name} ({m.layout}, 1 camera, {opts.in_flight} in flight)"
        print(f"{label:<56} {1e3 / run.fps:>9.1f} {run.fps:>7.2f}")
    print(f"appliance_fp32_vs_fp32_detector_alone={m.appliance['fp32'].ratio_to(m.alone):.3f}")
    print(f"int8_recall={m.gate.recall:.3f}")
    print(f"appliance_int8_vs_fp32_detector_alone={m.appliance['int8'].ratio_to(m.alone):.3f}")
    print(f"int8_vs_fp32_detector={_median_ratio(det['fp32'], det['int8']):.3f}")


def report_float_nodes(details: dict[str, object]) -> list[object]:
    """The nodes the quantizer left in float, as the build recorded them."""
    nodes = details.get("float_nodes")
    return list(nodes) if isinstance(nodes, list) else []
