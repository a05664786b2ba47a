#!/usr/bin/env bash
# The demo camera's footage: a short video made from Debian's darknet test images (dog, eagle, giraffe, ...),
# built by appliance/capture/sample.py into .models/sample/sample.mp4 (install-service.sh copies it with the
# detector to /var/lib/appliance/models). A no-op once that file exists.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -s .models/sample/sample.mp4 ]; then
  exit 0
fi
echo "setup: building the demo camera's sample video into .models/sample/sample.mp4"
.venv/bin/python -m appliance.capture.sample .models/sample/sample.mp4
