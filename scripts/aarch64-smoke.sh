#!/usr/bin/env bash
# The aarch64 smoke set, run INSIDE the arm64 root by scripts/check-aarch64.sh (from the checkout's copy there):
#   1. the README's setup (scripts/setup.sh), timed;
#   2. Triton's aarch64 build starts (appliance triton-info, and the ensemble below);
#   3. the real detector's ensemble gives the x86_64 host's detections on real images (scripts/detect_images.py);
#   4. the appliance runs the sample camera (scripts/setup.d/30-sample-video.sh) to a local broker until N
#      detections messages arrive, then stops cleanly on SIGTERM;
#   5. the tests marked `aarch64` (pytest -m aarch64, on the modules tests/aarch64-modules.txt lists).
# Emulated ONNX Runtime is slow, so the engine build uses a smoke profile (one golden sample instead of two).
set -euo pipefail
cd "$(dirname "$0")/.."
FRAMES=${APPLIANCE_SMOKE_FRAMES:-3}
X86_DETECTIONS=${1:?usage: aarch64-smoke.sh X86_DETECTIONS_JSON IMAGE...}
shift
phase() { printf '\naarch64: == %s (%s)\n' "$1" "$(uname -m)"; }
elapsed() { echo "aarch64: $1 took $(($(date +%s) - $2)) s"; }

phase "setup: scripts/setup.sh"
t=$(date +%s)
# The browser and the interop clients serve only the x86_64 suite's page and protocol tests, which do not run
# here; installing Chromium under emulation would cost minutes for nothing.
APPLIANCE_SETUP_TEST_TOOLS=0 scripts/setup.sh
elapsed "setup" "$t"

phase "Triton"
.venv/bin/appliance triton-info

phase "detections on real images vs the x86_64 host"
t=$(date +%s)
# Its log goes to a file (ONNX Runtime is chatty under emulation); on a mismatch the last lines say why.
# It takes about a minute. qemu-user can deadlock a child forked from a multithreaded process (Triton forks its
# Python-backend stubs while its threads run), which a real arm64 machine does not do: a run still going after
# HANG_S is shown (its processes) and run once more. A mismatch or an error is never retried.
HANG_S=${APPLIANCE_SMOKE_HANG_S:-300}
detect() { timeout -k 10 "$HANG_S" .venv/bin/python scripts/detect_images.py --compare "$X86_DETECTIONS" "$@" 2>/tmp/arm64-detections.log; }
rc=0; detect "$@" || rc=$?
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "aarch64: the detections step hung for $HANG_S s under emulation; its last log lines, then a second try:" >&2
  tail -n 5 /tmp/arm64-detections.log >&2
  rc=0; detect "$@" || rc=$?
fi
[ "$rc" -eq 0 ] \
  || { tail -n 20 /tmp/arm64-detections.log >&2; echo "aarch64: the detections step failed (exit $rc; 124: it hung twice): see above" >&2; exit 1; }
elapsed "detections" "$t"

phase "the appliance: sample camera -> embedded Triton -> MQTT, $FRAMES detections messages"
t=$(date +%s)
state=$(mktemp -d)
engines=$(mktemp -d)
# The shipped profile, verified on one golden sample (batch 1) instead of two: emulation is ~50x slower.
sed 's/^  samples: [0-9]*/  samples: 1/' engines/yolov3-tiny.yaml > "$engines/yolov3-tiny.yaml"
grep -q '^  samples: 1' "$engines/yolov3-tiny.yaml" || { echo "aarch64: the smoke profile edit did not apply" >&2; exit 1; }
port=18830
printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\n' "$port" > "$state/mosquitto.conf"
mosquitto -c "$state/mosquitto.conf" > "$state/mosquitto.log" 2>&1 &
broker=$!
app=""
cleanup() { [ -z "$app" ] || kill "$app" 2>/dev/null || true; kill "$broker" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
# The sample camera at a rate emulation can serve: one inference through the emulated ensemble takes seconds
# (about 50x native), so frames are slow, requests and the drain at stop may take up to 2 minutes, and one
# warm-up round is enough.
cat > "$state/smoke.yaml" <<YAML
device: {id: arm64-smoke}
cameras:
  - id: sample
    source: {type: file, path: $PWD/.models/sample/sample.mp4, loop: true, realtime: true}
    width: 640
    height: 480
    resize: true
    fps: 0.5
pipeline: {request_timeout_s: 120, drain_timeout_s: 120, warmup_frames: 1}
paths: {state_dir: $state}
mqtt: {host: 127.0.0.1, port: $port}
health: {port: 19108}
YAML
.venv/bin/appliance check-config --no-machine "$state/smoke.yaml"
start_appliance() {
  APPLIANCE_ENGINES_DIR=$engines .venv/bin/appliance run --config "$state/smoke.yaml" >> "$state/appliance.log" 2>&1 &
  app=$!
}
start_appliance
# Engine build (verify + timing, emulated) and Triton start come first: allow up to 15 minutes. An appliance that
# gave up on a Triton start hung under qemu (see the detections step) is started once more, as systemd would.
timeout 900 mosquitto_sub -h 127.0.0.1 -p "$port" -C "$FRAMES" -t 'appliance/+/+/detections' > "$state/messages" &
sub=$!
restarted=false
while kill -0 "$sub" 2>/dev/null; do
  if ! $restarted && ! kill -0 "$app" 2>/dev/null && grep -q "Triton did not start within" "$state/appliance.log"; then
    echo "aarch64: the appliance's Triton start hung under emulation; starting the appliance once more" >&2
    restarted=true
    start_appliance
  fi
  sleep 2
done
if ! wait "$sub"; then
  tail -n 40 "$state/appliance.log" >&2
  echo "aarch64: no $FRAMES detections messages from the appliance" >&2
  exit 1
fi
cut -c1-200 "$state/messages"
kill -TERM "$app"
rc=0; wait "$app" || rc=$?
app=""
grep -E "ready:|engine|stopped" "$state/appliance.log" | cut -c1-200 | tail -n 8
[ "$rc" -eq 0 ] || { tail -n 40 "$state/appliance.log" >&2; echo "aarch64: appliance exited $rc on SIGTERM" >&2; exit 1; }
elapsed "appliance" "$t"

phase "tests marked aarch64"
t=$(date +%s)
# Only the listed modules are collected: collecting the whole suite imports every test module under emulation.
mapfile -t modules < <(grep -v '^#' tests/aarch64-modules.txt | grep . | sed 's|^|tests/|')
.venv/bin/python -m pytest -m aarch64 -q -p no:cacheprovider "${modules[@]}"
elapsed "tests" "$t"
echo "aarch64: all passed"
