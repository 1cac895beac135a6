#!/usr/bin/env python3
"""Turns bench/run.sh's raw timings into BENCHMARKS.md, bench/per_call.png and
the README's performance line. Usage: report.py REPO_DIR OUT_DIR...
(one OUT_DIR per PostgreSQL version, target/bench/pgNN; the first one's
figures are shown in detail, every one's in the targets table)."""

import os
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path

repo, outs = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
# make bench-quick (BENCH_TIER=quick): the same report, fewer rounds of one
# version, into target/bench/quick/; BENCHMARKS.md, its plot and the
# README's line stay the full run's.
QUICK = os.environ.get("BENCH_TIER") == "quick"
report_dir = repo / "target" / "bench" / "quick" if QUICK else repo
if QUICK:
    (report_dir / "bench").mkdir(parents=True, exist_ok=True)
N = 1_000_000
FLOOR_S = N / 1024 / 1000  # the scheme's ceiling: 1024 IDs per ms per sequence


class Run:
    """The raw timings of one version."""

    def __init__(self, out):
        self.runs = defaultdict(list)
        self.by_round = defaultdict(dict)
        for line in (out / "raw.tsv").read_text().splitlines():
            rnd, name, value = line.split("\t")
            if value:
                self.runs[name].append(float(value))
                self.by_round[rnd][name] = float(value)
        self.med = {n: statistics.median(v) for n, v in self.runs.items()}
        self.statements = dict(l.split("\t", 1) for l in (out / "statements.tsv").read_text().splitlines())
        self.machine = (out / "machine.txt").read_text().strip().splitlines()
        self.version = self.machine[1].split()[2]

    def has(self, name):
        return name in self.med

    def paired(self, a, b):
        """Median of a/b over the adjacent pairs run.sh measured for it
        (pair/a/b), else over rounds (both measured in the same round): this
        VM's speed drifts over seconds, so a ratio of medians would mostly
        measure the drift."""
        if f"pair/{a}/{b}" in self.runs:
            return statistics.median(self.runs[f"pair/{a}/{b}"])
        return statistics.median(r[a] / r[b] for r in self.by_round.values() if a in r and b in r)

    def added_ns(self, a, b):
        """What a adds to b per call: the median over the adjacent pairs of
        time(a) - time(b) (diff/a/b), in ns per call."""
        return statistics.median(self.runs[f"diff/{a}/{b}"]) / self.calls(a) * 1e9

    def upper95(self, a, b):
        """The upper bound of a 95% percentile-bootstrap interval of the
        median of the pairs' ratios a/b (10,000 resamples, a fixed seed)."""
        ratios = self.runs[f"pair/{a}/{b}"]
        rng = random.Random(27)
        medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(10_000))
        return medians[int(0.975 * len(medians)) - 1], len(ratios)

    def instructions(self, guard, fn):
        return self.med.get(f"instructions/{guard}/{fn}")

    def instructions_spread(self):
        """How far the repeated counts of one build differ, at most."""
        counts = [v for n, v in self.runs.items() if n.startswith("instructions/")]
        return max((max(v) - min(v) for v in counts), default=0)

    def fmt_s(self, name):
        v = self.runs[name]
        return f"{self.med[name]:.3f} s ({min(v):.3f}–{max(v):.3f})"

    @staticmethod
    def calls(name):
        return 500_000 if name.startswith("insert_500k/") else 300_000 if name.startswith("in_use/") else N

    def ns(self, name):
        """Per call, or per row for the 500,000-row INSERTs."""
        return self.med[name] / self.calls(name) * 1e9


runs = [Run(o) for o in outs if not o.name.startswith("--")]


def shards_section():
    """bench/shards.sh's figures (target/bench/shards-pgNN), each version
    that ran it, the oldest first."""
    dirs = sorted((d for d in (repo / "target/bench").glob("shards-pg*")
                   if (d / "raw.tsv").exists() and "\tplain/create/100\t" in (d / "raw.tsv").read_text()),
                  key=lambda d: int(d.name.removeprefix("shards-pg")))
    if not dirs:
        return ""
    return f"""
## Creating logical shards (bench/shards.sh)

On a server with PostgreSQL's default `max_connections` (100) and
`max_locks_per_transaction` (64), fsync and synchronous_commit on. `CALL
insta_id.create_shards_in_batches(0, N - 1, template)` into a fresh
database, 50 shards per commit, the two templates and their floors
interleaved in each round. Then `SELECT count(*) FROM
insta_id.shard_drift(template)` over all of them, in one call (no drift
found), twice: the first call after the shards are made is the first to
read the catalog rows their creation wrote, and PostgreSQL sets their hint
bits as it reads them, which with data checksums on (the bench's servers,
as initdb makes them from 18 on) writes each page whole to the WAL once
after a checkpoint. Beside each call's time, the WAL the server wrote
meanwhile; a later call does not pay that.
""" + "".join(shards_of(d) for d in dirs)


def shards_of(out):
    """One version's figures of bench/shards.sh."""
    v = defaultdict(list)
    for line in (out / "raw.tsv").read_text().splitlines():
        _, name, value = line.split("\t")
        v[name].append(float(value))
    med = {n: statistics.median(x) for n, x in v.items()}
    machine = (out / "machine.txt").read_text().strip().splitlines()
    err = (out / "dump_default.txt").read_text().strip()
    sizes = (100, 1000, 8192)

    def ms(kind, n):
        return med[f"{kind}/create/{n}"] / n * 1000

    def floor(kind, at):
        return med[f"{kind}/raw_ddl{at}/100"] / 100 * 1000

    def rows(kind):
        return "\n".join(
            f"| {n} | {med[f'{kind}/create/{n}']:.1f} s | {ms(kind, n):.1f} ms | {ms(kind, n) / ms(kind, 100):.2f}x | "
            f"{med[f'{kind}/drift/{n}']:.2f} s, {drift_wal(kind, 'drift', n)} | {again(kind, n)} |" for n in sizes)

    def drift_wal(kind, name, n):
        x = med.get(f"{kind}/{name}_wal/{n}")
        return "WAL not measured" if x is None else f"{x / 2**20:.1f} MB of WAL"

    def again(kind, n):
        # (recorded from 0.11.0 on)
        x = med.get(f"{kind}/drift_again/{n}")
        return "not measured" if x is None else f"{x:.2f} s, {drift_wal(kind, 'drift_again', n)}"

    def range_of(kind):
        # (recorded from 0.11.0 on)
        x = med.get(f"{kind}/drift_range/1000")
        return "not measured" if x is None else f"{x:.2f} s"

    def table(kind, what):
        return f"""{what}

| shards | time | per shard | per shard / at 100 | shard_drift, all shards | again |
|---|---|---|---|---|---|
{rows(kind)}

The floor, the same shards as plain DDL (pg_dump -s of a shard, its names
changed, run by psql as the objects' owner; bench/shards.sh writes it out),
a transaction a shard (earlier releases' figures had a hand-written floor;
psql sends each statement on its own and waits for each shard's commit to
reach the disk, as a script's would, where insta_id commits 50 shards at a
time):
{floor(kind, ""):.1f} ms a shard into an empty database,
{floor(kind, "_at_8192"):.1f} ms a shard into the database that holds 8192 shards. A
migration of one statement (`ALTER TABLE ... ADD COLUMN`) over the
template and the 8192 shards: {med[f"{kind}/migrate/8192"]:.1f} s{migrate_floor(kind)}.
shard_drift over the first 1000 of the 8192 shards (a range): {range_of(kind)}.
"""

    def migrate_floor(kind):
        # (recorded from 0.11.0 on)
        x = med.get(f"{kind}/migrate_floor/8192")
        if x is None:
            return ""
        return (f"; the same statement as plain DDL on each shard (psql, a transaction a shard in one round trip, as the "
                f"table's owner, its commit not waiting for the WAL, one wait at the end, as migrate's): {x:.1f} s, so {(med[f'{kind}/migrate/8192'] - x) / 8192 * 1000:.2f} ms a shard "
                f"for what migrate adds (its record of each shard, and the checks below)")

    worst = max(ms("rich", 1000), ms("rich", 8192))
    ratio = ms("rich", 8192) / floor("rich", "_at_8192")
    flat = ms("rich", 8192) / ms("rich", 100)
    targets = "\n".join(f"| {t} | {m} | {'met' if ok else 'not met'} |" for t, m, ok in (
        ("at most 10 ms a shard at 1000 and 8192", f"{ms('rich', 1000):.1f} and {ms('rich', 8192):.1f} ms", worst <= 10),
        ("at most 1.5x the plain DDL at 8192", f"{ratio:.2f}x", ratio <= 1.5),
        ("flat from 100 to 8192 (at 8192 within 1.2x of at 100)", f"{flat:.2f}x", flat <= 1.2),
        ("a migration over 8192 shards in at most 10 s", f"{med['rich/migrate/8192']:.1f} s", med["rich/migrate/8192"] <= 10),
        ("shard_drift over 8192 shards in one call, at most 5 s",
         f"{med['rich/drift/8192']:.2f} s the first call after making them"
         + ("" if "rich/drift_again/8192" not in med else f", {med['rich/drift_again/8192']:.2f} s the next"),
         med["rich/drift/8192"] <= 5)))
    floor_growth = floor("rich", "_at_8192") / floor("rich", "")
    # (runs before dump/locked was recorded locked tables only: PostgreSQL 18)
    locked = med.get("dump/locked", med["dump/tables"])
    return f"""
### {machine[1].split(",")[0].replace("postgres: ", "")}

{machine[2]}; {machine[0].replace("machine: ", "")}; {"median of " + str(len(v["plain/create/100"])) + " rounds" if len(v["plain/create/100"]) > 1 else "one round, which this machine's drift (up to ±30% over seconds, above) makes rough"}.

{table("rich", "**A rich template**, issue 58's (bench/rich_template.sql): three tables with next_id keys and foreign keys, a trigger and its function, a view, a partitioned table with two partitions, row-level security and a policy, grants to an application role; every object owned by a role that is not a superuser, whose code each copy runs as that role (the gate of issue 54).")}
Against issue 58's targets (its figure for this template before least
privilege, 57dcb2a on PostgreSQL 18.6 on the issue's machine, not measured
here: 13.3 ms a shard at 1000; 0.10.0 there: 23-24 ms):

| target | measured | |
|---|---|---|
{targets}

What those checks protect (the README's "Who may do what";
tests/pg_regress/sql/25_gate.sql and 26_site_matrix.sql, with hostile
roles, a case a row): each statement a copy or a migration runs on a
tenant's schema runs as the one owner of the code PostgreSQL may run for
it (several owners: 42501 before anything runs), in a security-restricted
operation, once insta_id holds every relation the statement may reach
(foreign keys, triggers, partitions, views) and every function, operator
and type whose code it may run. So a tenant's trigger, default, CHECK,
index expression or foreign key's re-validation never runs with the
rights of the DBA who called the helper, and a function swapped or given
away meanwhile is waited for, or refused. Making a shard pays that once
for its schema; a migration, once per shard.

The plain DDL itself is {floor_growth:.1f}x slower a shard into the database that
holds 8192 shards than into an empty one: PostgreSQL's own work for a
partition of a partitioned table (`ATTACH PARTITION`, `CREATE TABLE ...
PARTITION OF`) and for `CREATE TRIGGER` grows with the catalogs (measured
with pg_stat_statements: 1.7 ms a partition at 200 shards, 12-16 ms at
3000, in insta_id's copy and in the plain DDL alike), so no copy of this
template can be flat from 100 to 8192 shards; the ratio to the plain DDL at
8192 is the figure that is insta_id's. Where the partition's time goes
(perf, PostgreSQL 18, about 3000 shards): `DefineRelation` calls
`CloneFkReferenced` for every new partition, which looks for the foreign
keys that reference its parent by reading all of `pg_constraint` (it has
no index on `confrelid`); that scan's visibility checks alone were 18% of
the backend's time.

The migration runs right after the shards are made, before autovacuum has
analyzed the catalogs they grew, as a DBA's would: its plans are made with
statistics of a database of a few hundred objects (see the CHANGELOG for
the plans that turned on them, up to 0.5 s a shard, and were fixed).

{table("plain", "**The 3-table template** (tests/fixtures/shard_template.sql alone):")}
**pg_dump** locks every table it dumps until it ends, in one transaction
(before PostgreSQL 18 every sequence too: its pg_dump reads each with a
SELECT), so the lock table must hold them all: the {med["dump/tables"]:,.0f} tables of the 3-table
8192-shard database (with the floor's 100 shards), {locked:,.0f} relations locked in all, need
`max_locks_per_transaction` of at least relations locked / server processes
({locked:.0f} / {med["dump/processes"]:.0f} here). With the default 64, pg_dump failed
(`{err}`); with {med["dump/max_locks"]:.0f} it dumped the database in {med["dump/seconds"]:.1f} s
({med["dump/bytes"] / 1e6:.0f} MB, custom format, empty tables). `pg_upgrade` runs
pg_dump on the old server, so it needs the same setting there.
"""



def moves_section():
    """bench/moves.sh's figures (target/bench/moves-pgNN), if it ran."""
    # (the newest run, whichever version it was on)
    out = max((d for d in (repo / "target/bench").glob("moves-pg*") if (d / "raw.tsv").exists()),
              key=lambda d: (d / "raw.tsv").stat().st_mtime, default=None)
    if out is None:
        return ""
    v = defaultdict(dict)
    for line in (out / "raw.tsv").read_text().splitlines():
        move, name, value = line.split("\t")
        v[move][name] = float(value)
    machine = (out / "machine.txt").read_text().strip().splitlines()
    plan_s = statistics.median(float(l.split("\t")[2]) for l in (out / "raw.tsv").read_text().splitlines()
                               if l.split("\t")[1] == "plan_seconds")
    plan = v["1"]
    moves = sorted((k for k in v if k not in ("steady", "large") and "pause" in v[k]), key=int)
    lg = v.get("large")
    large = "" if not lg else (
        f"\nA shard of {lg['bytes'] / 2**20:.0f} MB moved the same way: its copy {lg['copy_seconds']:.1f} s "
        f"({lg['copy_seconds'] / (lg['bytes'] / 2**30):.0f} s per GB), the comparison of both copies before the cutover "
        f"{lg['compare_seconds']:.1f} s ({lg['compare_seconds'] / (lg['bytes'] / 2**30):.0f} s per GB), "
        f"the entry paused {lg['pause'] * 1000:.0f} ms (the budget: {lg['budget_ms']:.0f} ms), {lg['failed']:.0f} failed transactions.\n")
    # The baseline release's moves (base_...), each right after this version's.
    base = machine[3].split(": ")[1] if len(machine) > 3 and machine[3] != "baseline: none" else None
    rows = "\n".join(f"| {k} | {v[k]['pause'] * 1000:.0f} ms | {v[k]['cutover'] * 1000:.0f} ms | {v[k]['transactions']:.0f} | "
                     f"{v[k]['failed']:.0f} | {v[k]['p50_ms']:.1f} ms | {v[k]['p99_ms']:.1f} ms | {v[k]['max_ms']:.0f} ms |"
                     + (f" {v[k]['base_pause'] * 1000:.0f} ms | {v[k]['base_failed']:.0f} | {v[k]['base_max_ms']:.0f} ms |" if base else "")
                     for k in moves)
    base_cols = f" pause, {base} | failed, {base} | max, {base} |" if base else ""
    def spread(name):  # a pause over the moves: "median ms (min–max)"
        ms = [v[k][name] * 1000 for k in moves]
        return f"{statistics.median(ms):.0f} ms ({min(ms):.0f}–{max(ms):.0f})"
    against = "" if not base else (
        f"\nBeside them, insta_id {base} (its library on a second pair of servers, a copy of the same "
        f"PostgreSQL installation; its own PgBouncer and insta-id) moved the same shards the same way, each "
        f"right after this version's: the pause, median (min–max), {spread('pause')} against {base}'s "
        f"{spread('base_pause')}; the ratio of each pair's pauses, median "
        f"{statistics.median(v[k]['pause'] / v[k]['base_pause'] for k in moves):.2f}x.\n")
    st = v["steady"]
    rd = v.get("readers")
    def per_try(prefix):  # readers' figures of each try that paused, in order
        return [] if not rd else [rd[k] for k in sorted((k for k in rd if k.startswith(prefix)),
                                                          key=lambda k: int(k.rsplit("_", 1)[1]))]
    held, waited = per_try("try_held_ms_"), per_try("try_client_wait_ms_")
    tries = "; ".join(f"held {h:.0f} ms" + (f", its clients' longest wait {w:.0f} ms" if w is not None else "")
                      for h, w in zip(held, waited + [None] * (len(held) - len(waited))))
    readers = "" if not rd else (
        f"\nGiving up within the budget: a shard whose table back-to-back readers of a second hold on the old "
        f"server, moved with `--pause-budget {rd['budget_ms']:.0f} --cutover-attempts 8`: "
        + ((f"1 try paused the entry and was given up at its deadline ({tries})"
            if len(held) == 1 else
            f"{len(held)} tries paused the entry and were given up at their deadline ({tries})")
           if held else "no try paused the entry")
        + f" (what each try said it held its clients for, and the longest wait, pgbench's log less the schedule lag, "
        f"of the transactions that began while it ran); the longest wait of any of its clients over the run "
        f"{rd['client_wait_ms']:.0f} ms; {rd['failed']:.0f} failed transactions. The budget is a bound the "
        f"tool aims at and reports: a client's wait also holds its own transaction, on a server connection "
        f"PgBouncer opens anew after the RESUME.\n")
    # The committed try of each move, step by step (bench/moves.sh's try_*).
    steps = [k[4:] for k in (v[moves[0]] if moves else {}) if k.startswith("try_")]
    breakdown = "" if not steps else (
        "\nWhere each committed try's time went, the median over the moves (ms): "
        + ", ".join(f"{n} {statistics.median(v[k]['try_' + n] for k in moves if 'try_' + n in v[k]):.0f}" for n in steps)
        + " (the pause is the PAUSE's drain; the rest the cutover's steps on both servers).\n")
    return f"""
## Moving shards under load, through PgBouncer (bench/moves.sh)

{machine[1].split(",")[0].replace("postgres: ", "")} on both servers, fsync and synchronous_commit on;
{machine[2].split(";")[0]}, transaction pooling, one entry per shard ({machine[0].replace("machine: ", "")}).
{len(moves)} shards of 20,000 users moved one after another with `insta-id move
--pgbouncer` while pgbench (`-M simple`, 4 clients, {machine[2].split("rate: ")[1].split(";")[0]} transactions a
second, one INSERT each) writes through the moving shard's entry, from 1 s
before the move to 1 s after. The pause is how long the entry was paused
(its clients queue in PgBouncer); the cutover is the step's time on the
old server (locks, catching up, comparing the rows made since the last
comparison, carrying sequences and the mark, the fence; the old copy is
dropped after the RESUME);
latencies are every transaction's, from pgbench's per-transaction log,
measured from its scheduled start (`-R`):

| move | pause | cutover | transactions | failed | p50 | p99 | max |{base_cols}
|---|---|---|---|---|---|---|---|{"---|---|---|" if base else ""}
{rows}
{against}{breakdown}{large}{readers}
Planning, offline (`insta-id plan --sizes`): 8192 shards on 3 servers, their sizes
log-normal (a fixed seed), a 4th server new and empty: {plan_s * 1000:.0f} ms (median of 5 runs),
{plan["plan_moves"]:.0f} moves, {"every server within 5% of the mean" if plan["plan_balanced"] else "no plan within the bound"}.

A client on a shard that stays, through every move: {st["transactions"]:.0f} transactions, {st["failed"]:.0f} failed,
p50 {st["p50_ms"]:.1f} ms, p99 {st["p99_ms"]:.1f} ms, max {st["max_ms"]:.0f} ms.
"""


ADOPT_KINDS = [
    ("bigserial", "a bigserial key (no rewrite: the default changes)", None),
    ("identity", "an identity key (the identity dropped, a sequence in its place)", None),
    ("serial", "a serial key (the table rewritten to bigint)", "alter"),
    ("serial_fk", "a serial key and a referencing table of as many rows (both rewritten)", "alter_fk"),
]


def adopt_section():
    """bench/adopt.sh's figures (target/bench/adopt-pgNN), if it ran."""
    out = next((d for d in sorted((repo / "target/bench").glob("adopt-pg*"))
                if (d / "raw.tsv").exists()), None)
    if out is None:
        return ""
    runs_of, by_round = defaultdict(list), defaultdict(dict)
    for line in (out / "raw.tsv").read_text().splitlines():
        rnd, name, value = line.split("\t")
        runs_of[name].append(float(value))
        by_round[rnd][name] = float(value)
    machine = (out / "machine.txt").read_text().strip().splitlines()
    sizes = [int(s) for s in machine[2].split("sizes: ")[1].split(";")[0].split()]
    med = {n: statistics.median(v) for n, v in runs_of.items()}

    def cell(name):
        v = runs_of[name]
        return f"{med[name]:.3f} s ({min(v):.3f}–{max(v):.3f})"

    big = sizes[-1]
    rows = []
    for kind, label, floor in ADOPT_KINDS:
        if floor is None:  # no rewrite: its time does not grow with the rows
            per_m = ratio = "–"
        else:
            per_m = f"{med[f'{kind}/{big}'] / (big / 1e6):.3f} s"
            ratio = f"{statistics.median(r[f'{kind}/{big}'] / r[f'{floor}/{big}'] for r in by_round.values()):.2f}x"
        rows.append(f"| {label} | " + " | ".join(cell(f"{kind}/{n}") for n in sizes) + f" | {per_m} | {ratio} |")
    for kind, label in [("alter", "the floor: `ALTER TABLE ... ALTER COLUMN id TYPE bigint`"),
                        ("alter_fk", "the floor with the referencing table: both columns ALTERed")]:
        rows.append(f"| {label} | " + " | ".join(cell(f"{kind}/{n}") for n in sizes)
                    + f" | {med[f'{kind}/{big}'] / (big / 1e6):.3f} s | – |")
    head = " | ".join(f"{n:,} rows" for n in sizes)
    return f"""
## Adopting a live table (bench/adopt.sh)

`insta_id.adopt_id_column(table, 'id', 1)` on a table `(id <key>, v int)` of
{" and ".join(f"{n:,}" for n in sizes)} rows, made afresh, analyzed and checkpointed before each run, no
other session; the kinds interleaved in a rotating order over {len(runs_of[f"serial/{big}"])} rounds,
medians with the range in brackets ({machine[1].split(",")[0].replace("postgres: ", "")}, fsync on;
{machine[0].replace("machine: ", "")}). Per million rows is at {big:,} rows; the last column is
the median of each round's ratio to the plain ALTER TABLE of the same tables
(what PostgreSQL's rewrite costs anyway). Every run is checked afterwards: the key
bigint with a next_id default, every row there. Writers wait for it the whole
time (ACCESS EXCLUSIVE on every table it changes, [docs/adopting.md](docs/adopting.md)).

| adopting | {head} | per million rows | / the plain ALTER |
|---|{"---|" * len(sizes)}---|---|
{chr(10).join(rows)}
"""


# report.py REPO --moves | --adopt: only that section of BENCHMARKS.md, from
# its script's last run (the rest as the last full run left it).
SECTIONS = {"--moves": ("\n## Moving shards under load", moves_section, "bench/moves.sh (target/bench/moves-pgNN)"),
            "--shards": ("\n## Creating logical shards", shards_section, "bench/shards.sh (target/bench/shards-pgNN)"),
            "--adopt": ("\n## Adopting a live table", adopt_section, "bench/adopt.sh (target/bench/adopt-pgNN)")}
if len(outs) == 1 and outs[0].name in SECTIONS:
    head, make, script = SECTIONS[outs[0].name]
    bench_md = repo / "BENCHMARKS.md"
    text, section = bench_md.read_text(), make()
    if not section:
        sys.exit(f"report.py {outs[0].name}: no run of {script}")
    if head in text:
        start = text.index(head)
        end = text.index("\n## ", start + len(head))
    else:  # a section new to this file: before the statements
        start = end = text.index("\n## The statements")
    bench_md.write_text(text[:start] + section.rstrip("\n") + "\n" + text[end:])
    print(section)
    sys.exit(0)

# (label, numerator, denominator, limit, lower is better): medians of the
# pairs' ratios.
TARGETS = [
    ("next_id on helper sequences (CACHE 32) / nextval() on a plain sequence, per call", "per_call/next_id_cached", "per_call/nextval", 1.00, True),
    ("INSERT 500k over 64 plain sequences, next_id / nextval", "insert_500k/next_id_spread", "insert_500k/nextval_spread", 1.05, True),
    ("PL/pgSQL original / next_id, per call", "per_call/plpgsql_original", "per_call/next_id", 9.0, False),
    ("decode: created_at+shard_id+seq_id / the SQL expression", "decode/scalar_decoders", "decode/sql_expression", 0.50, True),
    ("PostgreSQL 18's uuidv7() / next_id, per call", "per_call/uuidv7", "per_call/next_id", 1.00, False),
    ("INSERT 500k, uuidv7() default / a helper-made next_id default", "insert_500k/uuidv7", "insert_500k/next_id_helper", 1.00, False),
]
DSM_TARGETS = [(l + " (not preloaded)", a + "_dsm", b + "_dsm", lim, low) for l, a, b, lim, low in TARGETS[:2]]
# The same, judged by the upper bound of the bootstrap interval (Run.upper95).
INTERVAL_TARGETS = [
    ("INSERT 500k, next_id default on a plain sequence / bigserial", "insert_500k/next_id", "insert_500k/bigserial", 1.03),
    ("INSERT 500k, next_id default on a helper table / bigserial", "insert_500k/next_id_helper", "insert_500k/bigserial", 1.00),
    ("INSERT 500k, next_id default on a helper table / bigserial (not preloaded)", "insert_500k/next_id_helper_dsm", "insert_500k/bigserial_dsm", 1.00),
    ("decode: id_parts / the SQL expression", "decode/id_parts", "decode/sql_expression", 1.00),
    ("shortcode / id_parts, per ID", "decode/shortcode", "decode/id_parts", 1.00),
    ("from_shortcode / id_parts, per ID", "decode/from_shortcode", "decode/id_parts", 1.00),
]
# What next_id adds to nextval() on the same plain sequences (ns per call,
# median of the pairs' differences), with callgrind's instructions beside.
ADDED_NS = 50
ADDED = [("preloaded", "per_call/next_id", "per_call/nextval"), ("dsm", "per_call/next_id_dsm", "per_call/nextval_dsm")]


def verdict(value, limit, low=True):
    return "met" if (value <= limit if low else value >= limit) else "**missed**"


def added_cell(r, guard, a, b):
    if not (r.has(a) and r.has(b)):
        return "–"
    ns = r.added_ns(a, b)
    nv, ni = r.instructions(guard, "nextval"), r.instructions(guard, "next_id")
    instr = f", {ni - nv:+,.0f} instructions" if nv is not None and ni is not None else ""
    return f"{ns:+.0f} ns{instr} {verdict(ns, ADDED_NS)}"


def dsm_guard_cell(r):
    """The guard without preloading against the preloaded one: the instructions
    next_id adds to nextval on each (deterministic), and the ns beside."""
    counts = [r.instructions(g, f) for g in ("preloaded", "dsm") for f in ("nextval", "next_id")]
    if None in counts or not r.has("per_call/next_id_dsm"):
        return "–"
    extra = (counts[3] - counts[2]) - (counts[1] - counts[0])
    ns = r.added_ns("per_call/next_id_dsm", "per_call/nextval_dsm") - r.added_ns("per_call/next_id", "per_call/nextval")
    spread = r.instructions_spread()
    return f"{extra:+,.0f} instructions, repeats within {spread:,.0f} ({ns:+.0f} ns) {verdict(extra, spread)}"


def target_rows():
    rows = []
    for label, guard, a, b in [("next_id − nextval(), plain sequences, per call", *ADDED[0]),
                               ("next_id − nextval(), plain sequences, per call (not preloaded)", *ADDED[1])]:
        rows.append(f"| {label} | ≤ {ADDED_NS} ns | " + " | ".join(added_cell(r, guard, a, b) for r in runs) + " |")
    rows.append("| the guard without preloading − the preloaded one, per next_id call | ≤ 0 instructions (beyond the counts' repeatability) | "
                + " | ".join(dsm_guard_cell(r) for r in runs) + " |")
    for label, a, b, limit in INTERVAL_TARGETS:
        cells = []
        for r in runs:
            if f"pair/{a}/{b}" in r.runs:
                hi, n = r.upper95(a, b)
                cells.append(f"{r.paired(a, b):.2f}x, ≤ {hi:.2f}x ({n} pairs) {verdict(hi, limit)}")
            else:
                cells.append("–")
        rows.append(f"| {label} (upper bound of the 95% interval) | ≤ {limit:.2f}x | " + " | ".join(cells) + " |")
    for label, a, b, limit, low in TARGETS + DSM_TARGETS:
        cells = []
        for r in runs:
            if r.has(a) and r.has(b):
                v = r.paired(a, b)
                cells.append(f"{v:.2f}x {verdict(v, limit, low)}")
            else:
                cells.append("–")
        rows.append(f"| {label} | {'≤' if low else '≥'} {limit:.2f}x | " + " | ".join(cells) + " |")
    ceiling = [f"{r.med['ceiling/next_id_one_sequence'] / FLOOR_S:.2f}x {verdict(r.med['ceiling/next_id_one_sequence'] / FLOOR_S, 1.10, True)}" for r in runs]
    rows.append("| one sequence, 1M IDs / the floor (1M / 1024 ms) | ≤ 1.10x | " + " | ".join(ceiling) + " |")
    return "\n".join(rows)


def table(r, names, unit="per call"):
    out = [f"| contender | time | {unit} |", "|---|---|---|"]
    out += [f"| {n.split('/', 1)[1]} | {r.fmt_s(n)} | {r.ns(n):.0f} ns |" for n in names if r.has(n)]
    return "\n".join(out)


def key_order(r):
    """What the order of next_id's keys alone costs a primary key."""
    a, b = "insert_500k/ids_next_id_order", "insert_500k/ids_serial_order"
    if f"pair/{a}/{b}" not in r.runs:
        return ""
    hi, n = r.upper95(a, b)
    pages = {t: r.med.get(f"pages/{t}", float("nan")) for t in
             ("ins_ids_next_id_order", "ins_ids_serial_order", "ins_next_id", "ins_bigserial")}
    return (f"The order of the keys alone, no function called (ids_next_id_order: the 500,000 IDs one INSERT with a "
            f"next_id default on a plain sequence made, inserted again in the order they were made; ids_serial_order: "
            f"1 to 500,000): {r.paired(a, b):.2f}x, ≤ {hi:.2f}x ({n} pairs). One sequence's values wrap "
            f"(`nextval % 1024`) every 1,024 IDs, mostly inside a millisecond, and the IDs after the wrap sort "
            f"before the ones just made: the primary key ends up {pages['ins_ids_next_id_order']:,.0f} pages "
            f"against {pages['ins_ids_serial_order']:,.0f} (with the defaults themselves: next_id "
            f"{pages['ins_next_id']:,.0f}, bigserial {pages['ins_bigserial']:,.0f}).")


def instructions_table():
    out = ["| PostgreSQL | guard | nextval() | next_id | next_id − nextval() |", "|---|---|---|---|---|"]
    for r in runs:
        for guard, label in [("preloaded", "preloaded"), ("dsm", "not preloaded")]:
            nv, ni = r.instructions(guard, "nextval"), r.instructions(guard, "next_id")
            if nv is not None and ni is not None:
                out.append(f"| {r.version} | {label} | {nv:,.0f} | {ni:,.0f} | {ni - nv:+,.0f} |")
    return "\n".join(out)


def scaling(r):
    out = ["| rows | table | sessions | bigserial rows/s | next_id rows/s | next_id / bigserial (rows/s) |", "|---|---|---|---|---|---|"]
    for size in ["row", "batch100"]:
        for where in ["one", "own"]:
            for clients in [1, 2, 4]:
                k = f"scaling/{size}/{where}/{clients}"
                if not r.has(k + "/next_id"):
                    continue
                out.append(
                    f"| {'single' if size == 'row' else '100 per INSERT'} | {'one shared' if where == 'one' else 'one per session'} | {clients} "
                    f"| {r.med[k + '/bigserial']:,.0f} | {r.med[k + '/next_id']:,.0f} | {r.paired(k + '/next_id', k + '/bigserial'):.2f}x |"
                )
    return "\n".join(out)


def in_use(r):
    out = ["| sequences in use | nextval | next_id | next_id / nextval | guard evictions in 300,000 calls |", "|---|---|---|---|---|"]
    for count in [10, 10000, 100000]:
        k = f"in_use/{count}"
        if r.has(k + "/next_id"):
            out.append(
                f"| {count:,} | {r.ns(k + '/nextval'):.0f} ns | {r.ns(k + '/next_id'):.0f} ns "
                f"| {r.paired(k + '/next_id', k + '/nextval'):.2f}x | {r.med[k + '/evictions']:,.0f} |"
            )
    return "\n".join(out)


def plot(r):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "(matplotlib is missing, so no plot was drawn)"
    names = ["per_call/nextval", "per_call/nextval_cached", "per_call/next_id", "per_call/next_id_cached",
             "per_call/gen_random_uuid", "per_call/plpgsql_original"]
    labels = ["nextval()", "nextval(), CACHE 32", "next_id", "next_id, CACHE 32", "gen_random_uuid()", "PL/pgSQL original"]
    values = [r.ns(n) for n in names]
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=120)
    bars = ax.barh(labels, values, color=["#8c8c8c", "#8c8c8c", "#2b7bb9", "#2b7bb9", "#b0b0b0", "#d9822b"])
    ax.bar_label(bars, labels=[f"{v:.0f} ns" for v in values], padding=3)
    ax.set_xlabel("ns per call (median of rounds, 1,000,000 calls over 64 sequences)")
    ax.set_xlim(0, max(values) * 1.18)
    ax.invert_yaxis()
    ax.set_title("Cost of one ID, PostgreSQL " + r.version, fontsize=10)
    fig.tight_layout()
    fig.savefig(report_dir / "bench" / "per_call.png")
    return "![per-call cost](bench/per_call.png)"


m = runs[0]  # shown in detail
dsm = m.has("per_call/next_id_dsm")
notes = (repo / "bench" / "notes.md").read_text()
commands = "\n".join(f"-- {n}\n{s};" for n, s in m.statements.items())
versions = " | ".join(f"PostgreSQL {r.version}" for r in runs)
tier = "`make bench-quick` (the quick tier: fewer rounds and pairs, one version)" if QUICK else "`make bench`"
md = f"""# Benchmarks

Made by {tier} (bench/run.sh per version, bench/setup.sql,
bench/report.py): on each version a throwaway cluster with
`shared_preload_libraries = 'insta_id'` and `fsync = on` and a second one
without preloading (the guard in a DSM segment: the registry's on 17+, the
one published in the data directory on 15 and 16), the contenders
interleaved in a rotating order over several rounds; times are medians, with
the range over rounds in brackets. This virtual machine's speed drifts by up
to ±30% over seconds, so a ratio of two medians would mostly measure the
drift: every ratio below is the median of the ratios of adjacent pairs of
runs, A then B, B then A, ... in one session (`paired()` in
bench/time_of.sql, 15 pairs), or for the scaling tables of runs in the same
round. Rerun it to refresh this
file, the plot and the README's performance line; `make bench PG=NN` measures
one version.

{chr(10).join('- ' + l for l in m.machine)}
{chr(10).join('- also: ' + r.machine[1] + ' (' + r.machine[3].split(';')[-1].strip() + ')' for r in runs[1:])}

## Targets

| measure (medians over adjacent pairs) | target | {versions} |
|---|---|{'---|' * len(runs)}
{target_rows()}

{notes}
## Per call: 1,000,000 calls spread over 64 sequences (PostgreSQL {m.version})

Spread so that no sequence gets near 1024 IDs per millisecond: this is the
cost of a call, not of the duplicate guard waiting. Each statement also pays
generate_series and an array subscript, alike for all. "cached" is over 64
sequences made by `insta_id.add_id_column` (CACHE 32); the others over plain
`CREATE SEQUENCE` ones.

{table(m, ["per_call/nextval", "per_call/next_id", "per_call/nextval_cached", "per_call/next_id_cached", "per_call/next_id_untracked", "per_call/next_id_pg_extern", "per_call/gen_random_uuid", "per_call/uuidv7", "per_call/plpgsql_original"])}

- next_id / nextval, plain: {m.paired("per_call/next_id", "per_call/nextval"):.2f}x; on the same cached sequences: {m.paired("per_call/next_id_cached", "per_call/nextval_cached"):.2f}x; cached next_id / plain nextval: {m.paired("per_call/next_id_cached", "per_call/nextval"):.2f}x.
- The guard's statistics: next_id with `insta_id.track_guard_stats = off` / on: {m.paired("per_call/next_id_untracked", "per_call/next_id"):.2f}x.
- `#[pg_extern]` next_id / the fmgr one: {m.paired("per_call/next_id_pg_extern", "per_call/next_id"):.2f}x.

{plot(m)}

### Instructions per call (callgrind)

bench/instructions.sh runs the per-call statements of nextval() and next_id
above in a single-user backend (`postgres --single`) under valgrind's
callgrind, once with 20,480 calls and once with 40,960 (whole cycles of a
sequence's WAL record, one every 32 values, on each of the 64): the
difference over 20,480 is one call, without the backend's start, parse and
plan. Medians of
three counts, which differ by at most {m.instructions_spread():,.0f} instructions between repeats
(a count includes what a call does only now and then: a sequence's WAL
record every 32 values, a renewal of the mark). Unlike
the times, these counts do not drift with the machine; they do not see
cache misses or what the clock costs in the kernel.

{instructions_table()}

## The ceiling: 1,000,000 IDs from one sequence

| | time |
|---|---|
| next_id, one sequence, one statement | {m.fmt_s("ceiling/next_id_one_sequence")} |
| the scheme's floor, 1,000,000 / 1024 ms | {FLOOR_S:.3f} s |

{m.med["ceiling/next_id_one_sequence"] / FLOOR_S:.2f}x the floor: the guard waits for the next millisecond instead
of wrapping, so one sequence gives 1024 IDs a millisecond and no more.

## INSERT 500,000 rows

`INSERT ... SELECT g FROM generate_series(1, 500000) g` into a table with a
bigint primary key, emptied (and checkpointed) before each run: bigserial;
a next_id default on a plain sequence; a next_id default made by
add_id_column (CACHE 32); and explicit ids spread over the 64 plain
sequences, `nextval(s) * 64 + i` against `next_id(1, s)`, so that the
one-sequence ceiling is not what is measured.

{table(m, ["insert_500k/bigserial", "insert_500k/next_id", "insert_500k/next_id_helper", "insert_500k/nextval_spread", "insert_500k/next_id_spread", "insert_500k/ids_next_id_order", "insert_500k/ids_serial_order", "insert_500k/uuidv7"], "per row")}

{key_order(m)}

## Scaling with sessions (PostgreSQL {m.version})

pgbench, {m.machine[3].split('pgbench seconds: ')[1].split(';')[0]} s per run, each client inserting single rows or 100 rows per
INSERT, all into one table (one sequence: the guard's hot case) or each into
a table of its own shard; next_id tables made by add_id_column. Medians of
rows per second over the rounds; this machine has 2 cores.

{scaling(m)}

## Sequences in use

300,000 calls round-robin over 10, 10,000 and 100,000 plain sequences
(timed the second time in a session, so that opening the sequences is not
measured). The preloaded guard's table holds `insta_id.max_sequences` =
16,384 sequences in buckets of 8; a sequence that is not in it takes the
least recently used slot of its bucket (an eviction: the newcomer starts
above the evicted one's last millisecond, which can cost a wait but never a
duplicate).

{in_use(m)}

## Decoding 1,000,000 IDs

{table(m, ["decode/id_parts", "decode/sql_expression", "decode/scalar_decoders", "decode/shard_id", "decode/shard_id_pg_extern", "decode/shortcode", "decode/from_shortcode"], "per ID")}

id_parts is {m.paired("decode/id_parts", "decode/sql_expression"):.2f}x the SQL expression; the three scalar decoders together {m.paired("decode/scalar_decoders", "decode/sql_expression"):.2f}x;
a `#[pg_extern]` shard_id costs {m.paired("decode/shard_id_pg_extern", "decode/shard_id"):.2f}x the fmgr one.
shortcode costs {m.paired("decode/shortcode", "decode/id_parts"):.2f}x id_parts, from_shortcode {m.paired("decode/from_shortcode", "decode/id_parts"):.2f}x.
"""
if dsm:
    md += f"""
## Without preloading: the guard in a DSM segment (PostgreSQL {m.version})

The same statements on a second cluster of the same server with no
`shared_preload_libraries`, interleaved with the preloaded cluster's rounds.

{table(m, [n + "_dsm" for n in ["per_call/nextval", "per_call/next_id", "per_call/next_id_cached", "insert_500k/bigserial", "insert_500k/next_id_helper", "insert_500k/nextval_spread", "insert_500k/next_id_spread"]], "per call or row")}

next_id there costs {m.paired("per_call/next_id_dsm", "per_call/next_id"):.2f}x next_id on the preloaded cluster.
"""
if m.has("per_call/next_id_prev"):
    prev = m.machine[2].split("previous release on the twin: ")[1].strip()
    md += f"""
## Against the previous release, {prev} (PostgreSQL {m.version})

A twin of the preloaded cluster runs insta_id {prev}'s library (built from
its commit in sql/RELEASES, release build, in a copy of the installation)
with its SQL;
the same statements on the same plain sequences, interleaved with the other
clusters' rounds. {prev} kept the high-water mark in a file of the data
directory; this version keeps it in each database's WAL (a sequence written
about ten times a second, flushed by next_id), with the same hot path: one
atomic load and a compare.

{table(m, ["per_call/nextval", "per_call/next_id", "per_call/nextval_prev", "per_call/next_id_prev"])}

- next_id / {prev}'s next_id: {m.paired("per_call/next_id", "per_call/next_id_prev"):.2f}x (median of {len(m.runs["pair/per_call/next_id/per_call/next_id_prev"])} pairs, alternating sessions of the two clusters).
- next_id / nextval on each: {m.paired("per_call/next_id", "per_call/nextval"):.2f}x here, {m.paired("per_call/next_id_prev", "per_call/nextval_prev"):.2f}x with {prev}.
"""
md += shards_section()
md += moves_section()
md += adopt_section()
md += f"""
## The statements

```sql
{commands}
```
"""
(report_dir / "BENCHMARKS.md").write_text(md)

def instructions_added(r):
    nv, ni = r.instructions("preloaded", "nextval"), r.instructions("preloaded", "next_id")
    return "" if nv is None or ni is None else f" and {ni - nv:,.0f} instructions, by callgrind,"


readme = repo / "README.md"
text = readme.read_text()
start, end = "<!-- bench:start -->", "<!-- bench:end -->"
if start in text and end in text and not QUICK:
    line = (
        f"{start}\nPerformance (`make bench`, {m.machine[0].split(': ', 1)[1]}, PostgreSQL {m.version}; "
        f"details and PostgreSQL {', '.join(r.version for r in runs[1:]) or '–'} in [BENCHMARKS.md](BENCHMARKS.md)): "
        f"next_id costs {m.ns('per_call/next_id_cached'):.0f} ns a call on the sequences insta_id's helpers make "
        f"({m.paired('per_call/next_id_cached', 'per_call/nextval'):.2f}x a bare nextval() on a plain sequence, "
        f"{m.ns('per_call/nextval'):.0f} ns) and {m.ns('per_call/next_id'):.0f} ns on a plain sequence "
        f"({m.paired('per_call/next_id', 'per_call/nextval'):.2f}x: "
        f"{m.added_ns('per_call/next_id', 'per_call/nextval'):.0f} ns{instructions_added(m)} more than nextval() there), "
        f"{m.paired('per_call/plpgsql_original', 'per_call/next_id'):.1f}x faster than the PL/pgSQL original; "
        f"a 500,000-row INSERT with a helper-made next_id default takes "
        f"{m.paired('insert_500k/next_id_helper', 'insert_500k/bigserial'):.2f}x bigserial's time; one sequence yields "
        f"1,000,000 IDs in {m.med['ceiling/next_id_one_sequence']:.2f} s (the scheme's floor is {FLOOR_S:.2f} s).\n{end}"
    )
    text = text[: text.index(start)] + line + text[text.index(end) + len(end):]
    readme.write_text(text)
print(md.split("## Per call")[0])
