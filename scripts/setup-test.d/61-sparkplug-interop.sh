#!/usr/bin/env bash
# The Sparkplug tests' independent decoder: Eclipse Tahu's JavaScript codec (npm sparkplug-payload), installed from
# tests/sparkplug/interop/package-lock.json into tests/sparkplug/interop/node_modules. Only the tests need it, so
# it is skipped with APPLIANCE_SETUP_TEST_TOOLS=0; a no-op once the lock file's packages are there.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${APPLIANCE_SETUP_TEST_TOOLS:-1}" = "0" ]; then
  exit 0
fi
dir=tests/sparkplug/interop
stamp=$dir/node_modules/.installed-from-lock  # the lock file the installed packages came from
if cmp -s "$dir/package-lock.json" "$stamp" 2>/dev/null; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing nodejs and npm (Debian) for the Sparkplug interop tests"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi
echo "setup: npm ci in $dir (Eclipse Tahu's sparkplug-payload)"
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
cp "$dir/package-lock.json" "$stamp"
