#!/usr/bin/env bash
# Run the test suite (after making sure everything it needs is installed).
#
#   scripts/test.sh                 everything: one pytest process per folder of tests/ (and one for its top-level
#                                   files), each folder's result on its own line at the end
#   scripts/test.sh -m slow ...     the same, with these pytest options for every process
#   scripts/test.sh tests/ota/x.py  what you name (a path or a node id): one pytest process, as `pytest` would
#
# Why a process per folder: the tests start and stop many embedded Triton servers, each leaving native threads and
# state behind in its process; a process per folder keeps that history short, and a crash in one folder (a native
# SIGSEGV) is reported with its folder while the other folders still run. Any failure still fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
# The type checker first ([tool.mypy] in pyproject.toml): a type error fails the run like a failing test.
.venv/bin/python -m mypy || { echo "error: mypy found type errors (above)" >&2; exit 1; }

names_tests=false
for arg in "$@"; do
  case "$arg" in
    tests|tests/*|*::*|*.py) names_tests=true ;;
  esac
done

if $names_tests; then
  .venv/bin/python -m pytest "$@"
  rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "error: pytest collected no tests; that is a failure, not a pass" >&2
    exit 1
  fi
  exit "$rc"
fi

groups=()
for dir in tests/*/; do
  compgen -G "${dir}test_*.py" > /dev/null && groups+=("${dir%/}")
done
groups+=("$(ls tests/test_*.py | tr '\n' ' ')")
summary=()
worst=0
collected=false
for group in "${groups[@]}"; do
  echo "=== pytest ${group}" >&2
  # shellcheck disable=SC2086  # the last group is a list of files
  .venv/bin/python -m pytest "$@" $group
  rc=$?
  case "$rc" in
    0) collected=true; summary+=("ok      $group") ;;
    5) summary+=("(none)  $group") ;;  # nothing selected here (e.g. -m aarch64): fine unless nowhere
    *) collected=true
       if [ "$rc" -gt 128 ]; then
         summary+=("CRASHED $group (signal $((rc - 128)); the traceback above names the test)")
       else
         summary+=("FAILED  $group (pytest exit $rc)")
       fi
       [ "$worst" -eq 0 ] && worst=$rc ;;
  esac
done
echo "=== summary" >&2
printf '%s\n' "${summary[@]}" >&2
if ! $collected; then
  echo "error: pytest collected no tests; that is a failure, not a pass" >&2
  exit 1
fi
exit "$worst"
