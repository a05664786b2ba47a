#!/usr/bin/env bash
# Run the test suite (after making sure everything it needs is installed).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
# The type checker first ([tool.mypy] in pyproject.toml): a type error fails the run like a failing test.
.venv/bin/python -m mypy || { echo "error: mypy found type errors (above)" >&2; exit 1; }
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests; that is a failure, not a pass" >&2
  exit 1
fi
exit "$rc"
