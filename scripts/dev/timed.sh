#!/usr/bin/env bash
# Where make test's time goes (issue 55): each suite, and each build of the
# extension, one line of target/times.tsv (kind, what, seconds, outcome).
#
#   scripts/dev/timed.sh --start          empties the record (make test does)
#   scripts/dev/timed.sh LABEL CMD...      runs CMD, records its seconds
#   scripts/dev/timed.sh --report         the table, slowest first, and totals
#
# scripts/dev/build.sh records its builds itself (kind "build").
# (Not through harness.sh: it would export its PG and PG_CONFIG to the
# suites this runs, each of which picks its own version.)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
times="$repo/target/times.tsv"
case "${1:-}" in
  --start) mkdir -p "$repo/target"; : >"$times" ;;
  --report)
    [ -s "$times" ] || exit 0
    echo "make test: where the time went (target/times.tsv)"
    sort -t$'\t' -k3,3nr "$times" | awk -F'\t' '{ printf "  %-6s %-44s %6d s  %s\n", $1, $2, $3, $4 }'
    awk -F'\t' '{ t[$1] += $3; n[$1]++ } END { for (k in t) printf "  %-6s %d of them: %d s\n", k, n[k], t[k] }' "$times" | sort
    ;;
  *)
    label=$1; shift
    start=$(date +%s)
    status=0; "$@" || status=$?
    mkdir -p "$repo/target"
    printf 'suite\t%s\t%s\t%s\n' "$label" $(( $(date +%s) - start )) "$([ $status = 0 ] && echo passed || echo FAILED)" >>"$times"
    exit $status
    ;;
esac
