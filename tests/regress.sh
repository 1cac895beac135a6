#!/usr/bin/env bash
# pg_regress suite (tests/pg_regress): what users see in psql.
#   tests/regress.sh             on a throwaway cluster with insta_id preloaded
#   tests/regress.sh --existing  on the server PGHOST/PGPORT/PGUSER point at
#   tests/regress.sh --bless     (re)write expected/ from the results (review the diff!)
source "$(dirname "$0")/lib.sh"
existing=0; bless=0
for a in "$@"; do
  case "$a" in --existing) existing=1 ;; --bless) bless=1 ;; *) echo "unknown option $a" >&2; exit 2 ;; esac
done
dir="$repo/tests/pg_regress"
out="$repo/target/regress"
mkdir -p "$out"
[ "$(id -u)" = 0 ] && chmod o+rwx "$out"
tests=$(cd "$dir/sql" && ls *.sql | sed 's/\.sql$//' | sort)
[ $existing = 1 ] || start_cluster regress --preload
pg_regress="$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress"
status=0
"$pg_regress" --inputdir="$dir" --outputdir="$out" --bindir="$PGBIN" \
  --dbname=insta_id_regress $tests || status=$?
if [ $bless = 1 ]; then
  for t in $tests; do cp "$out/results/$t.out" "$dir/expected/$t.out"; done
  echo "expected/ rewritten: review with git diff"
fi
[ $status = 0 ] || { [ -f "$out/regression.diffs" ] && cat "$out/regression.diffs"; }
[ $existing = 1 ] || stop_cluster regress
exit $status
