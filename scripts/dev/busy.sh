#!/usr/bin/env bash
# Runs a command on a busy machine, as CI machines and laptops are
# (issue 55): two CPU-bound processes per core for the whole run, niced,
# and a slow disk (every fsync of every process waits a few milliseconds:
# tests/busy/slow_sync.c, LD_PRELOAD). A test that fails only here has a
# race to find, never a threshold to widen.
#
#   scripts/dev/busy.sh make test
#   scripts/dev/busy.sh tests/tap.sh shards
#   BUSY_HOGS_PER_CORE=2 BUSY_NICE=10 BUSY_FSYNC_MS=5 scripts/dev/busy.sh CMD...
#
# The hogs end with the command, and by themselves if this script is killed
# (each checks its parent every tenth of a second) or after BUSY_MAX_SECONDS
# (default 3 hours).
# (Not through harness.sh: its PG and PG_CONFIG would reach the command,
# whose suites each pick their own version.)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
say() { printf '==> %s\n' "$*"; }
[ $# -gt 0 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
dir="$repo/target/busy"; mkdir -p "$dir"
cc -shared -fPIC -O2 -o "$dir/slow_sync.so" "$repo/tests/busy/slow_sync.c" -ldl
chmod a+rx "$dir" "$dir/slow_sync.so"
hogs=$(( $(nproc) * ${BUSY_HOGS_PER_CORE:-2} ))
pids=()
for _ in $(seq "$hogs"); do
  timeout "${BUSY_MAX_SECONDS:-10800}" nice -n "${BUSY_NICE:-10}" sh -c \
    'while kill -0 '$$' 2>/dev/null; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; done' &
  pids+=($!)
done
# (the hogs' wait ends 143, killed: not the command's status, under set -e)
trap 'kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null || true' EXIT
say "busy: $hogs CPU hogs (nice ${BUSY_NICE:-10}), every fsync ${BUSY_FSYNC_MS:-5} ms slower: $*"
export BUSY_FSYNC_MS=${BUSY_FSYNC_MS:-5}
export LD_PRELOAD="$dir/slow_sync.so${LD_PRELOAD:+:$LD_PRELOAD}"
status=0; "$@" || status=$?
say "busy: $* exited $status"
exit $status
