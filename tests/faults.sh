#!/usr/bin/env bash
# Faults on real servers, with the clock moved under them by libfaketime
# (harness: cluster_start --faketime, clock_offset). For each configuration
# the README calls exact (preloaded; not preloaded on 17+):
# 1. A concurrent burst (4 pgbench clients, one sequence) while the clock
#    steps back 200 ms, back 2 s, forward 3 s and back 1 s:
#    - wait: zero duplicates; per session the time field never decreases;
#      full milliseconds (1024 IDs) around every step; once the clock has
#      settled after a step, no ID is further ahead of its session's clock
#      than the step plus one ms per 1024 IDs issued since (README); IDs are
#      on the clock again at the end;
#    - error: 54000 instead of borrowing: not even that one ms per 1024 IDs;
#    - legacy: IDs follow the clock back, like the original.
# 2. Crashes: kill -9 of a backend, and an immediate shutdown, in a burst
#    whose clock was just set back 8 s (IDs ahead of it): every committed row
#    is intact, and a burst after the restart repeats none of them.
# 3. Restarts with the clock 4 s behind the IDs already issued, after a clean
#    and after an immediate shutdown: no ID repeats, thanks to the durable
#    high-water mark; with the mark file deleted the same restart repeats
#    IDs (so the test can fail).
source "$(dirname "$0")/../scripts/harness.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
[ "$(id -u)" = 0 ] && chmod 777 "$work"
C=faults

fq() { q -d faults "$@"; }

setup_db() { # $1: on_overflow mode
  PGOPTIONS="-c client_min_messages=warning" q -d postgres -c "DROP DATABASE IF EXISTS faults" -c "CREATE DATABASE faults"
  # The steps here (up to 8 s) test borrowing past the default bound on the
  # lead (1 s, which tests/tap/t/001_lead.pl tests): allow 10 s.
  q -d postgres -c "ALTER DATABASE faults SET insta_id.on_overflow = '$1'" \
    -c "ALTER DATABASE faults SET insta_id.max_lead = '10s'" \
    -c "ALTER DATABASE faults SET work_mem = '512MB'"  # the checks group millions of IDs
  fq -c "SET client_min_messages = error" -f - <<'SQL'
CREATE EXTENSION insta_id;
CREATE SEQUENCE s;
-- n: the order rows were written in, across sessions; at: the session's
-- clock right after next_id returned (same row, evaluated after it).
CREATE TABLE ids (n bigint GENERATED ALWAYS AS IDENTITY, id bigint NOT NULL, pid int NOT NULL, at timestamptz NOT NULL);
CREATE TABLE steps (k int, label text, back_ms int, n_written bigint, n_settled bigint);
CREATE TABLE refusals (pid int, refused int);
-- One ID per statement, 54000 caught: what an application in error mode sees.
CREATE FUNCTION burst_refusing(k int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE refused int := 0; v bigint;
BEGIN
  FOR i IN 1..k LOOP
    BEGIN
      v := insta_id.next_id(1, 's');
      INSERT INTO ids (id, pid, at) VALUES (v, pg_backend_pid(), clock_timestamp());
    EXCEPTION WHEN program_limit_exceeded THEN refused := refused + 1;
    END;
  END LOOP;
  INSERT INTO refusals VALUES (pg_backend_pid(), refused);
END $$;
SQL
}
echo "INSERT INTO ids (id, pid, at) SELECT insta_id.next_id(1, 's'), pg_backend_pid(), clock_timestamp() FROM generate_series(1, 2000);" >"$work/burst.sql"
echo "SELECT burst_refusing(500);" >"$work/refusing.sql"
n_now() { fq -c "SELECT last_value FROM ids_n_seq"; }

# burst SCRIPT SECONDS [LOGPREFIX]: 4 clients in the background; pid in
# $burst_pid, burst_wait waits for them.
burst() {
  pgbench -n -c 4 -j 2 -T "$2" -f "$work/$1" ${3:+-l --log-prefix="$work/$3"} faults >"$work/pgbench.log" 2>&1 &
  burst_pid=$!
}
burst_wait() { wait "$burst_pid" || { cat "$work/pgbench.log"; check "pgbench ran" failed ok; }; }

# step K LABEL OFFSET BACK_MS: move the clock, note where it happened.
step() {
  local before; before=$(n_now)
  clock_offset $C "$3"
  fq -c "INSERT INTO steps VALUES ($1, '$2', $4, $before, $(n_now))"
}

# Four steps during one 10 s burst: back 200 ms, back 2 s, forward 3 s, back 1 s.
stepped_burst() { # $1: pgbench script
  clock_offset $C +0
  burst "$1" 10
  sleep 1.5
  step 1 "back 200 ms" -0.2 200
  step 2 "back 2 s" -2.2 2000
  step 3 "forward 3 s" +0.8 0
  step 4 "back 1 s" -0.2 1000
  burst_wait
  settle
  echo "     $1: $(fq -c "SELECT count(*) || ' IDs from ' || count(DISTINCT pid) || ' sessions' FROM ids")"
}

# Per settled step, in table regime: the rows written after every process
# saw the new clock and before the next step, with how far each ID is ahead
# of its own session's clock (read right after next_id, in the same row) and
# how many IDs were written since the step. steps.lead_ms: how far the newest
# ID was ahead of the clock just after the step (the step back, plus any lead
# not yet caught up before it). The README's bound: that lead plus one ms per
# 1024 IDs since, plus 2 ms for the clock read after next_id.
settle() {
  fq -q <<'SQL'
CREATE INDEX ON ids (n);
-- min_id(at) >> 23: the session's clock in ms since the epoch, like id >> 23.
CREATE TABLE regime AS
WITH b AS (SELECT k, n_written, n_settled,
                  coalesce(lead(n_written) OVER (ORDER BY k), (SELECT max(n) + 1 FROM ids)) AS n_next FROM steps)
SELECT b.k, i.n - b.n_written AS since, (i.id >> 23) AS ms, insta_id.min_id(i.at) >> 23 AS clock_ms
FROM b JOIN ids i ON i.n > b.n_settled AND i.n < b.n_next;
ALTER TABLE steps ADD lead_ms bigint;
UPDATE steps SET lead_ms = back_ms + (
  SELECT greatest(0, max(id >> 23) - (insta_id.min_id(max(at)) >> 23)) FROM ids WHERE n <= steps.n_written);
SQL
}
# ahead_over EXTRA: rows of settled regimes further ahead than lead + EXTRA.
ahead_over() {
  fq -c "SELECT count(*) FROM regime r JOIN steps s USING (k) WHERE r.ms - r.clock_ms > s.lead_ms + $1"
}

check_common() { # $1: label
  check "$1: zero duplicate IDs" "$(dups)" 0
  check "$1: per session, the time field never decreases" \
    "$(fq -c "SELECT count(*) FROM (SELECT id >> 23 AS ms, lag(id >> 23) OVER (PARTITION BY pid ORDER BY n) AS prev FROM ids) x WHERE ms < prev")" 0
  check "$1: at most 1024 IDs in any millisecond" "$(fq -c "SELECT max(c) <= 1024 FROM (SELECT count(*) c FROM ids GROUP BY id >> 23) m")" t
}

check_full_ms_at_steps() { # $1: label
  check "$1: full milliseconds (1024 IDs) around every step, so the guard was needed there" \
    "$(fq -c "WITH f AS (SELECT id >> 23 AS ms FROM ids GROUP BY 1 HAVING count(*) = 1024)
              SELECT string_agg(label, ', ' ORDER BY k) FROM steps s
              WHERE NOT EXISTS (SELECT FROM ids i JOIN f ON (i.id >> 23) = f.ms WHERE i.n BETWEEN s.n_written AND s.n_settled)")" ""
}

# IDs are on the clock again: an ID minted once the clock has passed every
# issued ms carries the clock's ms.
check_back_on_clock() { # $1: label
  fq -c "SELECT pg_sleep(0.01) FROM generate_series(1, 300) WHERE clock_timestamp() <= (SELECT insta_id.created_at(max(id)) FROM ids) + interval '2 ms'" >/dev/null
  check_true "$1: IDs are back on the clock once it has passed the newest ID" \
    "SELECT date_trunc('milliseconds', t0) <= insta_id.created_at(id) AND insta_id.created_at(id) <= t1
     FROM (SELECT clock_timestamp() t0, insta_id.next_id(1, 's') id, clock_timestamp() t1) x" -d faults
}

clock_steps() { # $1: configuration label
  local l="$1, clock steps, wait"
  setup_db wait
  stepped_burst burst.sql
  check_common "$l"
  check_full_ms_at_steps "$l"
  fq -c "SELECT label || ': lead ' || lead_ms || ' ms; IDs at most ' || max(r.ms - r.clock_ms) || ' ms ahead of their clock, bound ' || max(lead_ms + 2 + since / 1024)
          FROM regime r JOIN steps s USING (k) GROUP BY k, label, lead_ms ORDER BY k" | sed 's/^/     /'
  check "$l: once settled after a step, no ID is further ahead of its session's clock than the step's lead + 1 ms per 1024 IDs since (+2)" \
    "$(ahead_over "2 + r.since / 1024")" 0
  check_true "$l: after the 2 s step back, IDs ran ahead of the clock" \
    "SELECT max(ms - clock_ms) >= 1000 FROM regime WHERE k = 2" -d faults
  check_true "$l: insta_id.guard_stats counted every ID, the waits and the borrowed milliseconds" \
    "SELECT issued = (SELECT count(*) FROM ids) AND waits > 0 AND borrowed_ms > 0 AND refused = 0
     FROM insta_id.guard_stats WHERE database = current_database() AND sequence = 's'::regclass" -d faults
  check_back_on_clock "$l"

  l="$1, clock steps, error"
  setup_db error
  stepped_burst refusing.sql
  check_common "$l"
  check_true "$l: 54000 was raised (and caught) while the clock was behind" "SELECT sum(refused) > 0 FROM refusals" -d faults
  echo "     $l: $(fq -c "SELECT sum(refused) FROM refusals") calls refused with 54000"
  check_true "$l: insta_id.guard_stats counted each refusal, and no borrowed millisecond" \
    "SELECT g.refused = (SELECT sum(refused) FROM refusals) AND g.borrowed_ms = 0
     FROM insta_id.guard_stats g WHERE database = current_database() AND sequence = 's'::regclass" -d faults
  check "$l: no millisecond was borrowed: no ID further ahead of its session's clock than the step's lead (+2)" "$(ahead_over 2)" 0
  check_back_on_clock "$l"

  l="$1, clock steps, legacy"
  setup_db legacy
  stepped_burst burst.sql
  check_true "$l: IDs follow the clock back (a session's time field went back over 1.5 s)" \
    "SELECT min(ms - prev) < -1500 FROM (SELECT id >> 23 AS ms, lag(id >> 23) OVER (PARTITION BY pid ORDER BY n) AS prev FROM ids) x" -d faults
  check "$l: once settled, no ID is ahead of its session's clock" \
    "$(fq -c "SELECT count(*) FROM regime WHERE ms > clock_ms")" 0
}

# check_above LABEL N: every ID written after row N is in a later millisecond
# than every ID up to it (the IDs of a restart against those before).
check_above() {
  check "$1: every ID after the restart is above every ID before it" \
    "$(fq -c "SELECT count(*) FROM ids WHERE n > $2 AND (id >> 23) <= (SELECT max(id >> 23) FROM ids WHERE n <= $2)")" 0
}
dups() { fq -c "SELECT count(*) - count(DISTINCT id) FROM ids"; }

# Rows of finished transactions according to pgbench's per-transaction logs.
logged_rows() { cat "$work/$1".* 2>/dev/null | awk '$3 ~ /^[0-9]+$/' | wc -l | awk '{print $1 * 2000}'; }

crash_and_restart() { # $1: configuration label, $2: kill-backend | immediate
  local l="$1, $2 during a burst with the clock set back"
  setup_db wait
  clock_offset $C +0
  rm -f "$work/log-$2".*
  burst burst.sql 6 "log-$2"
  sleep 2
  clock_offset $C -8           # IDs now run ahead of the clock (by more than recovery takes)
  if [ "$2" = kill-backend ]; then
    as_pg kill -9 "$(fq -c "SELECT pid FROM pg_stat_activity WHERE datname = 'faults' AND application_name = 'pgbench' LIMIT 1")"
  else
    cluster_ctl $C -m immediate stop
  fi
  wait "$burst_pid" 2>/dev/null || true   # pgbench loses its connections
  [ "$2" != immediate ] || cluster_ctl $C start
  for _ in $(seq 1 60); do fq -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.5; done
  local before committed
  before=$(fq -c "SELECT count(*) FROM ids"); committed=$(logged_rows "log-$2")
  echo "     $l: $before rows after recovery, $committed reported committed by pgbench"
  check_true "$l: every committed row is there, and only whole transactions" \
    "SELECT $before >= $committed AND $committed > 0 AND $before % 2000 = 0" -d faults
  check_true "$l: the clock is still behind the newest ID" \
    "SELECT clock_timestamp() < insta_id.created_at(max(id)) FROM ids" -d faults
  local last; last=$(fq -c "SELECT coalesce(max(n), 0) FROM ids")
  burst burst.sql 3
  burst_wait
  check "$l: after the restart, zero duplicates among all IDs" "$(dups)" 0
  check_above "$l" "$last"
  clock_offset $C +0
}

mark_logged() {
  grep -c 'insta_id: the high-water mark of issued IDs is [0-9]* ms ahead of the clock' "$(cluster_dir $C)/server.log" || true
}

# restart_behind LABEL MODE [drop-mark]: a 5 s burst, stop (fast|immediate),
# set the clock 4 s back, into the milliseconds of that burst (as long as the
# restart takes under 4 s), start, burst again.
restart_behind() {
  local l="$1, restart ($2 stop) with the clock 4 s back${3:+, mark file deleted}"
  setup_db wait
  clock_offset $C +0
  burst burst.sql 5
  burst_wait
  local newest; newest=$(fq -c "SELECT max(id) FROM ids")
  check_true "$l: the high-water mark covers the newest ID" \
    "SELECT insta_id.high_water_mark() >= insta_id.created_at($newest)" -d faults
  local logged; logged=$(mark_logged)
  cluster_ctl $C -m "$2" stop
  [ -z "${3:-}" ] || as_pg rm -f "$(cluster_dir $C)/data/insta_id.mark"
  echo "-4" >"$(clock_file $C)"
  cluster_ctl $C start
  check_true "$l: the clock is behind the newest ID" \
    "SELECT clock_timestamp() < insta_id.created_at($newest)" -d faults
  fq -c "SELECT insta_id.next_id(1, 's')" >/dev/null   # the first ID loads the mark
  if [ -z "${3:-}" ]; then
    check "$l: the server log says a mark ahead of the clock was loaded" \
      "$(mark_logged)" "$((logged + 1))"
  fi
  local last; last=$(fq -c "SELECT max(n) FROM ids")
  burst burst.sql 3
  burst_wait
  local repeated; repeated=$(dups)
  if [ -z "${3:-}" ]; then
    check "$l: zero duplicates among all IDs" "$repeated" 0
    check_above "$l" "$last"
  else
    echo "     $l: $repeated duplicate IDs"
    check_true "$l: IDs repeat (what the mark prevents)" "SELECT $repeated > 0"
  fi
  clock_offset $C +0
}

run_config() { # $1: label, then cluster options
  local label=$1; shift
  # A commit must be on disk when the client hears of it (the harness's
  # default, off, loses the last commits in a crash by design).
  start_cluster $C --faketime --conf "synchronous_commit = on" "$@"
  check "$label: guard_mode() is shared" "$(q -d postgres -c "CREATE EXTENSION insta_id" -c "SELECT insta_id.guard_mode()")" shared
  clock_steps "$label"
  crash_and_restart "$label" kill-backend
  crash_and_restart "$label" immediate
  restart_behind "$label" fast
  restart_behind "$label" immediate
  restart_behind "$label" fast drop-mark
  stop_cluster $C
}

run_config preloaded --preload
if [ "$PG" -ge 17 ]; then run_config "not preloaded (DSM registry)"; fi
finish
