#!/usr/bin/env bash
# Run the appliance's main job on its embedded default: the bundled sample camera, the real detector,
# and a local MQTT broker. Extra arguments go to `appliance run`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/appliance run "$@"
