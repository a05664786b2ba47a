#!/usr/bin/env bash
# Test tools: the OPC UA client from a third stack, open62541 (the `o6` package from PyPI), pinned by
# tests/opcua/o6client/requirements.txt, in a virtualenv of its own at tests/opcua/o6client/.venv: o6 installs a
# top-level `examples` package and needs Python 3.11 or later, so it stays out of the appliance's .venv. Skipped
# where APPLIANCE_SETUP_TEST_TOOLS=0 (a device, the arm64 smoke root); a no-op once the venv matches the file.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${APPLIANCE_SETUP_TEST_TOOLS:-1}" = "0" ]; then
  exit 0
fi
client=tests/opcua/o6client
stamp="$client/.venv/.installed-$(sha256sum "$client/requirements.txt" | cut -c1-16)"
if [ -f "$stamp" ]; then
  exit 0
fi
# o6 publishes wheels for CPython 3.11 to 3.13 only (no source distribution): the first such interpreter found.
python=""
for candidate in "${PYTHON:-python3}" python3 python3.13 python3.12 python3.11; do
  if command -v "$candidate" >/dev/null 2>&1 \
      && "$candidate" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "setup: error: the o6 OPC UA test client needs Python 3.11 to 3.13 (o6 has no wheel for $(python3 --version 2>&1));" \
       "install one, or set APPLIANCE_SETUP_TEST_TOOLS=0 where the tests do not run" >&2
  exit 1
fi
echo "setup: o6 (open62541) in $client/.venv with $python, for the OPC UA interop tests"
rm -rf "$client/.venv"
"$python" -m venv "$client/.venv"
"$client/.venv/bin/python" -m pip install -q --only-binary=:all: -r "$client/requirements.txt"
touch "$stamp"
