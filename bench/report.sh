#!/usr/bin/env bash
# bench/report.sh VERSION... (or --moves, --adopt, --shards): BENCHMARKS.md, bench/per_call.png and the
# README's performance line from target/bench/pgNN of each version (the
# first in detail). The plot needs matplotlib: a private virtualenv, made
# once (from PyPI).
source "$(dirname "$0")/../scripts/dev/harness.sh"
venv="$repo/target/bench-venv"
if ! "$venv/bin/python" -c "import matplotlib" 2>/dev/null; then
  python3 -m venv "$venv" && "$venv/bin/pip" install -q matplotlib
fi
# --moves, --adopt, --shards: only that section, from bench/moves.sh's,
# bench/adopt.sh's or bench/shards.sh's last run (each version's, for
# --shards).
if [ "${1:-}" = --moves ] || [ "${1:-}" = --adopt ] || [ "${1:-}" = --shards ]; then
  "$venv/bin/python" "$repo/bench/report.py" "$repo" "$1"
else
  "$venv/bin/python" "$repo/bench/report.py" "$repo" "${@/#/$repo/target/bench/pg}"
fi
