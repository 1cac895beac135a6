#!/usr/bin/env bash
# The packages a DBA installs (as root, or a user with sudo):
# - scripts/dev/package.sh: the .deb of every supported major holds exactly the
#   library, control file, every install and upgrade script, README and
#   license, at the paths of the PostgreSQL project's own Debian packages,
#   and depends on that major's server package;
# - the .deb for 15 installs with dpkg -i into Debian's PostgreSQL 15 on this
#   machine: CREATE EXTENSION and ALTER EXTENSION UPDATE from 0.1.0 work from
#   it (preloaded), dpkg -r leaves no file of it behind. Files an earlier
#   `make install` put there are moved aside first and put back at the end;
# - the fleet tool's own .deb (insta-id, /usr/bin/insta-id) holds no file of
#   the per-major packages, so 15's and 18's install side by side, and runs;
# - scripts/dev/dist.sh: the PGXN archive, with a META.json valid against the PGXN
#   Meta Spec whose version is Cargo.toml's (and an invalid one is refused).
# Built with the ci profile (`make package` ships release builds).
source "$(dirname "$0")/../scripts/dev/harness.sh"
source "$(dirname "$0")/checks.sh"
cd "$repo"
if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi
version=$(insta_id_version) arch=$(dpkg --print-architecture)
deb_of() { echo "target/packages/postgresql-$1-insta-id_${version}_$arch.deb"; }
installed() { dpkg-query -W -f='${Status} ${Version}' postgresql-15-insta-id 2>/dev/null | grep "^install ok installed" || echo no; }
dpkg_log=$(mktemp)
run_dpkg() { "${SUDO[@]}" dpkg "$@" >"$dpkg_log" 2>&1 || { cat "$dpkg_log"; return 1; }; }

scripts/dev/package.sh --profile ci 2>/dev/null
for m in $PG_SUPPORTED; do
  deb=$(deb_of "$m")
  expected=$( { echo "./usr/lib/postgresql/$m/lib/insta_id.so"
                echo "./usr/share/postgresql/$m/extension/insta_id.control"
                echo "./usr/share/postgresql/$m/extension/insta_id--$version.sql"
                for f in sql/insta_id--*.sql; do echo "./usr/share/postgresql/$m/extension/${f#sql/}"; done
                echo "./usr/share/doc/postgresql-$m-insta-id/README.md"
                echo "./usr/share/doc/postgresql-$m-insta-id/copyright"; } | sort)
  check "$m: the .deb's files are at the PostgreSQL packages' paths" \
    "$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $6}' | sort)" "$expected"
  check "$m: package name, version, dependency on the server package" \
    "$(dpkg-deb -f "$deb" Package Version Depends | sed -E 's/, libc6 \(>= [0-9.]+\)$//')" \
    "Package: postgresql-$m-insta-id
Version: $version
Depends: postgresql-$m"
  check "$m: its control file's default_version is $version" \
    "$(dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/share/postgresql/$m/extension/insta_id.control" | sed -nE "s/^default_version = '(.*)'/\1/p")" "$version"
done

tool=target/packages/insta-id_${version}_$arch.deb
check "the tool's .deb holds the binary and its docs, and no file of a per-major package" \
  "$(dpkg-deb -c "$tool" | awk '$1 !~ /^d/ {print $6}' | sort)" \
  "./usr/bin/insta-id
./usr/share/doc/insta-id/copyright
./usr/share/doc/insta-id/fleet.md
./usr/share/man/man1/insta-id.1.gz"
check "the tool's package: name, version, what it needs" \
  "$(dpkg-deb -f "$tool" Package Version Recommends)" "Package: insta-id
Version: $version
Recommends: postgresql-client"
tree=$(mktemp -d)
dpkg-deb -x "$tool" "$tree"
check "the packaged insta-id runs and says its version" "$("$tree/usr/bin/insta-id" --version)" "insta-id $version"
check "its manual page: the sections users expect, one for each command, from their --help" \
  "$(zcat "$tree/usr/share/man/man1/insta-id.1.gz" | grep '^\.S[HS]' | tr '\n' ' ')" \
  '.SH NAME .SH SYNOPSIS .SH DESCRIPTION .SH COMMANDS .SS "insta-id status" .SS "insta-id plan" .SS "insta-id move" .SS "insta-id rebalance" .SS "insta-id verify" .SH EXIT STATUS .SH ENVIRONMENT .SH FILES .SH EXAMPLES .SH SEE ALSO '
# Read at 80 columns (man -l, no warning from groff): no line wider.
check "its manual page reads at 80 columns, without a warning" \
  "$(zcat "$tree/usr/share/man/man1/insta-id.1.gz" >"$tree/insta-id.1"
     { MANWIDTH=80 man -l "$tree/insta-id.1" 2>&1 | awk 'length > 80 {print "wide: " $0}'
       groff -man -Tutf8 -ww -z "$tree/insta-id.1" 2>&1; } | head -5)" ""
check "its exit statuses are in --help, as in the manual page" \
  "$("$tree/usr/bin/insta-id" --help | grep -cE '^  (0|1|2|3|75|130|143) ')" "7"
rm -rf "$tree"

# Round trip into Debian's PostgreSQL 15.
use_pg 15
deb=$(deb_of 15)
libdir=$("$PG_CONFIG" --pkglibdir) extdir=$("$PG_CONFIG" --sharedir)/extension
aside=$(mktemp -d)
ours() { find "$libdir" "$extdir" -maxdepth 1 -name 'insta_id*' | sort; }
restore() {
  stop_cluster pkg 2>/dev/null || true
  [ "$(installed)" = no ] || run_dpkg -r postgresql-15-insta-id
  [ -z "$(ls -A "$aside")" ] || "${SUDO[@]}" cp -p "$aside"/lib/* "$libdir/" 2>/dev/null || true
  [ -z "$(ls -A "$aside")" ] || "${SUDO[@]}" cp -p "$aside"/ext/* "$extdir/" 2>/dev/null || true
  rm -rf "$aside" "$dpkg_log"
}
trap restore EXIT
mkdir -p "$aside/lib" "$aside/ext"
[ "$(installed)" = no ] || run_dpkg -r postgresql-15-insta-id   # left by an interrupted run
for f in $(ours); do
  if dpkg -S "$f" >/dev/null 2>&1; then echo "$f belongs to a package: $(dpkg -S "$f")" >&2; exit 1; fi
  case "$f" in "$libdir"/*) cp -p "$f" "$aside/lib/" ;; *) cp -p "$f" "$aside/ext/" ;; esac
  "${SUDO[@]}" rm -f "$f"
done

run_dpkg -i "$deb"
check "15: dpkg -i installed it" "$(installed)" "install ok installed $version"
check "15: dpkg knows every file it put there" "$(ours)" \
  "$(dpkg -L postgresql-15-insta-id | grep -E "^($libdir|$extdir)/insta_id" | sort)"
start_cluster pkg --preload
q -c "CREATE DATABASE fresh" -c "CREATE DATABASE old"
q -d fresh -c "CREATE EXTENSION insta_id"
q -d old -c "CREATE EXTENSION insta_id VERSION '0.1.0'" -c "ALTER EXTENSION insta_id UPDATE"
for db in fresh old; do
  check "15, $db: the extension is $version from the package" \
    "$(q -d $db -c "SELECT extversion FROM pg_extension WHERE extname = 'insta_id'")" "$version"
  check_true "15, $db: next_id mints shard 7's IDs with the shared guard" \
    "SELECT insta_id.guard_mode() = 'shared' AND insta_id.shard_id(insta_id.next_id(7, 's')) = 7" \
    -d $db -c "CREATE SEQUENCE s"
done
stop_cluster pkg
run_dpkg -r postgresql-15-insta-id
check "15: dpkg -r removed it" "$(installed)" no
check "15: no file of insta_id is left" "$(ours)" ""
start_cluster pkg
check "15: PostgreSQL no longer offers insta_id" \
  "$(q -c "SELECT count(*) FROM pg_available_extensions WHERE name = 'insta_id'")" 0
stop_cluster pkg

# PGXN.
scripts/dev/dist.sh 2>/dev/null
unpacked=$(mktemp -d); trap 'rm -rf "$unpacked"; restore' EXIT
python3 -m zipfile -e "target/packages/insta_id-$version.zip" "$unpacked"
dist="$unpacked/insta_id-$version"
out=$(python3 tests/meta_json.py "$dist" 2>&1) && rc=0 || rc=$?
check "dist: META.json of the archive is valid and says $version" "$rc $out" \
  "0 meta_json.py: $dist/META.json is valid (PGXN Meta Spec 1.0.0, version $version)"
for f in Makefile insta_id.control Cargo.toml Cargo.lock LICENSE README.md src/sql/ids.sql sql/SHA256SUMS sql/insta_id--0.1.0.sql; do
  check "dist: the archive has $f" "$([ -f "$dist/$f" ] && echo yes)" yes
done
# The validator refuses what PGXN would: a missing license, a wrong version, a file not there.
for broken in 'del m["license"]' 'm["version"] = "0.4.9"' 'm["provides"]["insta_id"]["file"] = "insta_id.sql"' \
              'm["maintainer"] = 42' 'm["prereqs"]["runtime"]["requires"]["PostgreSQL"] = "fifteen"'; do
  python3 -c "import json, sys; m = json.load(open(sys.argv[1])); $broken; json.dump(m, open(sys.argv[1], 'w'))" "$dist/META.json"
  python3 tests/meta_json.py "$dist" >/dev/null && rc=0 || rc=$?
  check "dist: META.json with $broken is refused" "$rc" 1
  cp META.json "$dist/META.json"
done
finish
