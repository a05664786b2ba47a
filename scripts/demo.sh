#!/usr/bin/env bash
# Run the appliance's main job on its embedded default: the bundled sample camera (a sample video made from
# Debian's darknet test images, .models/sample/sample.mp4, built by setup), the real detector, and a local
# MQTT broker (started here on 127.0.0.1 when none is listening).
# Detections are printed as a subscriber on the line would receive them. Ctrl-C stops everything.
# Extra arguments go to `appliance run` (e.g. --config FILE, or --once to start, report ready and exit).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

PORT=${APPLIANCE_MQTT_PORT:-1883}
export APPLIANCE_MQTT_PORT=$PORT
pids=()
# $! of a pipeline is its last process (cut); `jobs -p` names each job's first (the mosquitto_sub feeding it), which
# would otherwise outlive the broker and keep `wait` (and `--once`) from returning.
cleanup() {
  for pid in "${pids[@]}" $(jobs -p); do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

if ! (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  mkdir -p .state/demo-broker
  printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\n' "$PORT" > .state/demo-broker/mosquitto.conf
  # Its own session: Ctrl-C stops the appliance first, which still says "offline" to the broker on its way out.
  setsid mosquitto -c .state/demo-broker/mosquitto.conf > .state/demo-broker/mosquitto.log 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
  echo "demo: started a local MQTT broker on 127.0.0.1:$PORT"
fi

# What a subscriber on the line sees (one line per message, cut for the terminal): events and counts in full,
# the camera's retained JPEG snapshot left out (binary; GET /cameras/hall/latest.jpg on the health port shows it).
mosquitto_sub -h 127.0.0.1 -p "$PORT" -v -t 'appliance/demo/#' -T 'appliance/demo/+/snapshot' \
  -T 'appliance/demo/+/events' -T 'appliance/demo/+/counts' | stdbuf -oL cut -c1-220 &
pids+=($!)
mosquitto_sub -h 127.0.0.1 -p "$PORT" -v -t 'appliance/demo/+/events' -t 'appliance/demo/+/counts' &
pids+=($!)
echo "demo: the operator's page on http://127.0.0.1:${APPLIANCE_HEALTH_PORT:-9108}/ (the live picture; draw zones and lines there)"
echo "demo: health on http://127.0.0.1:${APPLIANCE_HEALTH_PORT:-9108}/metrics; 'appliance status' summarizes it"
.venv/bin/appliance run "$@"
