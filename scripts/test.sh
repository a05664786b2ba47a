#!/usr/bin/env bash
# Run the test suite (after making sure everything it needs is installed).
#
#   scripts/test.sh                 everything: the type check, the lint (ruff) and one pytest process per folder
#                                   of tests/ (and one for its top-level files), APPLIANCE_TEST_JOBS of them at a
#                                   time (default 3), the longest first; each folder's output whole when it ends, a
#                                   summary last
#   scripts/test.sh -m slow ...     the same, with these pytest options for every process
#   scripts/test.sh tests/ota/x.py  what you name (a path or a node id): the type check and the lint, then one
#                                   pytest process
#
# Why a process per folder: the tests start and stop many embedded Triton servers, each leaving native threads and
# state behind in its process; a process per folder keeps that history short, and a crash in one folder (a native
# SIGSEGV) is reported with its folder while the other folders still run. Any failure still fails the run.
# Why several at once: most of a folder's time is spent waiting (on cameras that play in real time, brokers,
# daemons reaching READY), so a second and third process fill the cores the first leaves idle. The folders share
# nothing on disk: each has its own pytest temporary root, ports come from the kernel, /dev/shm names are unique.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
scripts/setup-test-tools.sh || exit 1  # the browser and the interop clients: only the tests need them

names_tests=false
for arg in "$@"; do
  case "$arg" in
    tests|tests/*|*::*|*.py) names_tests=true ;;
  esac
done

if $names_tests; then
  .venv/bin/python -m mypy || { echo "error: mypy found type errors (above)" >&2; exit 1; }
  .venv/bin/ruff check || { echo "error: ruff found problems (above; settings: [tool.ruff] in pyproject.toml)" >&2; exit 1; }
  .venv/bin/python -m pytest "$@"
  rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "error: pytest collected no tests; that is a failure, not a pass" >&2
    exit 1
  fi
  exit "$rc"
fi

jobs_max=${APPLIANCE_TEST_JOBS:-3}
run_dir=$(mktemp -d "${TMPDIR:-/tmp}/appliance-tests.XXXXXX")
trap 'rm -rf "$run_dir"' EXIT
# Built once for the whole run and shared by its processes (tests/support/engineseed.py).
export APPLIANCE_TEST_CACHE="$run_dir/cache"
mkdir -p "$run_dir/tmp"

# Files of the longest folder that run in processes of their own, so that no one process holds the whole run up
# (each process still runs one file's tests in order, as a folder's process does).
split_off=(
  "tests/supervisor/test_supervisor_bench_e2e.py"
  "tests/supervisor/test_supervisor_install.py tests/supervisor/test_supervisor_rollout.py
   tests/supervisor/test_supervisor_ota.py tests/supervisor/test_supervisor_model_recovery_daemon.py"
)
# The longest first (each group's seconds are in the summary), so that the short ones fill in at the end; a folder
# not named here comes after them, and a group is a folder less the files split off from it.
groups=(tests/supervisor "${split_off[@]}" tests/ota tests/mqtt tests/triton tests/engines tests/appconfig
        tests/serving tests/models tests/capture)
for dir in tests/*/; do
  dir=${dir%/}
  compgen -G "${dir}/test_*.py" > /dev/null || continue
  [[ " ${groups[*]} " == *" $dir "* ]] || groups+=("$dir")
done
groups+=("$(ls tests/test_*.py | tr '\n' ' ')")
groups=(mypy ruff "${groups[@]}")  # the type check and the lint are jobs of the pool: a finding fails the run

# The pytest arguments of group $1: the folder less the files split off from it, or the files as they are.
pytest_args_of() {
  local group=$1 file
  echo "$group"
  [ -d "$group" ] || return 0
  for file in ${split_off[*]}; do
    [[ $file == "$group"/* ]] && echo "--ignore=$file"
  done
  return 0
}

declare -A name_of=() started_at=()
running=0
results=()
worst=0
collected=false

start_group() {  # $1: index into groups
  local group=${groups[$1]} log="$run_dir/$1.log"
  if [ "$group" = mypy ]; then
    .venv/bin/python -m mypy > "$log" 2>&1 &
  elif [ "$group" = ruff ]; then
    .venv/bin/ruff check > "$log" 2>&1 &
  else
    # shellcheck disable=SC2046  # a group is a list of files and options
    .venv/bin/python -m pytest "${@:2}" --basetemp "$run_dir/tmp/$1" $(pytest_args_of "$group") > "$log" 2>&1 &
  fi
  name_of[$!]=$1
  running=$((running + 1))
  started_at[$1]=$(date +%s)
}

record() {  # $1: verdict, $2: seconds, $3: what
  results+=("$(printf '%-7s %4ss  %s' "$1" "$2" "$3")")
}

finish_group() {  # $1: index into groups, $2: exit status
  local i=$1 rc=$2 group took=$(($(date +%s) - ${started_at[$1]}))
  group=$(echo ${groups[$1]})  # one line
  [ "$(pytest_args_of "$group" | wc -l)" -gt 1 ] && group="$group (less the files split off)"
  echo "=== ${group} (${took} s)" >&2
  cat "$run_dir/$i.log"
  if [ "$group" = mypy ] || [ "$group" = ruff ]; then
    if [ "$rc" -eq 0 ]; then record ok "$took" "$group"; else record FAILED "$took" "$group: findings (above)"; worst=1; fi
    return
  fi
  case "$rc" in
    0) collected=true; record ok "$took" "$group" ;;
    5) record "(none)" "$took" "$group" ;;  # nothing selected here (e.g. -m aarch64): fine unless nowhere
    *) collected=true
       if [ "$rc" -gt 128 ]; then
         record CRASHED "$took" "$group (signal $((rc - 128)); the traceback above names the test)"
       else
         record FAILED "$took" "$group (pytest exit $rc)"
       fi
       [ "$worst" -eq 0 ] && worst=$rc ;;
  esac
}

wait_one() {
  local pid rc
  wait -n -p pid
  rc=$?
  finish_group "${name_of[$pid]}" "$rc"
  unset "name_of[$pid]"
  running=$((running - 1))
}

suite_started=$(date +%s)
for i in "${!groups[@]}"; do
  while [ "$running" -ge "$jobs_max" ]; do wait_one; done
  start_group "$i" "$@"
done
while [ "$running" -gt 0 ]; do wait_one; done

echo "=== summary ($(($(date +%s) - suite_started)) s, ${jobs_max} at a time)" >&2
printf '%s\n' "${results[@]}" >&2
if ! $collected; then
  echo "error: pytest collected no tests; that is a failure, not a pass" >&2
  exit 1
fi
exit "$worst"
