#!/usr/bin/env bash
# The aarch64 check: the README's setup and a smoke set on arm64 Debian 12 under qemu-user emulation, proving
# the install path, Triton's aarch64 build and the detector on the architecture a Jetson has. .ci/run calls it.
#
#   scripts/check-aarch64.sh            build or reuse the arm64 root (scripts/arm64-root.sh), copy this checkout
#                                       into it, run the Dockerfile.igpu steps and scripts/aarch64-smoke.sh there
#
# The host (x86_64) first writes its own detections on real images; the root must reproduce them. What setup
# installs in the root is kept between runs (~/.cache/appliance/arm64-root): a first run takes 25-40 minutes
# (docs/jetson.md has the measured parts), later ones about 7. Needs root. APPLIANCE_SKIP_AARCH64=1 skips it (say so wherever that is used).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${APPLIANCE_SKIP_AARCH64:-}" = 1 ]; then
  echo "aarch64: SKIPPED (APPLIANCE_SKIP_AARCH64=1)"
  exit 0
fi
started=$(date +%s)
IMAGES=(/usr/share/darknet/data/dog.jpg /usr/share/darknet/data/person.jpg /usr/share/darknet/data/horses.jpg)

scripts/arm64-root.sh ensure
ROOT=$(scripts/arm64-root.sh path)
SRC=/work/appliance   # the checkout's copy inside the root

echo "aarch64: copying the checkout into $ROOT$SRC (its .venv, .triton and .models from the last run stay)"
mkdir -p "$ROOT$SRC"
find "$ROOT$SRC" -mindepth 1 -maxdepth 1 ! -name .venv ! -name .triton ! -name .models ! -name .cache \
  -exec rm -rf {} +
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$ROOT$SRC"

echo "aarch64: detections of the x86_64 host on ${#IMAGES[@]} real images"
.venv/bin/python scripts/detect_images.py "${IMAGES[@]}" 2>"$ROOT/tmp/x86-detections.log" > "$ROOT/tmp/x86-detections.json" \
  || { tail -n 20 "$ROOT/tmp/x86-detections.log" >&2; exit 1; }

echo "aarch64: Dockerfile.igpu's RUN steps, in order, in the root (Docker's engine cannot run here)"
.venv/bin/python scripts/dockerfile_steps.py Dockerfile.igpu --src "$SRC" > "$ROOT/tmp/dockerfile-steps.sh"
scripts/arm64-root.sh run "bash /tmp/dockerfile-steps.sh"

scripts/arm64-root.sh run "cd $SRC && scripts/aarch64-smoke.sh /tmp/x86-detections.json ${IMAGES[*]}"
echo "aarch64: check passed in $(($(date +%s) - started)) s"
