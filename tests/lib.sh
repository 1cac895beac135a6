# Helpers for the shell test suites: source it, then use the functions.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGBIN=$("$PG_CONFIG" --bindir)
export PATH="$PGBIN:$PATH"
passed=0; failed=0

# start_cluster NAME [--preload]: a fresh throwaway cluster; sets PGHOST/PGPORT.
start_cluster() {
  local name=$1; shift
  "$repo/scripts/cluster.sh" destroy --name "$name"
  "$repo/scripts/cluster.sh" start --name "$name" "$@"
  eval "$("$repo/scripts/cluster.sh" env --name "$name")"
}

stop_cluster() { "$repo/scripts/cluster.sh" destroy --name "$1"; }

q() { psql -X -v ON_ERROR_STOP=1 -qtA "$@"; }

# check DESCRIPTION ACTUAL EXPECTED
check() {
  if [ "$2" = "$3" ]; then
    passed=$((passed + 1)); echo "ok   - $1"
  else
    failed=$((failed + 1)); echo "FAIL - $1: got '$2', expected '$3'"
  fi
}

# check_true DESCRIPTION SQL-BOOLEAN [psql args...]
check_true() {
  local what=$1 sql=$2; shift 2
  check "$what" "$(q "$@" -c "$sql")" t
}

finish() {
  echo "$(basename "$0"): $passed passed, $failed failed"
  [ "$failed" = 0 ]
}
