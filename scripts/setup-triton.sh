#!/usr/bin/env bash
# scripts/setup.sh's Triton step, on its own so a test can run it on fake trees (tests/test_setup_triton.py).
# A distribution that is already there is used as it is and .triton is not provisioned:
#   APPLIANCE_TRITON_HOME, when set (it must hold lib/libtritonserver.so: a typo is an error, not a fallback),
#   else SYSTEM_HOME (default /opt/tritonserver: the igpu image's, or JetPack's from Triton's igpu tarball).
# Only when there is neither is Triton's CPU build for this architecture laid out in .triton from PyPI.
#
#   scripts/setup-triton.sh [SYSTEM_HOME]
set -euo pipefail
cd "$(dirname "$0")/.."
system_home=${1:-/opt/tritonserver}
if [ -n "${APPLIANCE_TRITON_HOME:-}" ]; then
  if [ ! -e "$APPLIANCE_TRITON_HOME/lib/libtritonserver.so" ]; then
    echo "setup: error: APPLIANCE_TRITON_HOME=$APPLIANCE_TRITON_HOME has no lib/libtritonserver.so" \
         "(unset it to provision the CPU build in .triton)" >&2
    exit 1
  fi
  echo "setup: Triton from APPLIANCE_TRITON_HOME=$APPLIANCE_TRITON_HOME (not provisioning .triton)"
elif [ -e "$system_home/lib/libtritonserver.so" ]; then
  echo "setup: Triton from $system_home (not provisioning .triton)"
else
  .venv/bin/python scripts/provision_triton.py --dest .triton
fi
