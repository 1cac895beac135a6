#!/usr/bin/env bash
# Releases of insta_id's SQL. sql/ holds one base install script
# (insta_id--0.1.0.sql) and an upgrade script per release; PostgreSQL
# installs any earlier version from the base along that chain. The current
# version's install script is generated from src/*.sql by pgrx at build
# time. sql/SHA256SUMS freezes what has been released: every file of sql/
# once its version is out, and the generated script of the current version
# once it is (its checksum without pgrx's source-location comments, which
# move when Rust code does).
#
#   scripts/dev/release.sh check    (make check) released files
#                                   unchanged; in sql/ only released files and
#                                   the upgrade script to the version being
#                                   made; the CHANGELOG agrees
#   scripts/dev/release.sh freeze   release Cargo.toml's version: its
#                                   CHANGELOG heading must carry a date; then
#                                   commit, and run:
#   scripts/dev/release.sh tag      record the released version's commit
#                                   (HEAD) in sql/RELEASES, commit that, and
#                                   `git tag -a v<version>` it. Tags do not
#                                   travel with every clone; sql/RELEASES
#                                   does (make bench builds the previous
#                                   release from it)
#
# Both read the generated script where `scripts/dev/build.sh install` put it.
source "$(dirname "$0")/harness.sh"
cd "$repo"
version=$(insta_id_version)
sums=sql/SHA256SUMS
generated="$("$PG_CONFIG" --sharedir)/extension/insta_id--$version.sql"

# The released form of the generated script: pgrx's "-- src/x.rs:NN" lines out.
generated_sum() {
  [ -f "$generated" ] || { echo "release.sh: $generated is missing: scripts/dev/build.sh install first" >&2; return 1; }
  grep -vE '^-- src/[^ ]+\.rs:[0-9]+$' "$generated" | sha256sum | cut -d' ' -f1
}
recorded() { sed -nE "s/^([0-9a-f]{64})  $1\$/\\1/p" "$sums"; }
released() { [ -n "$(recorded "insta_id--$version.sql")" ]; }

case "${1:-}" in
  check)
    bad=0
    fail() { echo "release.sh: $*" >&2; bad=1; }
    while read -r sum name; do
      if [ -f "sql/$name" ]; then
        [ "$(sha256sum "sql/$name" | cut -d' ' -f1)" = "$sum" ] || fail "sql/$name was released and has changed"
      elif [ "$name" = "insta_id--$version.sql" ]; then
        [ "$(generated_sum)" = "$sum" ] ||
          fail "src/*.sql has changed since $version was released: bump Cargo.toml's version and add an upgrade script (CONTRIBUTING.md, Releases)"
      fi
    done <"$sums"
    for f in sql/insta_id--*.sql; do
      name=${f#sql/}
      [ -n "$(recorded "$name")" ] && continue
      if released || [ "${name##*--}" != "$version.sql" ] || [ "$name" = "insta_id--$version.sql" ]; then
        fail "$f is not in $sums: only the upgrade script to the version being made ($version) may be unreleased"
      fi
    done
    # Every version an upgrade script starts from was released: its commit.
    for f in sql/insta_id--*--*.sql; do
      from=${f#sql/insta_id--}; from=${from%%--*}
      grep -qE "^${from//./\\.} [0-9a-f]{40}$" sql/RELEASES || fail "$from has no commit in sql/RELEASES"
    done
    if released; then
      grep -qE "^## $version \([0-9]{4}-[0-9]{2}-[0-9]{2}\)$" CHANGELOG.md || fail "$version is released but CHANGELOG.md has no '## $version (date)'"
    else
      grep -qE "^## Unreleased \($version\)$" CHANGELOG.md || fail "CHANGELOG.md has no '## Unreleased ($version)' for the version being made"
    fi
    [ $bad = 0 ] && echo "release.sh: sql/ and the generated script agree with $sums and CHANGELOG.md"
    ;;
  freeze)
    released && { echo "release.sh: $version is already released" >&2; exit 1; }
    grep -qE "^## $version \([0-9]{4}-[0-9]{2}-[0-9]{2}\)$" CHANGELOG.md ||
      { echo "release.sh: give the release its date in CHANGELOG.md first: '## $version (YYYY-MM-DD)'" >&2; exit 1; }
    for f in sql/insta_id--*.sql; do
      [ -n "$(recorded "${f#sql/}")" ] || echo "$(sha256sum "$f" | cut -d' ' -f1)  ${f#sql/}" >>"$sums"
    done
    echo "$(generated_sum)  insta_id--$version.sql" >>"$sums"
    say "$version frozen in $sums: commit it, then scripts/dev/release.sh tag"
    ;;
  tag)
    released || { echo "release.sh: $version is not frozen: release.sh freeze first" >&2; exit 1; }
    [ -z "$(git status --porcelain)" ] || { echo "release.sh: commit the release first (the tree has changes)" >&2; exit 1; }
    grep -qE "^${version//./\\.} " sql/RELEASES && { echo "release.sh: $version is in sql/RELEASES already" >&2; exit 1; }
    commit=$(git rev-parse HEAD)
    echo "$version $commit" >>sql/RELEASES
    git tag -a "v$version" -m "insta_id $version" "$commit"
    say "v$version is $commit: commit sql/RELEASES"
    ;;
  *)
    sed -n '2,27p' "$0" >&2; exit 2 ;;
esac
