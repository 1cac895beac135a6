#!/usr/bin/env bash
# Every cargo invocation, for the PostgreSQL the harness picked (PG or
# PG_CONFIG): the pgrx feature pgNN and the pg_config to build against.
#
#   scripts/dev/build.sh install [PROFILE]   build and install into the server of
#                                        PG_CONFIG (sudo when its directories
#                                        need it), and the insta-id tool into
#                                        $PREFIX/bin (/usr/local/bin), its manual
#                                        page into $PREFIX/share/man/man1; PROFILE
#                                        release (default) or ci (the tests':
#                                        no LTO, quicker build); nothing when
#                                        INSTA_ID_INSTALLED=PROFILE (make test
#                                        installed it before its suites)
#   scripts/dev/build.sh package [PROFILE]   the files install would install, under
#                                        target/packages/pgNN/tree (their paths
#                                        on PG_CONFIG's server); scripts/dev/package.sh
#                                        makes the .deb of them
#   scripts/dev/build.sh previous [V]        the previous release's library (or
#                                        release V's; its
#                                        commit in sql/RELEASES, release
#                                        build) in a copy of
#                                        PG_CONFIG's installation, for make
#                                        bench's twin cluster: prints the
#                                        copy's pg_config
#   scripts/dev/build.sh release-library V [PROFILE]   release V's library
#                                        (its commit in sql/RELEASES) for
#                                        PG: prints its path
#   scripts/dev/build.sh release-tool V      release V's insta-id (release
#                                        build): prints its path
#   scripts/dev/build.sh test-rust           pure Rust unit and property tests,
#                                        the tool's too (cli/)
#   scripts/dev/build.sh test-pg             #[pg_test]s inside PostgreSQL
#   scripts/dev/build.sh lint                rustfmt and clippy -D warnings
#
# Besides what pgrx installs (the library, the control file, this version's
# script generated from src/*.sql, and sql/'s upgrade scripts) install copies
# sql/ whole: the base script of 0.1.0 and the chain from it, so
# `CREATE EXTENSION insta_id VERSION '<old>'` works (the upgrade tests use
# it), and removes any other script of insta_id an earlier install left there.
source "$(dirname "$0")/harness.sh"
cd "$repo"
export PATH="$HOME/.cargo/bin:$PATH"
# pgrx's build scripts read the pg_config to build against from here.
export PGRX_PG_CONFIG_PATH="$PG_CONFIG"
features=(--no-default-features --features "pg$PG")
version=$(insta_id_version)
extdir="$("$PG_CONFIG" --sharedir)/extension"

copy_chain() { # $1: destination extension directory, $2...: command prefix (sudo)
  local dest=$1 f; shift
  for f in "$dest"/insta_id--*.sql; do
    [ -e "$f" ] || continue
    case "${f##*/}" in "insta_id--$version.sql") ;; *) [ -f "sql/${f##*/}" ] || "$@" rm -f "$f" ;; esac
  done
  "$@" cp sql/insta_id--*.sql "$dest/"
}

# A copy of PG_CONFIG's installation under $1 (binaries, libraries and share
# directory, and any more directories given, at their paths below it, from
# which PostgreSQL finds them), made when missing or when the installation's
# version changed; true when made. Its pg_config is $1 followed by
# PG_CONFIG's bindir.
copy_installation() {
  local root=$1 d; shift
  [ "$(cat "$root/.version" 2>/dev/null)" = "$("$PG_CONFIG" --version)" ] && return 1
  rm -rf "$root"
  for d in "$("$PG_CONFIG" --bindir)" "$("$PG_CONFIG" --pkglibdir)" "$("$PG_CONFIG" --sharedir)" "$@"; do
    mkdir -p "$root$(dirname "$d")"; cp -a "$d" "$root$d"
  done
  "$PG_CONFIG" --version >"$root/.version"
}

# The installation test-pg tests in: a copy of PG's, under
# target/pgrx-test/pgNN, because cargo pgrx test installs its test build into
# the installation it runs (cp over insta_id.so, in place), and suites using
# the installed build run beside it. pgrx's bindings follow its pg_config
# (the same headers; the next build for PG against PG's own generates them
# again). Sets root and PGRX_PG_CONFIG_PATH.
test_installation() {
  root="$repo/target/pgrx-test/pg$PG"
  copy_installation "$root" "$("$PG_CONFIG" --includedir-server)" || true
  export PGRX_PG_CONFIG_PATH="$root$("$PG_CONFIG" --bindir)/pg_config"
}

# Release $1's source (its commit in sql/RELEASES), unpacked once under
# target/previous/$1/src: sets $dir.
release_source() {
  local v=$1 commit
  commit=$(sed -nE "s/^${v//./\\.} ([0-9a-f]{40})$/\1/p" sql/RELEASES)
  [ -n "$commit" ] && git cat-file -e "$commit^{commit}" 2>/dev/null ||
    { echo "release $v has no commit in sql/RELEASES, or this clone lacks it" >&2; exit 1; }
  dir="$repo/target/previous/$v"
  if [ "$(cat "$dir/commit" 2>/dev/null)" != "$commit" ]; then
    rm -rf "$dir"; mkdir -p "$dir/src"
    git archive "$commit" | tar -x -C "$dir/src"
    # Under target/, cargo would take this repository's workspace for its
    # own: a copy with no [workspace] of its own gets an empty one.
    grep -q '^\[workspace\]' "$dir/src/Cargo.toml" || printf '\n[workspace]\n' >>"$dir/src/Cargo.toml"
    echo "$commit" >"$dir/commit"
  fi
}

# Builds release $1's library for PG with profile $2, once; prints its
# path. The releases build in this repository's target directory, so that
# their dependencies (pgrx, the same version) are this version's build.
release_library() {
  local v=$1 profile=$2 dir lib
  release_source "$v"; lib="$dir/pg$PG/$profile/insta_id.so"
  if [ ! -f "$lib" ]; then
    local started; started=$(date +%s)
    say "building insta_id $v's library for PostgreSQL $PG ($profile build)" >&2
    (cd "$dir/src" && CARGO_TARGET_DIR="$repo/target" \
      cargo build --quiet --profile "$profile" --lib "${features[@]}") >&2
    # (over this version's target/PROFILE/libinsta_id.so, which its next
    # build links again)
    mkdir -p "$(dirname "$lib")"; cp "$repo/target/$profile/libinsta_id.so" "$lib"
    [ -f "$repo/target/times.tsv" ] &&
      printf 'build\trelease %s %s pg%s\t%s\tdone\n' "$v" "$profile" "$PG" $(( $(date +%s) - started )) >>"$repo/target/times.tsv"
  fi
  echo "$lib"
}

# Builds release $1's fleet tool (release build), once; prints its path.
release_tool() {
  local v=$1 dir tool
  release_source "$v"; tool="$dir/insta-id"
  if [ ! -x "$tool" ]; then
    say "building insta_id $v's insta-id (release build)" >&2
    (cd "$dir/src" && CARGO_TARGET_DIR="$repo/target" \
      cargo build --quiet --profile release -p insta-id) >&2
    cp "$repo/target/release/insta-id" "$tool"
  fi
  echo "$tool"
}

case "${1:-}" in
  install)
    profile=${2:-release}
    # make test installs every version's build once, before its suites run
    # side by side (scripts/dev/lanes.sh): one suite installing again would
    # rewrite a library other suites' servers have loaded.
    if [ "${INSTA_ID_INSTALLED:-}" = "$profile" ]; then
      [ -f "$extdir/insta_id--$version.sql" ] ||
        { echo "install: INSTA_ID_INSTALLED=$profile, but insta_id $version is not in $extdir" >&2; exit 1; }
      exit 0
    fi
    sudo_flag=(); prefix=()
    if [ ! -w "$extdir" ] || [ ! -w "$("$PG_CONFIG" --pkglibdir)" ]; then
      sudo_flag=(--sudo); prefix=(sudo)
    fi
    started=$(date +%s)
    cargo pgrx install --profile "$profile" --pg-config "$PG_CONFIG" "${sudo_flag[@]}"
    # (make test's record of where its time goes: scripts/dev/timed.sh)
    [ -f "$repo/target/times.tsv" ] &&
      printf 'build\tinstall %s pg%s\t%s\tdone\n' "$profile" "$PG" $(( $(date +%s) - started )) >>"$repo/target/times.tsv"
    [ -f "$extdir/insta_id--$version.sql" ] || { echo "install: insta_id--$version.sql was not installed" >&2; exit 1; }
    copy_chain "$extdir" "${prefix[@]}"
    say "installed insta_id $version ($profile build) into PostgreSQL $PG at $extdir"
    # The fleet tool: one for every PostgreSQL version, so not in any one's bindir.
    cargo build --quiet -p insta-id --profile "$profile"
    bindir=${PREFIX:-/usr/local}/bin; prefix=()
    [ -w "$bindir" ] || prefix=(sudo)
    tool="target/$([ "$profile" = dev ] && echo debug || echo "$profile")/insta-id"
    "${prefix[@]}" install -m 755 "$tool" "$bindir/insta-id"
    # Its manual page (man insta-id), made from its --help.
    mandir=${PREFIX:-/usr/local}/share/man/man1
    scripts/dev/manpage.sh "$tool" "$version" >"target/insta-id.1"
    "${prefix[@]}" install -D -m 644 "target/insta-id.1" "$mandir/insta-id.1"
    say "installed insta-id into $bindir, its manual page into $mandir"
    ;;
  package)
    tree="target/packages/pg$PG/tree"; rm -rf "$tree"
    cargo pgrx package --profile "${2:-release}" --pg-config "$PG_CONFIG" --out-dir "$tree"
    mkdir -p "$tree$extdir"; copy_chain "$tree$extdir"
    ;;
  previous)
    # Release $2, or the one before this version: the newest upgrade
    # script's source.
    prev=${2:-$(ls sql/ | sed -nE "s/^insta_id--(.*)--$version\.sql$/\1/p")}
    [ -n "$prev" ] || { echo "previous: no upgrade script leads to $version" >&2; exit 1; }
    lib=$(release_library "$prev" release)
    # Its own installation, so that its '$libdir/insta_id' is that library
    # (one backend cannot load two builds: their settings collide). The
    # binaries, libraries and share directory keep their relative places,
    # from which PostgreSQL finds them; this version's chain (copied with the
    # share directory) installs the previous version's SQL there.
    root="$repo/target/previous/$prev/pg$PG/install"
    copy_installation "$root" && cp "$lib" "$root$("$PG_CONFIG" --pkglibdir)/insta_id.so"
    echo "$root$("$PG_CONFIG" --bindir)/pg_config"
    ;;
  release-library)
    release_library "${2:?a release of sql/RELEASES}" "${3:-release}"
    ;;
  release-tool)
    release_tool "${2:?a release of sql/RELEASES}"
    ;;
  test-rust)
    # (the ci profile, the bindings of test-pg's installation: one build of
    # pgrx and pgrx-tests for both suites)
    test_installation
    cargo test --profile ci --lib "${features[@]}"
    cargo test --profile ci -p insta-id
    ;;
  test-pg)
    test_installation
    # initdb and postgres refuse root: pgrx's harness then runs them as postgres.
    # (its build, in the test profile, is part of that suite's time)
    data="$root/data"; mkdir -p "$data"
    runas=$(id -un)
    if [ "$(id -u)" = 0 ]; then runas=postgres; chown postgres "$data"; fi
    CARGO_PGRX_TEST_RUNAS=$runas CARGO_PGRX_TEST_PGDATA=$data cargo pgrx test --profile ci "pg$PG"
    ;;
  lint)
    cargo fmt --all -- --check
    cargo clippy --all-targets "${features[@]}" --features pg_test -- -D warnings
    cargo clippy -p insta-id --all-targets -- -D warnings
    ;;
  *)
    sed -n '2,30p' "$0" >&2; exit 2 ;;
esac
