#!/usr/bin/env bash
# Test tools: the OPC UA client from another stack (node-opcua) that tests/opcua drives against the appliance,
# installed with `npm ci` from tests/opcua/nodeclient/package-lock.json. Node.js and npm come from apt only when
# `npm` is missing. Skipped where APPLIANCE_SETUP_TEST_TOOLS=0 (a device, the arm64 smoke root); a no-op once
# node_modules matches the lock file.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${APPLIANCE_SETUP_TEST_TOOLS:-1}" = "0" ]; then
  exit 0
fi
client=tests/opcua/nodeclient
stamp="$client/node_modules/.installed-$(sha256sum "$client/package-lock.json" | cut -c1-16)"
if [ -f "$stamp" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "setup: installing nodejs and npm (apt) for the OPC UA interop tests"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
echo "setup: npm ci in $client (node-opcua, for the OPC UA interop tests)"
(cd "$client" && npm ci --no-audit --no-fund --loglevel=error)
touch "$stamp"
