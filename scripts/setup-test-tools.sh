#!/usr/bin/env bash
# Install what only the tests need, idempotently, after scripts/setup.sh (scripts/test.sh runs both): the
# browser for the page tests and the interop clients (OPC UA: node-opcua and o6; Sparkplug: Tahu's codec), from
# scripts/setup-test.d. The appliance and the demo need none of them, so scripts/setup.sh leaves them out.
# APPLIANCE_SETUP_TEST_TOOLS=0 skips them (a device image, the arm64 smoke root). Safe to run again; each step is
# skipped when done.
set -euo pipefail
cd "$(dirname "$0")/.."
for step in scripts/setup-test.d/*.sh; do
  [ -e "$step" ] && bash "$step"
done
