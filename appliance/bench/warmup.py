"""``appliance bench warmup``: the first frame's latency after a model is loaded, without and with warm-up.

Side by side on one embedded Triton: the base model is loaded through ``TritonSwitcher`` ``--rounds`` times with
``warmup_frames: 0`` and as often with the default warm-up (each load a fresh set of models under its own
prefix, as an OTA switch makes them), and the first 1080p frame sent after ``load`` returns is timed; then a
frame that is warm anyway. The last line is ``first_frame_cold_over_warm=<ratio>`` (median cold first frame /
median warmed-up first frame).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from appliance.detector.engines import ensure_engines
from appliance.detector.engines.devicerepo import PROFILES
from appliance.detector.profile import load_profile
from appliance.detector.repository.materialize import RepositoryOptions
from appliance.detector.serving.router import Router
from appliance.detector.serving.switcher import ModelSpec, TritonSwitcher
from appliance.detector.serving.warmup import FrameShape, WarmupPlan, warmup_frame
from appliance.helptext import plain_help
from appliance.paths import engines_dir, models_dir
from appliance.triton import stubsite
from appliance.triton.server import Server, ServerOptions

FRAME = FrameShape(1080, 1920, "BGR")


def _first_frame_ms(server: Server, switcher: TritonSwitcher, spec: ModelSpec) -> tuple[float, float]:
    """Load ``spec``, time the first frame and then a second one; unload it again."""
    route = switcher.load(spec)
    frame = warmup_frame(FRAME)
    times = []
    for _ in range(2):
        started = time.perf_counter()
        server.infer(route.ensemble, {"IMAGE": frame}, ["BOXES", "SCORES", "CLASSES"], timeout_s=120)
        times.append((time.perf_counter() - started) * 1000)
    switcher.retire(route)
    return times[0], times[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="appliance bench warmup", description=plain_help(__doc__))
    parser.add_argument("--rounds", type=int, default=3, help="loads per variant (default 3)")
    parser.add_argument("--warmup-frames", type=int, default=2, help="warm-up rounds of the warmed variant")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.warmup_frames < 1:
        parser.error("--rounds and --warmup-frames must be at least 1")
    if stubsite.needed():
        stubsite.ensure()
    with tempfile.TemporaryDirectory(prefix="bench-warmup-") as tmp:
        (engine,) = ensure_engines(engines_dir(), state_dir=Path(tmp) / "state", models_root=models_dir(),
                                   builder="onnxruntime", models=["yolov3-tiny"])
        profile = load_profile(PROFILES / "yolov3-tiny.yaml")
        repo = Path(tmp) / "repository"
        repo.mkdir()
        server = Server(ServerOptions(repositories=[repo], model_control="explicit")).start(180)
        try:
            options = RepositoryOptions(preprocess_instances=1)
            plans = {"cold": WarmupPlan(frames=0), "warm": WarmupPlan(frames=args.warmup_frames, shapes=(FRAME,))}
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in plans}
            for round_ in range(args.rounds):
                for name, plan in plans.items():  # interleaved: load on the host hits both alike
                    switcher = TritonSwitcher(server, repo, Router(), options=options, warmup=plan)
                    spec = ModelSpec(f"{name}{round_}", profile, engine)
                    results[name].append(_first_frame_ms(server, switcher, spec))
        finally:
            server.stop(60)
    print(f"{'variant':8} {'first frame ms (median)':>24} {'second frame ms (median)':>25}")
    medians = {}
    for name, rows in results.items():
        medians[name] = statistics.median(r[0] for r in rows)
        print(f"{name:8} {medians[name]:24.1f} {statistics.median(r[1] for r in rows):25.1f}")
    print(f"first_frame_cold_over_warm={medians['cold'] / medians['warm']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
