#!/usr/bin/env bash
# insta-id(1), built from the tool's own --help texts (the one place they
# are written): what `insta-id --help` and each command's `--help` say, as
# a manual page. Used by package.sh; `man -l` reads what it prints.
#   scripts/dev/manpage.sh BINARY VERSION > insta-id.1
set -euo pipefail
bin=$1 version=$2
# roff: a backslash doubled, and a line that begins with . or ' escaped.
roff() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"; }
commands=$("$bin" --help | awk '/^Commands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {exit}' | grep -vx help)
cat <<HEAD
.TH INSTA-ID 1 "" "insta-id $version" "insta_id"
.SH NAME
insta-id \\- the logical shards of several PostgreSQL servers running insta_id
.SH SYNOPSIS
.B insta-id
.I command
[\\fIoptions\\fR]
.SH DESCRIPTION
.nf
HEAD
"$bin" --help | roff
echo ".fi"
for c in $commands; do
  printf '.SH "INSTA-ID %s"\n.nf\n' "$(tr a-z A-Z <<<"$c")"
  "$bin" "$c" --help | roff
  echo ".fi"
done
cat <<TAIL
.SH SEE ALSO
/usr/share/doc/insta-id/fleet.md
TAIL
