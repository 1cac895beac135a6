#!/usr/bin/env bash
# make test's suites in lanes side by side (issue 55): the machine has
# two cores, and most suites wait on servers, clocks and sessions more than
# they compute.
#
#   scripts/dev/lanes.sh --lane 'check 15' 'test-shards 15' ... --lane 'check 18' ...
#
# An item is a make target and, optionally, the PostgreSQL major it runs on
# (PG=NN). A lane runs its items in order, each timed (scripts/dev/timed.sh),
# its output in target/lanes/<item>.log, printed when it fails. A failure
# lets the other lanes finish the suite each is in, then stops them; the exit
# status is 1. What lanes may share is the Makefile's to decide (its
# test target says which lane has what).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
logs="$repo/target/lanes"
rm -rf "$logs"; mkdir -p "$logs"
failed="$logs/FAILED"

lane() {
  local item target pg log started
  for item in "$@"; do
    if [ -e "$failed" ]; then echo "==> $item: not run (a suite failed)"; continue; fi
    read -r target pg <<<"$item"
    log="$logs/${item// /_}.log"
    started=$(date +%s)
    echo "==> $item: started"
    if "$repo/scripts/dev/timed.sh" "$item" make -s -C "$repo" "$target" ${pg:+PG=$pg} >"$log" 2>&1; then
      echo "==> $item: passed in $(( $(date +%s) - started )) s"
    else
      echo "$item" >>"$failed"
      # (the tail names what failed: tests/tap.sh ends with it)
      echo "==> $item: FAILED in $(( $(date +%s) - started )) s; the end of $log:"
      tail -n 100 "$log" | sed "s/^/    [$item] /"
    fi
  done
}

lanes=(); current=()
for a in "$@"; do
  if [ "$a" = --lane ]; then
    [ ${#current[@]} = 0 ] || lanes+=("$(printf '%s\n' "${current[@]}")")
    current=()
  else
    current+=("$a")
  fi
done
[ ${#current[@]} = 0 ] || lanes+=("$(printf '%s\n' "${current[@]}")")
[ ${#lanes[@]} -gt 0 ] || { sed -n '2,12p' "$0" >&2; exit 2; }

pids=()
for l in "${lanes[@]}"; do
  mapfile -t items <<<"$l"
  lane "${items[@]}" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
if [ -e "$failed" ]; then
  echo "==> failed: $(paste -sd, "$failed" | sed 's/,/, /g')"
  exit 1
fi
