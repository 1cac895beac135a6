#!/usr/bin/env bash
# scripts/dev/dist.sh: the source archive for PGXN, target/packages/insta_id-<version>.zip:
# the committed tree (HEAD) under insta_id-<version>/, META.json at its top.
# PGXN's client builds it with `make install PG_CONFIG=...` (README).
source "$(dirname "$0")/harness.sh"
cd "$repo"
version=$(insta_id_version)
python3 tests/meta_json.py "$repo" >/dev/null || { python3 tests/meta_json.py "$repo"; exit 1; }
[ -z "$(git status --porcelain --untracked-files=no)" ] \
  || echo "dist: uncommitted changes are not in the archive (it is made from HEAD)" >&2
mkdir -p target/packages
out="target/packages/insta_id-$version.zip"
git archive --format=zip --prefix="insta_id-$version/" -o "$out" HEAD
say "$out ($(git rev-parse --short HEAD))"
