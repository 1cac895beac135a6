//! `insta-id status`: the shard moves a server takes part in. Each server
//! records its side of a move in `insta_id_admin.moves` (the step reached and
//! when, written by the mover in the same transaction as what the step
//! makes); the catalogs add how far the copy or the stream is. Every object
//! of a move is named `insta_move_<shard>`: on the old server a publication
//! and its slot, on the new one a subscription. A session holds the shard's
//! move lock for as long as a mover runs, on the old server until the
//! cutover and on the new one while the move is finished; a move nobody
//! holds was interrupted, and running it again finishes it or rolls it
//! back.

use crate::conninfo::Settings;
use crate::db::{connect, describe};
use crate::mover::steps::{Arriving, Leaving, Step};
use crate::pq::{Client, GenericClient};
use std::process::ExitCode;

/// One move as one server sees it.
struct Move {
    shard: i32,
    /// The side, its recorded step and what the catalogs add.
    step: String,
    /// The same, field by field (--json): the side, the other server as
    /// this one's record names it, the step recorded and since when, when
    /// the move began, and what the catalogs add.
    side: &'static str,
    recorded: Option<Recorded>,
    detail: Option<String>,
    /// The process holding the shard's move lock here, and since when.
    mover: Option<(i32, String)>,
    /// On the old server before the cutover: the sessions holding the
    /// shard's tables longer than the default budget, which a cutover
    /// waits for (pause::holders).
    held_by: Vec<String>,
    /// What its recorded step means when no mover holds it: not every
    /// move without one is interrupted (a word for --json, and a line).
    idle: (&'static str, &'static str),
}

/// A server's record of its side of a move.
#[derive(Clone)]
struct Recorded {
    peer: String,
    step: String,
    since: String,
    started: String,
}

/// A move with no mover, by its side's recorded step.
/// `held`: the new server's record says the move paused the shard's
/// PgBouncer entry and neither resumed nor re-pointed it since.
fn idle_at(step: Option<Typed>, past: bool, held: bool) -> (&'static str, &'static str) {
    if held {
        // Killed in its cutover: the entry it paused holds every client of
        // the shard until someone resumes it.
        return ("interrupted, clients held", "no mover on the servers given, and the move PAUSED the shard's PgBouncer entry (shard<N>) without resuming it");
    }
    match step {
        // Fenced at a cutover without a window (or its window over): the
        // move drops it as it finishes; a run interrupted before left it.
        Some(Typed::Leaving(Leaving::Reserved)) if past => ("cut over, copy to drop", "cut over: the old copy's window is over (none, or passed); run the move again to finish it and drop the copy (or --release)"),
        Some(Typed::Leaving(Leaving::Reserved) | Typed::Arriving(Arriving::Reserved)) => ("finished, copy kept", "finished: the old copy is kept for a rollback until its window ends (--rollback returns the shard, --release drops the copy now)"),
        Some(Typed::Leaving(Leaving::Returning | Leaving::Returned) | Typed::Arriving(Arriving::Returned)) => ("rollback interrupted", "a rollback, interrupted: run the move with --rollback again to finish it"),
        _ => ("interrupted", "no mover on the servers given: interrupted (or run from a server not given); run the move again to finish or undo it"),
    }
}

/// A step as its side's type (mover::steps), None for one this tool does
/// not know (a newer tool's).
#[derive(Clone, Copy)]
enum Typed {
    Leaving(Leaving),
    Arriving(Arriving),
}

impl Typed {
    fn parse(side: &str, step: &str) -> Option<Typed> {
        if side == "leaving" {
            Leaving::parse(step).map(Typed::Leaving)
        } else {
            Arriving::parse(step).map(Typed::Arriving)
        }
    }
}

/// A JSON string.
fn json(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_or_null(text: Option<&str>) -> String {
    text.map_or("null".to_string(), json)
}

pub fn run(settings: &[Settings], as_json: bool) -> ExitCode {
    let mut failed = Vec::new();
    let mut seen: Vec<(String, (String, String), Vec<Move>)> = Vec::new();
    for s in settings {
        match connect(s).and_then(|mut c| moves(&mut c, true)) {
            Ok((head, moves)) => seen.push((s.label.clone(), head, moves)),
            Err(e) => {
                if !as_json {
                    eprintln!("insta-id: server {}: {e}", s.label);
                }
                failed.push((s.label.clone(), e));
            }
        }
    }
    let mut servers = Vec::new();
    for (label, (version, extversion), moves) in &seen {
        if !as_json {
            println!("server {label}: PostgreSQL {version}, insta_id {extversion}");
            if moves.is_empty() {
                println!("  no move");
            }
        }
        let mut listed = Vec::new();
        for m in moves {
            // The mover holds the lock on the old server until the cutover,
            // on the new one while it finishes: look on every server given.
            let elsewhere = seen
                .iter()
                .filter(|(l, _, _)| l != label)
                .find(|(_, _, ms)| ms.iter().any(|o| o.shard == m.shard && o.mover.is_some()))
                .map(|(l, _, _)| l);
            if !as_json {
                let mover = match (&m.mover, elsewhere) {
                    (Some((pid, since)), _) => format!("mover: process {pid} since {since}"),
                    (None, Some(l)) => format!("mover: on server {l}"),
                    (None, None) => m.idle.1.to_string(),
                };
                println!(
                    "  shard {}: {}; {}",
                    m.shard,
                    m.step,
                    mover.replace("<N>", &m.shard.to_string())
                );
                if m.mover.is_none()
                    && elsewhere.is_none()
                    && m.idle.0 == "interrupted, clients held"
                {
                    println!(
                        "    WARNING: PgBouncer holds the shard's clients now; they fail after its query_wait_timeout. Resume them: run the move again with --pgbouncer, --pgbouncer-map and --pgbouncer-target (it resumes the entry first), or RESUME shard{} on each PgBouncer's console",
                        m.shard
                    );
                }
                if !m.held_by.is_empty() {
                    println!(
                        "    holding the shard longer than the default budget (a cutover waits for them):\n      {}",
                        m.held_by.join("\n      ")
                    );
                }
                continue;
            }
            let r = m.recorded.as_ref();
            listed.push(format!(
                "{{\"shard\": {}, \"side\": {}, \"peer\": {}, \"step\": {}, \"since\": {}, \"started\": {}, \"detail\": {}, \"state\": {}, \"mover\": {}, \"held_by\": [{}]}}",
                m.shard,
                json(m.side),
                json_or_null(r.map(|r| r.peer.as_str())),
                json_or_null(r.map(|r| r.step.as_str())),
                json_or_null(r.map(|r| r.since.as_str())),
                json_or_null(r.map(|r| r.started.as_str())),
                json_or_null(m.detail.as_deref()),
                json(if m.mover.is_some() || elsewhere.is_some() { "running" } else { m.idle.0 }),
                match (&m.mover, elsewhere) {
                    (Some((pid, since)), _) => format!("{{\"pid\": {pid}, \"since\": {}}}", json(since)),
                    (None, Some(l)) => format!("{{\"server\": {}}}", json(l)),
                    (None, None) => "null".to_string(),
                },
                m.held_by.iter().map(|h| json(h)).collect::<Vec<_>>().join(", ")
            ));
        }
        servers.push(format!(
            "{{\"server\": {}, \"postgresql\": {}, \"insta_id\": {}, \"moves\": [{}]}}",
            json(label),
            json(version),
            json(extversion),
            listed.join(", ")
        ));
    }
    if as_json {
        let errors: Vec<String> = failed
            .iter()
            .map(|(l, e)| format!("{{\"server\": {}, \"error\": {}}}", json(l), json(e)))
            .collect();
        println!(
            "{{\"servers\": [{}], \"errors\": [{}]}}",
            servers.join(", "),
            errors.join(", ")
        );
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The shards a move is under way or interrupted for on this server.
pub fn moving_shards(c: &mut Client) -> Result<Vec<i32>, String> {
    Ok(moves(c, false)?.1.into_iter().map(|m| m.shard).collect())
}

/// What one server holds of moves, and its versions (PostgreSQL's and
/// insta_id's); an error as the operator should read it.
fn moves(c: &mut Client, with_holders: bool) -> Result<((String, String), Vec<Move>), String> {
    let described = |e: crate::pq::Error| describe(&e);
    crate::db::need_superuser(
        c,
        "insta-id reads the moves from insta_id's tables and the replication catalogs",
    )?;
    let head = c
        .query_opt(
            "SELECT pg_catalog.current_setting('server_version'), e.extversion,
                    pg_catalog.to_regclass('insta_id_admin.moves') IS NOT NULL
             FROM pg_catalog.pg_extension e WHERE e.extname = 'insta_id'",
            &[],
        )
        .map_err(described)?
        .ok_or("insta_id is not installed in this database (CREATE EXTENSION insta_id)")?;
    let (version, extversion, recorded): (String, String, bool) =
        (head.get(0), head.get(1), head.get(2));
    if !recorded {
        return Err(format!(
            "insta_id {extversion} here: insta-id needs 0.9.0 or later (ALTER EXTENSION insta_id UPDATE)"
        ));
    }
    moves_of(c, (version, extversion), with_holders).map_err(described)
}

type Head = (String, String);

fn moves_of(
    c: &mut Client,
    head: Head,
    with_holders: bool,
) -> Result<(Head, Vec<Move>), crate::pq::Error> {
    // shard -> (side, what the catalogs say of it)
    let mut found: std::collections::BTreeMap<i32, (&'static str, Option<String>)> =
        Default::default();
    // The old server's side: the publication, its slot, how far the slot
    // has confirmed (NULL on a standby, which has no WAL position of its own).
    for r in c.query(
        "SELECT substring(p.pubname FROM '^insta_move_([0-9]+)$')::int, s.slot_name IS NOT NULL, coalesce(s.active, false),
                CASE WHEN NOT pg_catalog.pg_is_in_recovery()
                     THEN pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint END
         FROM pg_catalog.pg_publication p
         LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name = p.pubname AND s.database = pg_catalog.current_database()
         WHERE p.pubname ~ '^insta_move_[0-9]+$'",
        &[],
    )? {
        let (shard, slot, active, behind): (i32, bool, bool, Option<i64>) = (r.get(0), r.get(1), r.get(2), r.get(3));
        let detail = match (slot, active, behind) {
            (false, _, _) => "published, no slot yet".to_string(),
            (true, false, _) => "slot made, nothing streaming from it".to_string(),
            (true, true, Some(b)) => format!("streaming, {b} bytes behind"),
            (true, true, None) => "streaming".to_string(),
        };
        found.insert(shard, ("leaving", Some(detail)));
    }
    // The new server's side: the subscription and its tables' states.
    for r in c.query(
        "SELECT substring(s.subname FROM '^insta_move_([0-9]+)$')::int, s.subenabled,
                (pg_catalog.count(r.srrelid) FILTER (WHERE r.srsubstate = 'r'))::int, pg_catalog.count(r.srrelid)::int,
                EXISTS (SELECT 1 FROM insta_id_admin.shard_registry g
                        WHERE g.shard_id = substring(s.subname FROM '^insta_move_([0-9]+)$')::int),
                coalesce((SELECT sum(p.bytes_processed) FROM pg_catalog.pg_stat_progress_copy p
                          WHERE p.relid IN (SELECT x.srrelid FROM pg_catalog.pg_subscription_rel x WHERE x.srsubid = s.oid)), 0)::bigint
         FROM pg_catalog.pg_subscription s
         LEFT JOIN pg_catalog.pg_subscription_rel r ON r.srsubid = s.oid
         WHERE s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
           AND s.subname ~ '^insta_move_[0-9]+$'
         GROUP BY s.oid, s.subname, s.subenabled",
        &[],
    )? {
        let (shard, enabled, ready, tables, adopted, copying): (i32, bool, i32, i32, bool, i64) =
            (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5));
        let detail = if adopted {
            "adopted; its replication is left to drop".to_string()
        } else if !enabled {
            "schema made, copy not started".to_string()
        } else if ready < tables {
            format!(
                "copying, {ready} of {tables} tables ready, {} of the others copied so far",
                crate::shared::pretty(copying.max(0) as u64)
            )
        } else {
            format!("copied ({tables} tables), streaming until the cutover")
        };
        found.insert(shard, ("arriving", Some(detail)));
    }
    // The state each server records.
    let mut state = std::collections::BTreeMap::new();
    let mut idle = std::collections::BTreeMap::new();
    let mut records = std::collections::BTreeMap::new();
    let mut before_cutover = std::collections::BTreeMap::new();
    {
        for r in c.query(
            concat!(
                "SELECT m.shard_id, m.side, m.peer, m.step,
                    pg_catalog.to_char((m.steps -> -1 ->> 'at')::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC',
                    pg_catalog.to_char(m.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC',
                    pg_catalog.to_char(m.reserve_until AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
                      || CASE WHEN m.reserve_until < pg_catalog.clock_timestamp()
                              THEN ' (past: the next run of the move, or --release, drops it)' ELSE '' END,
                    (SELECT pg_catalog.format('the slot back %s, holding %s of WAL',
                                              CASE WHEN s.active THEN 'streaming' ELSE 'idle' END,
                                              pg_catalog.pg_size_pretty(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), s.restart_lsn)))
                     FROM pg_catalog.pg_replication_slots s
                     WHERE s.slot_name = 'insta_back_' || m.shard_id AND s.database = pg_catalog.current_database()
                       AND NOT pg_catalog.pg_is_in_recovery()),
                    m.schema_name::text,
                    coalesce(m.reserve_until < pg_catalog.clock_timestamp(), false), ",
                crate::mover::steps::entry_held!("m.steps"),
                " FROM insta_id_admin.moves m"
            ),
            &[],
        )? {
            let (shard, side, peer, step, since, started, until, back): (i32, String, String, String, String, String, Option<String>, Option<String>) =
                (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5), r.get(6), r.get(7));
            let typed = Typed::parse(&side, &step);
            if matches!(typed, Some(Typed::Leaving(Leaving::Published | Leaving::Slot))) {
                before_cutover.insert(shard, r.get::<_, String>(8));
            }
            let toward = if side == "leaving" { "to" } else { "from" };
            let side = if side == "leaving" { "leaving" } else { "arriving" };
            state.insert(shard, format!("{side} {toward} {peer}, step {step} since {since} (started {started})"));
            records.insert(shard, Recorded { peer: peer.clone(), step: step.clone(), since: since.clone(), started: started.clone() });
            idle.insert(shard, idle_at(typed, r.get::<_, bool>(9), r.get::<_, bool>(10)));
            // The old copy of a finished move, kept for its rollback, and
            // the new server's side of it: their replication is the way back.
            let kept = match (until, step.as_str()) {
                (Some(u), _) => Some(format!("the old copy kept for a rollback until {u}, following the new server")),
                (None, _) if matches!(typed, Some(Typed::Arriving(Arriving::Reserved))) => Some(format!(
                    "moved; the old server keeps a copy for a rollback{}",
                    back.map_or(String::new(), |b| format!(", {b}"))
                )),
                _ => None,
            };
            match kept {
                Some(k) => {
                    found.insert(shard, (side, Some(k)));
                }
                None => {
                    found.entry(shard).or_insert((side, None));
                }
            }
        }
    }
    let found: Vec<(i32, String, &'static str, Option<String>)> = found
        .into_iter()
        .map(|(shard, (side, detail))| {
            let head = state
                .remove(&shard)
                .unwrap_or_else(|| format!("{side} (no step recorded)"));
            let detail = detail.or_else(|| {
                Some(
                    if side == "leaving" {
                        "its replication is gone"
                    } else {
                        "its subscription is gone"
                    }
                    .to_string(),
                )
            });
            let step = format!("{head}: {}", detail.as_deref().unwrap_or_default());
            (shard, step, side, detail)
        })
        .collect();
    let mut out = Vec::new();
    for (shard, step, side, detail) in found {
        let mover = c
            .query_opt(
                "SELECT a.pid, pg_catalog.to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
                 FROM pg_catalog.pg_stat_activity a WHERE a.pid = insta_id._lock_holder(insta_id._move_lock_key(), $1)",
                &[&shard],
            )?
            .map(|r| (r.get(0), r.get(1)));
        let idle = idle
            .get(&shard)
            .copied()
            .unwrap_or(idle_at(None, false, false));
        // (Not a reason to fail the status: said in its place.) The move's
        // own sessions are not what a cutover waits for: its mover, and the
        // walsenders of its copy.
        let mut held_by = Vec::new();
        if let (true, Some(schema)) = (with_holders, before_cutover.get(&shard)) {
            let mut ours: Vec<i32> = c
                .query_one(
                    "SELECT coalesce(pg_catalog.array_agg(pid), '{}') FROM pg_catalog.pg_stat_activity WHERE backend_type = 'walsender'",
                    &[],
                )?
                .get(0);
            ours.extend(mover.iter().map(|(pid, _)| *pid));
            held_by = crate::pause::holders(
                c,
                schema,
                &ours,
                Some(std::time::Duration::from_millis(
                    crate::shared::DEFAULT_PAUSE_BUDGET_MS,
                )),
            )
            .unwrap_or_else(|e| {
                vec![format!(
                    "(the sessions holding the shard could not be read: {e})"
                )]
            });
        }
        out.push(Move {
            shard,
            step,
            side,
            recorded: records.get(&shard).cloned(),
            detail,
            mover,
            held_by,
            idle,
        });
    }
    Ok((head, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(
            json("x\ny\u{1}"),
            r#""x\ny\u0001""#.replace(r"\n", r"\u000a")
        );
        assert_eq!(json_or_null(None), "null");
    }
}
