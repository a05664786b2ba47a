#!/usr/bin/env python3
"""Run the real detector ensemble (preprocess -> detector -> postprocess) in embedded Triton on image files and
print the detections as JSON; with ``--compare FILE``, check them against detections another machine wrote.

The aarch64 check (scripts/check-aarch64.sh) writes the x86_64 detections on the host, runs this inside the
arm64 root with ``--compare``, and so proves the same boxes, classes and scores on both architectures:

    .venv/bin/python scripts/detect_images.py /usr/share/darknet/data/dog.jpg ... > x86.json
    .venv/bin/python scripts/detect_images.py --compare x86.json /usr/share/darknet/data/dog.jpg ...

Both designs the appliance can serve are run, from one Triton: ``in-graph`` (the detector's graph normalizes,
decodes and suppresses; what the appliance serves by default) and ``python-stages`` (the Python backend does
pre/post; what a detector that cannot be wrapped gets). Tolerances are the golden tests'
(tests/models/models_reference.py): boxes within 1 px, scores within 1e-3, classes equal, in the same order.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np

from appliance.detector.engines.devicerepo import PROFILES
from appliance.detector.profile import load_profile
from appliance.detector.repository.materialize import DetectorSource, RepositoryOptions, materialize
from appliance.paths import models_dir
from appliance.triton import Server, ServerOptions

BOX_PX, SCORE = 1.0, 1e-3


# name -> (DetectorSource.in_graph, model-name prefix): one repository each, served by one Triton.
DESIGNS = {"in-graph": ("auto", ""), "python-stages": ("off", "py_")}


def detect(images: list[Path], models_dir: Path, profiles_dir: Path) -> dict[str, dict[str, list[dict]]]:
    """{design: {image name: detections}} for each of DESIGNS."""
    profile = load_profile(profiles_dir / "yolov3-tiny.yaml")
    onnx_path = models_dir / "yolov3-tiny" / "model.onnx"
    out: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repos = {}
        for design, (in_graph, prefix) in DESIGNS.items():
            repos[design] = materialize(profile, DetectorSource(kind="onnxruntime", path=onnx_path, in_graph=in_graph),
                                        Path(tmp), RepositoryOptions(prefix=prefix, preprocess_instances=1))
        if not repos["in-graph"].in_graph:  # else both runs would be the Python design and prove half as much
            raise SystemExit(f"error: the detector could not be wrapped: {repos['in-graph'].in_graph_reason}")
        startup = [name for repo in repos.values() for name in repo.models]
        server = Server(ServerOptions(repositories=[Path(tmp)], startup_models=startup))
        server.start(timeout=600)
        try:
            for design, repo in repos.items():
                out[design] = {}
                for path in images:
                    frame = cv2.imread(str(path))
                    if frame is None:
                        raise SystemExit(f"error: cannot read {path}")
                    result = server.infer(repo.ensemble, {"IMAGE": frame}, timeout_s=600)
                    out[design][path.name] = [
                        {"class_id": int(c), "score": round(float(s), 6), "box": [round(float(v), 3) for v in b]}
                        for b, s, c in zip(result["BOXES"], result["SCORES"], result["CLASSES"])]
        finally:
            server.stop(timeout=120)
    return out


def differences(expected: dict[str, list[dict]], got: dict[str, list[dict]]) -> list[str]:
    """Every way ``got`` differs from ``expected`` beyond the tolerances; empty when they agree."""
    problems = []
    for image, want in expected.items():
        have = got.get(image)
        if have is None:
            problems.append(f"{image}: no detections reported")
            continue
        if not want:
            problems.append(f"{image}: the reference found nothing, so it proves nothing")
        if [d["class_id"] for d in have] != [d["class_id"] for d in want]:
            problems.append(f"{image}: classes {[d['class_id'] for d in have]} != {[d['class_id'] for d in want]}")
            continue
        for i, (a, b) in enumerate(zip(have, want)):
            box = float(np.max(np.abs(np.subtract(a["box"], b["box"]))))
            if box > BOX_PX or abs(a["score"] - b["score"]) > SCORE:
                problems.append(f"{image} #{i}: box off by {box:.3f} px, score {a['score']} vs {b['score']}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="+", type=Path)
    parser.add_argument("--compare", type=Path, help="detections JSON from another machine to check against")
    args = parser.parse_args(argv)
    got = detect(args.images, models_dir(), PROFILES)
    if args.compare is None:
        json.dump(got, sys.stdout, indent=1)
        print()
        return 0
    expected = json.loads(args.compare.read_text())
    problems = []
    for design, per_image in got.items():
        if design not in expected:
            problems.append(f"{design}: not in {args.compare.name} (written by an older detect_images.py?)")
            continue
        problems += [f"{design}: {p}" for p in differences(expected[design], per_image)]
        for image, found in per_image.items():
            print(f"{design} {image}: {len(found)} detection(s): " + ", ".join(
                f"class {d['class_id']} {d['score']:.3f}" for d in found))
    if problems:
        print("\n".join(["detections differ:", *problems]), file=sys.stderr)
        return 1
    print(f"same detections as {args.compare.name} for {len(got)} designs on {len(args.images)} image(s) (boxes within "
          f"{BOX_PX} px, scores within {SCORE})")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
