# Bookkeeping for the two test scripts that test packaging and drivers
# rather than servers (tests/clients.sh, tests/packages.sh) and for the
# bench's sanity checks, in TAP's format. Source it after scripts/dev/harness.sh.
checks=0; failed=0
# check DESCRIPTION ACTUAL EXPECTED
check() {
  checks=$((checks + 1))
  if [ "$2" = "$3" ]; then
    echo "ok $checks - $1"
  else
    failed=$((failed + 1)); echo "not ok $checks - $1"; echo "#   got:      '$2'"; echo "#   expected: '$3'"
  fi
}
# check_true DESCRIPTION SQL-BOOLEAN [psql args...]
check_true() {
  local what=$1 sql=$2; shift 2
  check "$what" "$(q "$@" -c "$sql")" t
}
# finish: the plan, a summary, and the exit status.
finish() {
  echo "1..$checks"
  echo "$(basename "$0") (PostgreSQL $PG): $((checks - failed)) passed, $failed failed"
  [ "$failed" = 0 ]
}
