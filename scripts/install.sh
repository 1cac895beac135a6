#!/usr/bin/env bash
# Builds (release) and installs insta_id into the server of $PG_CONFIG, with
# sudo when its directories are not writable. Besides what pgrx installs (the
# library, the control file, this version's script and sql/'s upgrade
# scripts) it installs the frozen install scripts of earlier versions, so
# `CREATE EXTENSION insta_id VERSION '<old>'` works (the upgrade test uses it).
#   scripts/install.sh                         build and install
#   scripts/install.sh --copy-frozen-only DIR  only copy frozen scripts under DIR (packaging)
set -euo pipefail
cd "$(dirname "$0")/.."
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
version=$(sed -nE 's/^version = "(.*)"/\1/p' Cargo.toml | head -n1)
extdir="$("$PG_CONFIG" --sharedir)/extension"

copy_frozen() { # $1: destination extension directory, $2...: cp prefix
  local dest=$1; shift
  for f in sql/insta_id--*.sql; do
    [ -e "$f" ] || continue
    b=$(basename "$f")
    case "$b" in
      insta_id--*--*.sql) "$@" cp "$f" "$dest/$b" ;;              # upgrade script
      "insta_id--$version.sql") ;;                               # pgrx generates this one
      *) "$@" cp "$f" "$dest/$b" ;;                              # an earlier version
    esac
  done
}

if [ "${1:-}" = --copy-frozen-only ]; then
  dest="$2$extdir"; mkdir -p "$dest"; copy_frozen "$dest"; exit 0
fi

sudo_flag=(); prefix=()
if [ ! -w "$extdir" ] || [ ! -w "$("$PG_CONFIG" --pkglibdir)" ]; then
  sudo_flag=(--sudo); prefix=(sudo)
fi
cargo pgrx install --release --pg-config "$PG_CONFIG" "${sudo_flag[@]}"
[ -f "$extdir/insta_id--$version.sql" ] || { echo "install: insta_id--$version.sql was not installed" >&2; exit 1; }
copy_frozen "$extdir" "${prefix[@]}"
echo "installed insta_id $version into $extdir"
