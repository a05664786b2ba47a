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
from pathlib import Path
from typing import Any, Callable

import numpy as np

from appliance.bench.pipeline import Ensemble, Run
from appliance.exitcodes import ExitCode
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
    """The int8 engine as build-engines makes it, its gate report, and the gate frames and model profile."""
    from appliance.detector.engines.acceptance import calibration_frames, gate_frames
    from appliance.detector.engines.builders.ort import OnnxRuntimeBuilder, reference_session
    from appliance.detector.engines.gate import run_gate
    from appliance.detector.engines.onnxinfo import inspect_onnx

    int8 = profile.model_copy(update={"onnxruntime": profile.onnxruntime.model_copy(update={"precision": "int8"})})
    onnx = inspect_onnx(int8.onnx_path(models_root))
    calib = calibration_frames(int8, "int8", models_root, work / "state", None)
    builder = OnnxRuntimeBuilder()
    engine = work / "int8.onnx"
    with contextlib.redirect_stdout(sys.stderr):  # ORT's calibrator prints its progress; stdout is the report
        details = builder.build(onnx, int8, engine, lambda _f, _m: None, work, calibration=calib)
    model_profile, held_out = gate_frames(int8, models_root, None, calib)
    candidate = builder.load(engine, int8)
    reference = reference_session(onnx.path)

    def ref_run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in reference.get_outputs()]
        return dict(zip(names, reference.run(names, feeds)))

    report = run_gate(candidate.run, ref_run, held_out, model_profile, int8.gate, onnx.inputs[0].name,
                      onnx.outputs[0].name)
    return engine, report, held_out, model_profile, details


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="appliance bench engines", description=__doc__.splitlines()[0])
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

    from appliance.appconfig.app import ModelConfig, TritonConfig
    from appliance.detector.calibration.frames import CalibrationError
    from appliance.detector.buildprofile import ProfileError, load_profile
    from appliance.detector.repository.layout import detector_layout
    from appliance.detector.repository.materialize import DetectorSource, RepositoryOptions, materialize
    from appliance.triton import stubsite
    from appliance.triton.locate import locate
    from appliance.triton.server import Server, ServerOptions

    try:
        profile = load_profile(args.engine_profile)
    except (ProfileError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    onnx_path = profile.onnx_path(args.models_dir)
    if not onnx_path.is_file():
        print(f"error: {onnx_path} missing; run scripts/setup.sh (or scripts/fetch_detector.py)", file=sys.stderr)
        return ExitCode.BAD_INPUT
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        work = Path(tmp)
        build_start = time.monotonic()
        try:
            engine, report, held_out, model_profile, details = _build_int8(profile, args.models_dir, work)
        except CalibrationError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ExitCode.BAD_INPUT
        build_s = time.monotonic() - build_start
        count = min(args.frames or (4 if args.quick else len(held_out.tensors)), len(held_out.tensors))
        input_name = _session(onnx_path).get_inputs()[0].name
        feeds = [{input_name: t[None]} for t in held_out.tensors[:count]]
        images = [f.image for f in held_out.frames[:count]]
        fp32, int8 = _session(onnx_path), _session(engine)
        for s in (fp32, int8):  # warm-up: first runs allocate
            _timed_round(s, feeds[:2])
        det: dict[str, list[float]] = {"fp32": [], "int8": []}
        for i in range(rounds):
            order = ("fp32", "int8") if i % 2 == 0 else ("int8", "fp32")
            for name in order:
                det[name].append(_timed_round(fp32 if name == "fp32" else int8, feeds))
        int8_vs_fp32 = _median_ratio(det["fp32"], det["int8"])

        if stubsite.needed():
            stubsite.ensure()
        batch = ModelConfig().max_batch_size
        layout = detector_layout("onnxruntime", 1, batch, frame_ms=statistics.median(det["int8"]))
        options = RepositoryOptions(detector_instances=layout.instances, intra_op_threads=layout.intra_op_threads,
                                    max_batch_size=layout.max_batch_size, queue_delay_us=0)
        repos = {name: materialize(model_profile, DetectorSource(kind="onnxruntime", path=path), work / "repo",
                                   options.model_copy(update={"prefix": f"{name}_"}))
                 for name, path in (("int8", engine), ("fp32", onnx_path))}
        server = Server(ServerOptions(repositories=[work / "repo"],
                                      startup_models=[m for r in repos.values() for m in r.models],
                                      backend_config={"python": {"shm-default-byte-size":
                                                                 str(TritonConfig().python_shm_bytes)}},
                                      log_warn=False, log_error=False), locate(args.triton_home))
        server.start(timeout=180)
        try:
            ensembles = {name: Ensemble(server, repo) for name, repo in repos.items()}
            for ens in ensembles.values():
                ens.run(images, 1, 2, Run(), in_flight=args.in_flight)
            app: dict[str, Run] = {"int8": Run(), "fp32": Run()}
            alone = Run()
            steps: list[Callable[[], None]] = [
                lambda: ensembles["int8"].run(images, 1, count, app["int8"], in_flight=args.in_flight),
                lambda: alone.add(count, _timed_round(fp32, feeds) * count / 1e3),
                lambda: ensembles["fp32"].run(images, 1, count, app["fp32"], in_flight=args.in_flight),
            ]
            for i in range(rounds):
                for step in (steps if i % 2 == 0 else steps[::-1]):
                    step()
        finally:
            server.stop(timeout=60)

    app_int8 = app["int8"].ratio_to(alone)
    app_fp32 = app["fp32"].ratio_to(alone)
    layout_name = f"{layout.instances}x{layout.intra_op_threads or 'all'}"
    print(f"engines: {profile.model}, ONNX Runtime on {os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} "
          f"at the end); int8 built in {build_s:.1f} s from {details.get('calibration_frames')} calibration "
          f"frames ({details.get('quantization')}; {len(report_float_nodes(details))} nodes in float: the decode "
          f"head and onnxruntime.float_nodes); "
          f"{rounds} alternating rounds of {count} held-out frames")
    print(report.summary())
    print(f"{'path':<56} {'ms/frame':>9} {'fps':>7}")
    print(f"{'detector alone fp32 (every core)':<56} {statistics.median(det['fp32']):>9.1f} "
          f"{1e3 / statistics.median(det['fp32']):>7.2f}")
    print(f"{'detector alone int8 (every core)':<56} {statistics.median(det['int8']):>9.1f} "
          f"{1e3 / statistics.median(det['int8']):>7.2f}")
    for name, run in app.items():
        label = f"appliance ensemble {name} ({layout_name}, 1 camera, {args.in_flight} in flight)"
        print(f"{label:<56} {1e3 / run.fps:>9.1f} {run.fps:>7.2f}")
    print(f"appliance_fp32_vs_fp32_detector_alone={app_fp32:.3f}")
    print(f"int8_recall={report.recall:.3f}")
    print(f"appliance_int8_vs_fp32_detector_alone={app_int8:.3f}")
    print(f"int8_vs_fp32_detector={int8_vs_fp32:.3f}")
    return 0


def report_float_nodes(details: dict[str, object]) -> list[object]:
    """The nodes the quantizer left in float, as the build recorded them."""
    nodes = details.get("float_nodes")
    return list(nodes) if isinstance(nodes, list) else []
