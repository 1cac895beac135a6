//! The two copies of a shard compared: `insta-id verify`, and the
//! comparison a move makes before and at its cutover. Each table is read
//! on both servers, its rows counted and their text hashed per time bucket
//! of its ID (the 41 high bits of an insta_id key are its millisecond), so
//! a difference is located in time, and a range of IDs (the rows made
//! since an earlier pass) is read by the primary key's index alone.
//!
//! A row's hash is the first 64 bits of the md5 of its text, summed per
//! bucket: the same on any two servers whatever their architecture (the
//! hash functions of hash indexes differ between byte orders), and
//! independent of the order rows are read in. The text of a value depends
//! on settings (DateStyle, TimeZone, extra_float_digits...), which each
//! reading fixes (`READING_SETTINGS`).
//!
//! The copies move while they are read (the subscription applies what the
//! publisher commits): each table is read on the publisher first, then,
//! once the subscriber has confirmed everything committed until then, on
//! the subscriber. A bucket that still differs is read again, up to
//! RETRIES times, before it is reported.

use crate::conninfo::{self, Env};
use crate::db::{connect, ident, literal, printable, Described};
use crate::pq::{Client, GenericClient};
use crate::shared::{shard_number, Failure, Result as Run};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How many times a bucket that differs is read again.
const RETRIES: usize = 3;

/// A move's bucket: a day of IDs.
const DAY_MS: i64 = 86_400_000;

/// A table of the shard, its key when that is an ID (its rows are
/// bucketed by the ID's time), and its columns.
pub struct Table {
    pub name: String,
    pub key: Option<String>,
    pub columns: Vec<String>,
}

/// A bucket's rows and the sum of their hashes (numeric, as text).
pub type Reading = (i64, String);

/// Readings per bucket.
pub type Sums = BTreeMap<i64, Reading>;

/// A bucket that differs, and each side's reading of it.
pub type Difference = (i64, Option<Reading>, Option<Reading>);

/// How rows are bucketed: `ms` milliseconds of IDs each, aligned on the
/// Unix epoch (a day's bucket is a UTC day), the IDs' epoch being
/// `epoch_ms` after it (the publisher's: both sides bucket alike).
#[derive(Clone, Copy, Debug)]
pub struct Buckets {
    pub ms: i64,
    pub epoch_ms: i64,
}

impl Buckets {
    /// Buckets of `ms`, with the epoch of the IDs `c`'s database makes.
    pub fn of(c: &mut impl GenericClient, ms: i64) -> Result<Buckets, String> {
        let epoch_ms: i64 = c
            .query_one(
                "SELECT (pg_catalog.date_part('epoch', insta_id.created_at(0)) * 1000)::bigint",
                &[],
            )
            .described()?
            .get(0);
        Ok(Buckets { ms, epoch_ms })
    }
}

/// The IDs from `lo` (inclusive) to `hi` (exclusive), either open.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Span {
    pub lo: Option<i64>,
    pub hi: Option<i64>,
}

impl Span {
    /// The IDs of bucket `b` within this span; None when they do not
    /// meet.
    pub fn of_bucket(self, b: i64, by: Buckets) -> Option<Span> {
        let bound = |b: i128| -> Option<i64> {
            // Past i64's range on either side: open.
            i64::try_from((b * by.ms as i128 - by.epoch_ms as i128) << 23).ok()
        };
        let lo = [self.lo, bound(b as i128)].into_iter().flatten().max();
        let hi = [self.hi, bound(b as i128 + 1)].into_iter().flatten().min();
        match (lo, hi) {
            (Some(l), Some(h)) if l >= h => None,
            _ => Some(Span { lo, hi }),
        }
    }

    fn condition(self, key: &str) -> String {
        let mut c = Vec::new();
        if let Some(lo) = self.lo {
            c.push(format!("{} OPERATOR(pg_catalog.>=) {lo}", ident(key)));
        }
        match self.hi {
            Some(hi) => c.push(format!("{} OPERATOR(pg_catalog.<) {hi}", ident(key))),
            // Open above: bounded all the same, by the largest bigint. A
            // copy just made has no statistics, and the planner's guess for
            // `id >= lo` alone is a third of the table (a scan of all of it:
            // 0.3 s for 546 MB at the cutover in bench/moves.sh); for a
            // range it is 0.5%, which goes through the key's index.
            None if self.lo.is_some() => c.push(format!(
                "{} OPERATOR(pg_catalog.<=) {}",
                ident(key),
                i64::MAX
            )),
            None => {}
        }
        if c.is_empty() {
            "true".to_string()
        } else {
            c.join(" AND ")
        }
    }
}

/// A bucket of a table that differs: its rows and sum on each side
/// (None: no rows).
#[derive(Debug, PartialEq)]
pub struct Mismatch {
    pub table: String,
    /// None for a table without an ID key: the whole table.
    pub bucket: Option<i64>,
    pub publisher: Option<Reading>,
    pub subscriber: Option<Reading>,
}

/// The buckets where two readings differ, in order.
pub fn differing(a: &Sums, b: &Sums) -> Vec<Difference> {
    let mut keys: Vec<i64> = a.keys().chain(b.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(k) != b.get(k))
        .map(|k| (k, a.get(&k).cloned(), b.get(&k).cloned()))
        .collect()
}

/// The settings a value's text depends on, fixed for each reading so that
/// both servers write a row alike; row security off, so that reading a
/// table never runs its owner's policies (a table whose policies would
/// apply is an error instead); and the body of the reading's function
/// not checked where it is made, by the tool's role.
const READING_SETTINGS: [(&str, &str); 10] = [
    ("search_path", "pg_catalog, pg_temp"),
    ("standard_conforming_strings", "on"),
    ("DateStyle", "ISO, YMD"),
    ("IntervalStyle", "postgres"),
    ("TimeZone", "UTC"),
    ("extra_float_digits", "1"),
    ("bytea_output", "hex"),
    ("lc_monetary", "C"),
    ("row_security", "off"),
    ("check_function_bodies", "off"),
];

/// The shard's tables (every partition; a partitioned table's rows are
/// its partitions'), with their ID key (a one-column bigint primary key
/// whose default is insta_id.next_id's) and their columns.
pub fn tables(c: &mut impl GenericClient, schema: &str) -> Result<Vec<Table>, String> {
    Ok(c.query(
        "SELECT c.relname::text,
                (SELECT a.attname::text FROM pg_catalog.pg_index i
                 JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                 WHERE i.indrelid = c.oid AND i.indisprimary AND i.indnkeyatts = 1
                   AND a.atttypid = 'pg_catalog.int8'::pg_catalog.regtype
                   AND EXISTS (SELECT FROM pg_catalog.pg_attrdef d
                               JOIN pg_catalog.pg_depend p ON p.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass
                                    AND p.objid = d.oid AND p.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                               JOIN pg_catalog.pg_proc f ON f.oid = p.refobjid AND f.proname = 'next_id'
                               JOIN pg_catalog.pg_namespace fn ON fn.oid = f.pronamespace AND fn.nspname = 'insta_id'
                               WHERE d.adrelid = c.oid AND d.adnum = a.attnum)),
                ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute a
                      WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)
         FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1::text AND c.relkind = 'r'
         ORDER BY 1",
        &[&schema],
    )
    .described()?
    .into_iter()
    .map(|r| Table {
        name: r.get(0),
        key: r.get(1),
        columns: r.get(2),
    })
    .collect())
}

/// Where a reading runs, so that it undoes whatever the table owner's
/// code changed in the session (settings, temporary objects): in a session
/// of the tool's own, in a transaction rolled back; within the cutover's
/// transaction, in a savepoint rolled back to.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Within {
    Session,
    Transaction,
}

/// One reading of tables: for each part, a table's rows in its span (a
/// table without an ID key: all, in bucket 0) per bucket; none for a
/// table that is not there. One statement on the server for all the parts
/// (the cutover's reading stays a few round trips whatever the number of
/// tables); a pass before the cutover reads one table at a time, so that
/// no lock is held on all of them for the whole pass.
pub fn sums(
    c: &mut Client,
    within: Within,
    schema: &str,
    parts: &[(&Table, Span)],
    by: Buckets,
) -> Result<Vec<Sums>, String> {
    let (open, close) = match within {
        // (READ COMMITTED whatever the role's default: the gate reads
        // only in it)
        Within::Session => ("BEGIN ISOLATION LEVEL READ COMMITTED", "ROLLBACK"),
        Within::Transaction => (
            "SAVEPOINT insta_id_reading",
            "ROLLBACK TO SAVEPOINT insta_id_reading; RELEASE SAVEPOINT insta_id_reading",
        ),
    };
    c.batch_execute(open).described()?;
    let read = reading(c, within, schema, parts, by);
    let closed = c.batch_execute(close).described();
    let read = read?;
    closed?;
    Ok(read)
}

/// The cutover's reading made once in `c`, a session of its own opened
/// for a try, over no rows and before the clients are paused: a new
/// session's first call of insta_id's gate compiles its functions and
/// fills the catalog caches (about 15 ms, against 6 after), which would
/// otherwise be paid under the cutover's lock. Only the tables with an ID
/// key, as at the cutover (a table without one would be read whole), and
/// a second at most. Best effort: a failure here (a table locked by DDL)
/// is left to the reading itself. An error only when the reading took an
/// advisory lock in the session (an index expression of the shard's
/// owner), which no rollback releases: the cutover's own check, later in
/// this session, would not see it.
pub fn warm(c: &mut Client, schema: &str) -> Result<(), String> {
    let held = |c: &mut Client| -> Result<i64, String> {
        Ok(c.query_one(ADVISORY_HELD, &[]).described()?.get(0))
    };
    let before = held(c)?;
    let run = |c: &mut Client| -> Result<(), String> {
        c.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '1s'; SET LOCAL statement_timeout = '1s'")
            .described()?;
        let by = Buckets::of(c, DAY_MS)?;
        let tables = tables(c, schema)?;
        let none = Span {
            lo: Some(i64::MAX),
            hi: Some(i64::MAX),
        };
        let parts: Vec<(&Table, Span)> = tables
            .iter()
            .filter(|t| t.key.is_some())
            .map(|t| (t, none))
            .collect();
        reading(c, Within::Transaction, schema, &parts, by).map(drop)
    };
    let _ = run(c);
    let _ = c.batch_execute("ROLLBACK");
    if held(c)? != before {
        return Err(ADVISORY_TAKEN.to_string());
    }
    Ok(())
}

/// The advisory locks the session holds (the owner's code may take one,
/// which no rollback releases).
const ADVISORY_HELD: &str = "SELECT pg_catalog.count(*) FROM pg_catalog.pg_locks
                             WHERE pid = pg_catalog.pg_backend_pid() AND locktype = 'advisory'";
const ADVISORY_TAKEN: &str = "reading the shard's tables took an advisory lock in the cutover's session (an index expression of the shard's owner): given up";

fn reading(
    c: &mut Client,
    within: Within,
    schema: &str,
    parts: &[(&Table, Span)],
    by: Buckets,
) -> Result<Vec<Sums>, String> {
    let mut set: String = READING_SETTINGS
        .iter()
        .map(|(name, value)| format!("SET LOCAL {name} = {};", literal(value)))
        .collect();
    if within == Within::Session {
        set += " SET LOCAL lock_timeout = '30s';";
    }
    c.batch_execute(&set).described()?;
    let mut names: Vec<String> = parts.iter().map(|(t, _)| t.name.clone()).collect();
    names.sort();
    names.dedup();
    let on_this_side = "SELECT c.relname::text
                        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = $1::text AND c.relname = ANY ($2::text[]) AND c.relkind = 'r'";
    let present: Vec<String> = c
        .query(on_this_side, &[&schema, &names])
        .described()?
        .into_iter()
        .map(|r| r.get(0))
        .collect();
    let mut out = vec![Sums::new(); parts.len()];
    if present.is_empty() {
        return Ok(out);
    }
    // Locked first: the tables read are the ones listed (a schema's owner
    // may drop and make tables, by the same name, in between).
    c.batch_execute(&format!(
        "LOCK TABLE {} IN ACCESS SHARE MODE",
        present
            .iter()
            .map(|t| format!("ONLY {}.{}", ident(schema), ident(t)))
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .described()?;
    // The tables read through insta_id's gate (insta_id._gate_query), all
    // in one call: planning a query on a table folds its index expressions
    // and predicates, its owner's code, which runs there as the one owner
    // of the schema's code, in a security-restricted operation, never as
    // the tool's role; a schema whose code has several owners is refused
    // (42501). (One call: the gate walks the schema's objects once, which
    // the cutover's budget needs for a shard of thousands of them.)
    let mut selects = Vec::new();
    let mut tables = Vec::new();
    for (i, (t, span)) in parts.iter().enumerate() {
        if !present.contains(&t.name) {
            continue;
        }
        // Floor division: a key before the Unix epoch is below zero.
        let (bucket, filter) = match &t.key {
            Some(k) => {
                // (every operator and type named in pg_catalog: the gate
                // puts the shard's schema first on search_path)
                let (ms, b) = (
                    format!(
                        "((t.{} OPERATOR(pg_catalog.>>) 23) OPERATOR(pg_catalog.+) {})",
                        ident(k),
                        by.epoch_ms
                    ),
                    by.ms,
                );
                (
                    format!("{ms} OPERATOR(pg_catalog./) {b} OPERATOR(pg_catalog.-) ({ms} OPERATOR(pg_catalog.%) {b} OPERATOR(pg_catalog.<) 0)::pg_catalog.int4"),
                    span.condition(k),
                )
            }
            None => ("0".to_string(), "true".to_string()),
        };
        // The publisher's columns, by name: the subscriber may have them
        // in another order, or more.
        let row = t
            .columns
            .iter()
            .map(|col| format!("t.{}", ident(col)))
            .collect::<Vec<_>>()
            .join(", ");
        let table = format!("{}.{}", ident(schema), ident(&t.name));
        selects.push(format!(
            "(SELECT {i}, ({bucket})::pg_catalog.int8, pg_catalog.count(*),
                     pg_catalog.sum(('x' OPERATOR(pg_catalog.||) pg_catalog.left(pg_catalog.md5(ROW({row})::pg_catalog.text), 16))
                                    ::pg_catalog.bit(64)::pg_catalog.int8::pg_catalog.numeric)::pg_catalog.text
              FROM ONLY {table} t WHERE {filter} GROUP BY 2)"
        ));
        tables.push(table);
    }
    if selects.is_empty() {
        return Ok(out);
    }
    // One value back: "part bucket rows sum" per bucket, comma-separated.
    let query = format!(
        "SELECT pg_catalog.string_agg(x.p OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) x.b
                                      OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) x.n
                                      OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) x.s, ',')
         FROM ({}) x(p, b, n, s)",
        selects.join(" UNION ALL ")
    );
    let sums: Option<String> = c
        .query_one(
            "SELECT insta_id._gate_query($1::text::pg_catalog.name, $2::text[]::pg_catalog.regclass[], $3::text)",
            &[&schema, &tables, &query],
        )
        .described()?
        .get(0);
    for bucket in sums.iter().flat_map(|s| s.split(',')) {
        let unreadable = || {
            format!(
                "an unreadable sum in schema {}: {bucket}",
                printable(schema)
            )
        };
        let mut f = bucket.split(' ');
        let (Some(i), Some(b), Some(n), Some(sum)) = (f.next(), f.next(), f.next(), f.next())
        else {
            return Err(unreadable());
        };
        let (Ok(i), Ok(b), Ok(n)) = (i.parse::<usize>(), b.parse::<i64>(), n.parse::<i64>()) else {
            return Err(unreadable());
        };
        if i >= out.len() {
            return Err(unreadable());
        }
        if n > 0 {
            out[i].insert(b, (n, sum.to_string()));
        }
    }
    Ok(out)
}

/// The only reading of a list of one.
fn one(mut readings: Vec<Sums>) -> Sums {
    readings.pop().unwrap_or_default()
}

/// The two copies of `schema` compared over `span`: `publisher` first
/// (the side the other follows, on replication slot `slot` when there is
/// one), then `subscriber`. Returns the buckets that still differ after
/// RETRIES readings, and how many rows were compared. Over a span that
/// does not begin at the first ID, the tables without an ID key are left
/// out.
pub fn compare(
    publisher: (&mut Client, Within),
    subscriber: &mut Client,
    slot: Option<&str>,
    schema: &str,
    span: Span,
    by: Buckets,
) -> Result<(Vec<Mismatch>, i64), String> {
    let (publisher, within) = publisher;
    let mut found = Vec::new();
    let mut rows = 0;
    for t in tables(publisher, schema)? {
        // A table without an ID key is compared whole, by the first pass
        // only (from the first ID).
        if t.key.is_none() && span.lo.is_some() {
            continue;
        }
        let mut left = Vec::new();
        for attempt in 0..=RETRIES {
            let spans: Vec<(i64, Span)> = if attempt == 0 {
                vec![(0, span)]
            } else if t.key.is_some() {
                left.iter()
                    .filter_map(|d: &Difference| span.of_bucket(d.0, by).map(|s| (d.0, s)))
                    .collect()
            } else {
                vec![(0, span)]
            };
            let mut again = Vec::new();
            for (b, span) in spans {
                let p = one(sums(publisher, within, schema, &[(&t, span)], by)?);
                caught_up(publisher, slot)?;
                let s = one(sums(
                    subscriber,
                    Within::Session,
                    schema,
                    &[(&t, span)],
                    by,
                )?);
                if attempt == 0 {
                    rows += p.values().map(|v| v.0).sum::<i64>();
                }
                again.extend(
                    differing(&p, &s)
                        .into_iter()
                        .filter(|d| attempt == 0 || t.key.is_none() || d.0 == b),
                );
            }
            left = again;
            if left.is_empty() {
                break;
            }
        }
        found.extend(left.into_iter().map(|(b, p, s)| Mismatch {
            table: t.name.clone(),
            bucket: t.key.as_ref().map(|_| b),
            publisher: p,
            subscriber: s,
        }));
    }
    Ok((found, rows))
}

/// A move's comparison before its cutover: passes over the IDs made
/// until each pass began (and, in the first, the tables without an ID
/// key), each next one over those made since the last began, until a pass
/// takes under two seconds (five at most). A pass ends before any ID a
/// transaction still open (and writing) when it began may have made: the
/// rows it reads were all committed then. The bucket is a day.
/// Returns the buckets that still differ (rows changing as they were
/// read, or copies that differ: the cutover reads them again, under its
/// lock), each with its line, and the first ID the cutover compares.
/// From `since` (an earlier call's), only the IDs made since: between two
/// tries of a cutover. `sides`: what the lines call the publisher and the
/// subscriber (a move's old and new servers; a rollback's the other way).
pub fn before_cutover(
    publisher: &mut Client,
    subscriber: &mut Client,
    slot: &str,
    schema: &str,
    since: Option<i64>,
    sides: (&str, &str),
) -> Result<(Vec<(Mismatch, String)>, i64), String> {
    let by = Buckets::of(publisher, DAY_MS)?;
    let mut lo = since;
    let mut differ = Vec::new();
    for pass in 1..=5 {
        let started = Instant::now();
        let hi: i64 = publisher
            .query_one(
                "SELECT insta_id.min_id(LEAST(pg_catalog.clock_timestamp(),
                            (SELECT pg_catalog.min(a.xact_start) FROM pg_catalog.pg_stat_activity a
                             WHERE a.datname = pg_catalog.current_database() AND a.backend_xid IS NOT NULL
                               AND a.pid <> pg_catalog.pg_backend_pid())))",
                &[],
            )
            .described()?
            .get(0);
        let span = Span { lo, hi: Some(hi) };
        let (found, rows) = compare(
            (publisher, Within::Session),
            subscriber,
            Some(slot),
            schema,
            span,
            by,
        )?;
        println!(
            "   pass {pass}: {rows} rows {} in {:.1} s{}",
            match (pass, since) {
                (1, None) => "made until it began",
                (1, Some(_)) => "made since the last comparison",
                _ => "made since the pass before began",
            },
            started.elapsed().as_secs_f64(),
            if found.is_empty() {
                ", the same on both servers"
            } else {
                ""
            }
        );
        for m in found {
            let line = described(publisher, &m, by, sides)?;
            differ.push((m, line));
        }
        lo = Some(hi);
        if started.elapsed() < Duration::from_secs(2) {
            break;
        }
    }
    Ok((differ, lo.unwrap_or(i64::MIN)))
}

/// The cutover's comparison, within its try: `locked` holds the old
/// server's tables in the cutover's transaction, and the new server
/// (`subscriber`, a session of the comparison's own) has applied
/// everything committed before. Compared: the rows made since the last
/// pass before began (`lo`), and the buckets that differed then
/// (`again`). Returns each difference as a line, with `sides` as
/// before_cutover's.
pub fn at_cutover(
    locked: &mut Client,
    subscriber: &mut Client,
    schema: &str,
    lo: i64,
    again: &[Mismatch],
    sides: (&str, &str),
) -> Result<Vec<String>, String> {
    // The owner's code may take a session's advisory lock, which no
    // rollback releases: the try is given up rather than go on with it.
    let held: i64 = locked.query_one(ADVISORY_HELD, &[]).described()?.get(0);
    let by = Buckets::of(locked, DAY_MS)?;
    // One reading on each side, of every part: nothing changes under the
    // lock, so nothing is read again.
    let tables = tables(locked, schema)?;
    let since = Span {
        lo: Some(lo),
        hi: None,
    };
    let mut parts: Vec<(&Table, Span, Option<i64>)> = tables
        .iter()
        .filter(|t| t.key.is_some())
        .map(|t| (t, since, None))
        .collect();
    for m in again {
        let Some(t) = tables.iter().find(|t| t.name == m.table) else {
            continue;
        };
        let span = match m.bucket {
            Some(b) => match Span::default().of_bucket(b, by) {
                Some(s) => s,
                None => continue,
            },
            None => Span::default(),
        };
        parts.push((t, span, m.bucket));
    }
    let read: Vec<(&Table, Span)> = parts.iter().map(|(t, s, _)| (*t, *s)).collect();
    // Both sides read at once: the subscriber has applied everything
    // committed before the lock, so its reading need not wait for the
    // locked side's, and the clients' pause is the longer of the two.
    let (p, s) = std::thread::scope(|scope| {
        let s = scope.spawn(|| sums(subscriber, Within::Session, schema, &read, by));
        let p = sums(locked, Within::Transaction, schema, &read, by);
        (
            p,
            s.join()
                .unwrap_or_else(|_| Err("the copy's reading panicked".to_string())),
        )
    });
    let (p, s) = (p?, s?);
    let mut found = Vec::new();
    for (((t, _, bucket), p), s) in parts.iter().zip(&p).zip(&s) {
        found.extend(
            differing(p, s)
                .into_iter()
                .filter(|d| bucket.is_none_or(|b| d.0 == b) || t.key.is_none())
                .map(|(b, p, s)| Mismatch {
                    table: t.name.clone(),
                    bucket: t.key.as_ref().map(|_| b),
                    publisher: p,
                    subscriber: s,
                }),
        );
    }
    // The same bucket from two parts (rows since, and differing before)
    // is said once.
    let mut seen = std::collections::HashSet::new();
    found.retain(|m| seen.insert((m.table.clone(), m.bucket)));
    if locked
        .query_one(ADVISORY_HELD, &[])
        .described()?
        .get::<_, i64>(0)
        != held
    {
        return Err(ADVISORY_TAKEN.to_string());
    }
    let mut said = Vec::new();
    for m in &found {
        said.push(described(locked, m, by, sides)?);
    }
    Ok(said)
}

/// Until the subscriber has confirmed, on `slot`, everything committed on
/// the publisher so far (a commit of its own flushes the WAL, so the
/// walsender need not wait for the WAL writer); 30 s at most, after which
/// the reading goes on (and a difference is read again). A slot that is
/// missing or not streaming is not waited for.
fn caught_up(publisher: &mut Client, slot: Option<&str>) -> Result<(), String> {
    let Some(slot) = slot else { return Ok(()) };
    let lsn: String = publisher
        .query_one("SELECT pg_catalog.pg_current_wal_insert_lsn()::text", &[])
        .described()?
        .get(0);
    let until = Instant::now() + Duration::from_secs(30);
    match crate::db::slot_reached(publisher, slot, &lsn, Duration::from_millis(20), true, || {
        Instant::now() > until
    })? {
        // (Not streaming: the copies are compared as they stand.)
        crate::db::Reached::Yes | crate::db::Reached::Idle => Ok(()),
        crate::db::Reached::No => Err(format!(
            "the subscriber of {slot} did not apply what the old server had committed ({lsn}) within 30 s: it is behind (pg_stat_subscription there); compare again once it has caught up"
        )),
    }
}

/// A bucket's line for the operator: its table, its first millisecond
/// (as `publisher`'s epoch decodes it), and what each side has.
pub fn described(
    publisher: &mut impl GenericClient,
    m: &Mismatch,
    by: Buckets,
    sides: (&str, &str),
) -> Result<String, String> {
    let when = match m.bucket {
        Some(b) => {
            let first = Span::default()
                .of_bucket(b, by)
                .and_then(|s| s.lo)
                .unwrap_or(i64::MIN);
            let at: String = publisher
                .query_one("SELECT insta_id.created_at($1::bigint)::text", &[&first])
                .described()?
                .get(0);
            format!("IDs made from {at}, IDs {first} and on")
        }
        None => "the whole table (no bigint primary key)".to_string(),
    };
    let side = |s: &Option<Reading>| match s {
        Some((1, _)) => "1 row".to_string(),
        Some((n, _)) => format!("{n} rows"),
        None => "no rows".to_string(),
    };
    let same_count = matches!((&m.publisher, &m.subscriber), (Some(a), Some(b)) if a.0 == b.0);
    Ok(format!(
        "{}: {}: {} on the {}, {} on the {}{}",
        printable(&m.table),
        when,
        side(&m.publisher),
        sides.0,
        side(&m.subscriber),
        sides.1,
        if same_count { ", rows that differ" } else { "" }
    ))
}

/// What `insta-id verify` was asked.
#[derive(clap::Args)]
pub struct Args {
    /// The logical shard, 0 to 8191.
    #[arg(value_parser = shard_number)]
    pub shard: u32,
    /// One server with a copy of the shard (a move's old server).
    #[arg(long, value_name = "CONNINFO")]
    pub from: String,
    /// The other (a move's new server).
    #[arg(long, value_name = "CONNINFO")]
    pub to: String,
    /// The time each bucket of IDs spans (a PostgreSQL interval, a second
    /// or more): a difference is reported per table and bucket.
    #[arg(long, value_name = "INTERVAL", default_value = "1 day")]
    pub bucket: String,
}

pub fn run(a: &Args, env: &Env) -> ExitCode {
    match verify(a, env) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => e.exit(),
    }
}

/// Compares the shard's two copies; true when they are the same.
fn verify(a: &Args, env: &Env) -> Run<bool> {
    let usage = |e: conninfo::Error| Failure::Usage(e.to_string());
    if a.shard > 8191 {
        return Err(Failure::Usage(format!(
            "the shard must be a number from 0 to 8191, not {}",
            a.shard
        )));
    }
    let from_s = conninfo::resolve(&a.from, env).map_err(usage)?;
    let to_s = conninfo::resolve(&a.to, env).map_err(usage)?;
    let shard = a.shard as i32;
    let mut from =
        connect(&from_s).map_err(|e| format!("the old server ({}): {e}", from_s.label))?;
    let mut to = connect(&to_s).map_err(|e| format!("the new server ({}): {e}", to_s.label))?;
    for (c, who) in [
        (&mut from, format!("the old server ({})", from_s.label)),
        (&mut to, format!("the new server ({})", to_s.label)),
    ] {
        crate::db::need_superuser(
            c,
            "insta-id verify reads insta_id's tables and each shard table through insta_id's gate",
        )
        .map_err(|e| format!("{who}: {e}"))?;
    }
    let bucket_ms: i64 = from
        .query_one(
            "SELECT (pg_catalog.date_part('epoch', $1::text::interval) * 1000)::bigint",
            &[&a.bucket],
        )
        .map_err(|e| {
            Failure::Usage(format!(
                "--bucket {}: {}",
                a.bucket,
                crate::db::describe(&e)
            ))
        })?
        .get(0);
    if bucket_ms < 1000 {
        return Err(Failure::Usage(format!(
            "--bucket {}: a bucket spans a second or more",
            a.bucket
        )));
    }
    // The shard's schema: registered, or kept for a move (the old copy
    // during a rollback window), on either side; the same name on both.
    let schema_of = |c: &mut Client| -> Run<Option<String>> {
        Ok(c.query_opt(
            "SELECT schema_name::text FROM insta_id_admin.shard_registry WHERE shard_id = $1::int
             UNION ALL
             SELECT schema_name::text FROM insta_id_admin.moves
             WHERE shard_id = $1::int AND schema_name IS NOT NULL AND schema_name <> ''
             LIMIT 1",
            &[&shard],
        )
        .described()?
        .map(|r| r.get(0)))
    };
    let schema = match (schema_of(&mut from)?, schema_of(&mut to)?) {
        (Some(f), Some(t)) if f != t => {
            return Err(Failure::Failed(format!(
                "shard {shard} is schema {} on the old server and {} on the new one: not copies of each other",
                printable(&f),
                printable(&t)
            )))
        }
        (Some(s), _) | (None, Some(s)) => s,
        (None, None) => {
            return Err(Failure::Failed(format!(
                "shard {shard} is on neither server (their registries and moves name it nowhere)"
            )))
        }
    };
    for (c, side) in [
        (&mut from, "old server (--from)"),
        (&mut to, "new server (--to)"),
    ] {
        let there: bool = c
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1::text)",
                &[&schema],
            )
            .described()?
            .get(0);
        if !there {
            return Err(Failure::Failed(format!(
                "schema {} of shard {shard} is not on the {side}: no copy there to compare",
                printable(&schema)
            )));
        }
    }
    // The side the other follows is read first: the move's slot on the old
    // server, or, once a move finished with a copy kept, the slot back on
    // the new one.
    let slot = |c: &mut Client, name: String| -> Run<Option<String>> {
        Ok(c.query_opt(
            "SELECT slot_name::text FROM pg_catalog.pg_replication_slots
             WHERE slot_name = $1::text AND database = pg_catalog.current_database()",
            &[&name],
        )
        .described()?
        .map(|r| r.get(0)))
    };
    let forward = slot(&mut from, format!("insta_move_{shard}"))?;
    let back = if forward.is_none() {
        slot(&mut to, format!("insta_back_{shard}"))?
    } else {
        None
    };
    let started = Instant::now();
    let (publisher, subscriber, slot, sides) = match back {
        Some(_) => (
            &mut to,
            &mut from,
            back.as_deref(),
            ("new server", "old server"),
        ),
        None => (
            &mut from,
            &mut to,
            forward.as_deref(),
            ("old server", "new server"),
        ),
    };
    // Said first: a copy that does not follow shows differences that are
    // only what it has not applied.
    let stopped = match slot {
        Some(slot) => replication(publisher, subscriber, slot, sides)?,
        None => None,
    };
    if let Some(why) = &stopped {
        println!("WARNING: {why}");
    }
    let by = Buckets::of(publisher, bucket_ms)?;
    let (mismatches, rows) = compare(
        (publisher, Within::Session),
        subscriber,
        slot,
        &schema,
        Span::default(),
        by,
    )?;
    for m in &mismatches {
        println!("{}", described(publisher, m, by, sides)?);
    }
    println!(
        "shard {shard} ({}): {rows} rows on the {} compared in {:.1} s: {}",
        printable(&schema),
        sides.0,
        started.elapsed().as_secs_f64(),
        match (mismatches.is_empty(), &stopped) {
            (true, _) => "the same on both servers".to_string(),
            (false, None) => format!("{} buckets differ", mismatches.len()),
            (false, Some(_)) => format!(
                "{} buckets differ, while the replication between them does not run (above)",
                mismatches.len()
            ),
        }
    );
    Ok(mismatches.is_empty())
}

/// Whether the replication through `slot` (the publisher's; the
/// subscription of the same name on the subscriber) runs: None, or a
/// sentence saying what stops it and how much WAL it has not applied. (One
/// that runs but lags is waited for by the comparison, which says so if it
/// does not catch up: caught_up.)
fn replication(
    publisher: &mut Client,
    subscriber: &mut Client,
    slot: &str,
    sides: (&str, &str),
) -> Run<Option<String>> {
    let s = subscriber
        .query_opt(
            "SELECT s.subenabled, EXISTS (SELECT FROM pg_catalog.pg_stat_subscription w
                                          WHERE w.subid = s.oid AND w.relid IS NULL AND w.pid IS NOT NULL)
             FROM pg_catalog.pg_subscription s
             WHERE s.subname = $1::text
               AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())",
            &[&slot],
        )
        .described()?;
    let p = publisher
        .query_one(
            "SELECT s.active, pg_catalog.pg_size_pretty(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), s.confirmed_flush_lsn))
             FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = $1::text",
            &[&slot],
        )
        .described()?;
    let (active, behind): (bool, Option<String>) = (p.get(0), p.get(1));
    let behind = behind.unwrap_or_else(|| "?".into());
    let stops = match s.map(|r| (r.get::<_, bool>(0), r.get::<_, bool>(1))) {
        None => Some(format!("the {} has no subscription {slot}", sides.1)),
        Some((false, _)) => Some(format!(
            "its subscription {slot} on the {} is disabled",
            sides.1
        )),
        Some((true, false)) => Some(format!(
            "no apply worker runs for its subscription {slot} on the {} (its log says why)",
            sides.1
        )),
        Some((true, true)) if !active => {
            Some(format!("the {}'s slot {slot} has no reader", sides.0))
        }
        Some(_) => None,
    };
    Ok(stops.map(|why| format!(
        "the replication from the {} to the {} is stopped: {why}; the {} has not applied the last {behind} of WAL, so differences below may be only that",
        sides.0, sides.1, sides.1
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_is_its_ids_within_the_span() {
        let day = 86_400_000;
        let all = Span::default();
        let by = Buckets {
            ms: day,
            epoch_ms: 0,
        };
        assert_eq!(
            all.of_bucket(3, by),
            Some(Span {
                lo: Some((3 * day) << 23),
                hi: Some((4 * day) << 23)
            })
        );
        // Below zero: the bucket below 0 holds the negative keys.
        assert_eq!(
            all.of_bucket(-1, by),
            Some(Span {
                lo: Some((-day) << 23),
                hi: Some(0)
            })
        );
        // The span narrows it, or misses it.
        let since = Span {
            lo: Some(((3 * day) << 23) + 5),
            hi: None,
        };
        assert_eq!(
            since.of_bucket(3, by),
            Some(Span {
                lo: Some(((3 * day) << 23) + 5),
                hi: Some((4 * day) << 23)
            })
        );
        assert_eq!(since.of_bucket(2, by), None);
        // The last bucket's end is past i64: open.
        let last = (i64::MAX >> 23) / day;
        assert_eq!(all.of_bucket(last, by).unwrap().hi, None);
        assert_eq!(
            all.of_bucket(i64::MIN / day / (1 << 23) - 1, by)
                .unwrap()
                .lo,
            None
        );
    }

    #[test]
    fn readings_differ_where_a_bucket_is_missing_or_changed() {
        let a: Sums = [(1, (2, "5".to_string())), (2, (1, "7".to_string()))].into();
        let b: Sums = [(1, (2, "5".to_string())), (3, (1, "7".to_string()))].into();
        assert_eq!(
            differing(&a, &b),
            vec![
                (2, Some((1, "7".to_string())), None),
                (3, None, Some((1, "7".to_string())))
            ]
        );
        assert!(differing(&a, &a).is_empty());
    }

    #[test]
    fn a_span_reads_by_the_key() {
        assert_eq!(Span::default().condition("id"), "true");
        assert_eq!(
            Span {
                lo: Some(-3),
                hi: Some(9)
            }
            .condition("I\"d"),
            r#""I""d" OPERATOR(pg_catalog.>=) -3 AND "I""d" OPERATOR(pg_catalog.<) 9"#
        );
        // Open above: a range all the same (the planner's guess for one
        // without statistics goes through the index).
        assert_eq!(
            Span {
                lo: Some(5),
                hi: None
            }
            .condition("id"),
            r#""id" OPERATOR(pg_catalog.>=) 5 AND "id" OPERATOR(pg_catalog.<=) 9223372036854775807"#
        );
        assert_eq!(
            Span {
                lo: None,
                hi: Some(5)
            }
            .condition("id"),
            r#""id" OPERATOR(pg_catalog.<) 5"#
        );
    }
}
