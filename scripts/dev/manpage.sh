#!/usr/bin/env bash
# insta-id(1), built from the tool's own --help texts (the one place they
# are written): NAME, SYNOPSIS (each command's usage), DESCRIPTION
# (`insta-id --help`), COMMANDS (each command's --help), EXIT STATUS,
# ENVIRONMENT and FILES (the tail of `insta-id --help`), EXAMPLES (the
# commands' examples). Paragraphs are filled, so man wraps them to the
# reader's terminal; each option, command or exit status is a tagged
# paragraph. Used by `make install` and package.sh; `man -l` reads it.
#   scripts/dev/manpage.sh BINARY VERSION > insta-id.1
set -euo pipefail
bin=$1 version=$2
commands=$("$bin" --help | awk '/^Commands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {exit}' | grep -vx help)
examples=$(mktemp); trap 'rm -f "$examples"' EXIT

# clap's help text as roff. TOP: the tool's own help (its sections Exit
# status, Environment and Files become the page's); else a command's, its
# Examples kept for the page's EXAMPLES (appended to file EX).
to_roff() {
  awk -v top="$1" -v ex="$examples" '
    function esc(s) {
      gsub(/\\/, "\\\\e", s); gsub(/-/, "\\\\-", s)
      if (s ~ /^[.\047]/) s = "\\&" s
      return s
    }
    function out(s) { if (inex) print s >> ex; else print s }
    function text(s) { sub(/^ +/, "", s); out(esc(s)) }
    /^Usage: / { next }                       # (the SYNOPSIS says it)
    /^[A-Z][A-Za-z ]*:$/ {
      head = substr($0, 1, length($0) - 1); inex = 0; pending = 0
      if (top && head ~ /^(Exit status|Environment|Files)$/) print ".SH " toupper(head)
      else if (head == "Examples") { inex = 1; block = 0 }
      else printf ".PP\n.B %s\n", head
      list = 1; next
    }
    /^$/ { if (block) { out(".fi\n.RE"); block = 0 } pending = 1; next }
    # An example: its comment a paragraph, its command kept as written.
    inex && /^  # / { if (block) { out(".fi\n.RE"); block = 0 } out(".PP"); text(substr($0, 5)); next }
    inex { if (!block) { out(".RS\n.nf"); block = 1 } out(esc(substr($0, 3))); next }
    # A tag: an option, an argument, a command, an exit status, a name;
    # its text on the same line after two spaces or more, or on the next.
    # (Intervals spelled out: mawk, the awk of Debian, has no {m,n}.)
    list && /^  [ ]?[ ]?[ ]?[ ]?[^ ]/ {
      line = $0; sub(/^ +/, "", line)
      if (match(line, /   */)) { tag = substr(line, 1, RSTART - 1); rest = substr(line, RSTART + RLENGTH) }
      else { tag = line; rest = "" }
      print ".TP"; print "\\fB" esc(tag) "\\fR"
      if (rest != "") text(rest)
      pending = 0; next
    }
    list && /^       +[^ ]/ { if (pending) print ".IP"; pending = 0; text($0); next }
    { if (pending) print ".PP"; pending = 0; text($0) }
    END { if (block) out(".fi\n.RE") }
  '
}

cat <<HEAD
.TH INSTA-ID 1 "" "insta-id $version" "insta_id"
.nh
.SH NAME
insta-id \\- the logical shards of several PostgreSQL servers running insta_id
.SH SYNOPSIS
HEAD
for c in $commands; do
  "$bin" "$c" --help | sed -n 's/^Usage: insta-id //p' |
    awk '{ gsub(/\\/, "\\\\e"); gsub(/-/, "\\\\-"); print ".PP\n.B insta-id\n" $0 }'
done
echo ".SH DESCRIPTION"
"$bin" --help | to_roff 1 >"$examples.top"
# (The tool's help: DESCRIPTION up to its first section of the page's own.)
sed '/^\.SH /,$d' "$examples.top"
echo ".SH COMMANDS"
for c in $commands; do
  printf '.SS "insta-id %s"\n' "$c"
  "$bin" "$c" --help | to_roff ""
done
sed -n '/^\.SH /,$p' "$examples.top"; rm -f "$examples.top"
if [ -s "$examples" ]; then echo ".SH EXAMPLES"; cat "$examples"; fi
cat <<TAIL
.SH SEE ALSO
.BR psql (1),
.BR pg_dump (1),
.BR pgbouncer (1);
/usr/share/doc/insta-id/fleet.md
TAIL
