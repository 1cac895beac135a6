#!/usr/bin/env bash
# pg_regress suite (tests/pg_regress): what users see in psql.
#   tests/regress.sh              on a throwaway cluster with insta_id preloaded
#   tests/regress.sh --no-preload on one without shared_preload_libraries
#   tests/regress.sh --existing   on the server PGHOST/PGPORT/PGUSER point at
#   tests/regress.sh --bless      (re)write expected/ from the results (review the diff!)
# Files whose output depends on the server have variants (name_1.out, ...).
source "$(dirname "$0")/../scripts/dev/harness.sh"
existing=0; bless=0; preload=(--preload); name=regress; server=preloaded
for a in "$@"; do
  case "$a" in
    --existing) existing=1; server="the server at ${PGHOST:-its default}" ;;
    --no-preload) preload=(); name=regress-nopreload; server="not preloaded" ;;
    --bless) bless=1 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
dir="$repo/tests/pg_regress"
export INSTA_ID_FIXTURES="$repo/tests/fixtures"   # (\getenv in the suite: shared SQL)
out="$repo/target/regress/pg$PG-$name"
mkdir -p "$out"
[ "$(id -u)" = 0 ] && chmod o+rwx "$out"
tests=$(cd "$dir/sql" && ls *.sql | sed 's/\.sql$//' | sort)
[ $existing = 1 ] || start_cluster "$name" "${preload[@]}"
pg_regress="$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress"
status=0
"$pg_regress" --inputdir="$dir" --outputdir="$out" --bindir="$PGBIN" \
  --dbname=insta_id_regress $tests || status=$?
if [ $bless = 1 ]; then
  for t in $tests; do
    ls "$dir/expected/${t}"_*.out >/dev/null 2>&1 || cp "$out/results/$t.out" "$dir/expected/$t.out"
  done
  echo "expected/ rewritten (files with variants excepted): review with git diff"
fi
[ $status = 0 ] || { [ -f "$out/regression.diffs" ] && cat "$out/regression.diffs"; }
[ $existing = 1 ] || stop_cluster "$name"
echo "pg_regress on PostgreSQL $PG ($server): $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
