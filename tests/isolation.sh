#!/usr/bin/env bash
# Isolation specs (tests/isolation/specs): the shard helpers' concurrency
# cases that one server can show, run by PostgreSQL's own isolation tester,
# which steps sessions in a fixed order and waits until a step completes or
# is blocked on a lock, so the outcome is deterministic (no sleeps).
#   tests/isolation.sh           on a throwaway cluster, insta_id preloaded
#   tests/isolation.sh --bless   (re)write expected/ from the results (review the diff!)
source "$(dirname "$0")/../scripts/dev/harness.sh"
bless=0
for a in "$@"; do
  case "$a" in
    --bless) bless=1 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
dir="$repo/tests/isolation"
out="$repo/target/isolation/pg$PG"
mkdir -p "$out"
[ "$(id -u)" = 0 ] && chmod o+rwx "$out"
specs=$(cd "$dir/specs" && ls *.spec | sed 's/\.spec$//' | sort)
start_cluster isolation --preload
isolation="$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/isolation/pg_isolation_regress"
status=0
"$isolation" --inputdir="$dir" --outputdir="$out" --bindir="$PGBIN" \
  --dbname=insta_id_isolation $specs || status=$?
if [ $bless = 1 ]; then
  for t in $specs; do cp "$out/results/$t.out" "$dir/expected/$t.out"; done
  echo "expected/ rewritten: review with git diff"
fi
[ $status = 0 ] || { [ -f "$out/regression.diffs" ] && cat "$out/regression.diffs"; }
stop_cluster isolation
echo "isolation specs on PostgreSQL $PG: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
