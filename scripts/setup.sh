#!/usr/bin/env bash
# Installs everything building, testing and benchmarking insta_id needs, on a
# fresh Debian machine, as root or as a user with sudo. Idempotent: when all is
# in place it only checks, in about a second.
#   Debian: postgresql-15, postgresql-server-dev-15, postgresql-15-plproxy
#           (routing across servers), libclang-dev, clang, sudo
#   Rust:   cargo-pgrx 0.18.0 (--locked), rustfmt and clippy
#   pgrx:   `cargo pgrx init` against the system pg_config (downloads nothing)
set -euo pipefail

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGRX_VERSION=0.18.0
say() { printf '==> %s\n' "$*"; }

if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi

pkgs=(postgresql-15 postgresql-server-dev-15 postgresql-15-plproxy libclang-dev clang sudo)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

export PATH="$HOME/.cargo/bin:$PATH"
command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }

if ! cargo pgrx --version 2>/dev/null | grep -q " $PGRX_VERSION\$"; then
  say "installing cargo-pgrx $PGRX_VERSION (takes a few minutes)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet
fi

if command -v rustup >/dev/null; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
  done
fi

pgrx_home=${PGRX_HOME:-$HOME/.pgrx}
if ! grep -qs "^pg15 = \"$PG_CONFIG\"" "$pgrx_home/config.toml"; then
  say "cargo pgrx init --pg15 $PG_CONFIG"
  cargo pgrx init --pg15 "$PG_CONFIG" >/dev/null
fi
