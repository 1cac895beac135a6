//! `insta-id rebalance`: carries out `insta-id plan`, one move at a time.
//! Resumable: a run first finishes (or undoes and redoes) every move the
//! servers record as interrupted, then plans again from what the servers
//! hold, so running it again after any interruption goes on where it
//! stopped. Progress: each move's own (steps, copy), and before each, the
//! moves and bytes done, the time so far and an estimate of what is left
//! at the rate so far.

use crate::conninfo::{Env, Settings};
use crate::db::{connect, describe, Described};
use crate::mover::{self, Waits, LABEL};
use crate::plan::{Fleet, Role};
use crate::pq::GenericClient;
use crate::shared::{pretty, Failure};
use std::process::ExitCode;
use std::time::Instant;

/// What `insta-id rebalance` was asked.
#[derive(clap::Args)]
pub struct Args {
    /// A server's connection string; give one per server, the new and
    /// empty ones too.
    #[arg(long = "server", value_name = "CONNINFO", required = true)]
    pub servers: Vec<String>,
    /// PgBouncer's admin console: each move pauses its shard's entry and
    /// points it at the new server (as `insta-id move --pgbouncer`), whose
    /// target is that server's host, port and dbname as given here.
    /// Repeatable, as `insta-id move`'s.
    #[arg(long, value_name = "CONNINFO", requires = "pgbouncer_map")]
    pub pgbouncer: Vec<String>,
    /// The file of PgBouncer's [databases] entries pgbouncer.ini includes:
    /// one for all, or one per --pgbouncer.
    #[arg(long, value_name = "FILE", requires = "pgbouncer")]
    pub pgbouncer_map: Vec<std::path::PathBuf>,
    /// The shards' clients find their servers otherwise: the moves
    /// re-point nothing (as `insta-id move --routing-elsewhere`). Without
    /// it, a rebalance needs --pgbouncer.
    #[arg(long, conflicts_with = "pgbouncer")]
    pub routing_elsewhere: bool,
    /// Each move's rollback window (as `insta-id move`). 0 by default: a
    /// kept copy holds a replication slot on its new server and an apply
    /// worker on its old one, which a rebalance of many shards would
    /// exhaust.
    #[arg(long, value_name = "INTERVAL", default_value = "0")]
    pub rollback_window: String,
    #[command(flatten)]
    pub choice: crate::plan::Choice,
    #[command(flatten)]
    pub waits: Waits,
}

/// A PgBouncer entry's connection string for each server: the host (or
/// socket directory), port and database libpq connected to (names
/// PgBouncer's syntax can carry unquoted; Bouncer::check refuses others).
fn targets(settings: &[Settings]) -> Result<Vec<String>, String> {
    settings
        .iter()
        .map(|s| {
            let c = connect(s).map_err(|e| format!("server {}: {e}", s.label))?;
            Ok(format!(
                "host={} port={} dbname={}",
                c.host(),
                c.port(),
                c.db()
            ))
        })
        .collect()
}

/// What a rebalance finishes first, of what the servers record; a shard's
/// two rows may say different things, and the later variant wins.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Pending {
    /// A move interrupted: finished, or undone and made afresh.
    Move,
    /// The old copy a move kept for a rollback, past its window: dropped.
    Expired,
    /// A rollback interrupted after its cutover: finished (the PgBouncer
    /// entry points back at the old server).
    Rollback,
}

/// What the servers record of moves to finish first: the shard, its old
/// and new server (indexes into the servers given, as the move named them)
/// and what is pending. Kept copies still in their window are left alone.
fn interrupted(settings: &[Settings]) -> Result<Vec<(i32, usize, usize, Pending)>, String> {
    let mut labels = Vec::new();
    let mut rows = Vec::new();
    // Shards whose old server keeps a copy (a row at 'reserved' or
    // 'returning'): the new server's row at 'reserved' is that copy's.
    let mut kept_somewhere = std::collections::BTreeSet::new();
    let mut reserved_arriving = Vec::new();
    for (i, s) in settings.iter().enumerate() {
        let mut c = connect(s).map_err(|e| format!("server {}: {}", s.label, e))?;
        labels.push(c.query_one(LABEL, &[]).described()?.get::<_, String>(0));
        for r in c
            .query(
                "SELECT shard_id, side, peer, step IN ('reserved', 'returning'),
                        coalesce(step IN ('reserved', 'returning') AND reserve_until < pg_catalog.clock_timestamp(), false),
                        step = 'returned'
                 FROM insta_id_admin.moves ORDER BY shard_id",
                &[],
            )
            .map_err(|e| format!("server {}: {}", s.label, describe(&e)))?
        {
            let (shard, side, peer): (i32, String, String) = (r.get(0), r.get(1), r.get(2));
            let (kept, expired, returned): (bool, bool, bool) = (r.get(3), r.get(4), r.get(5));
            if kept && side == "leaving" {
                kept_somewhere.insert(shard);
            }
            if kept && !expired {
                // Its window still open: left alone, unless (the new
                // server's row) no old server keeps the copy any more: a
                // release interrupted half-way, which a run finishes.
                if side == "arriving" {
                    reserved_arriving.push((shard, side, peer, i));
                }
                continue;
            }
            let pending = match (returned, expired) {
                (true, _) => Pending::Rollback,
                (_, true) => Pending::Expired,
                _ => Pending::Move,
            };
            rows.push((shard, side, peer, i, pending));
        }
    }
    for (shard, side, peer, i) in reserved_arriving {
        if !kept_somewhere.contains(&shard) {
            rows.push((shard, side, peer, i, Pending::Move));
        }
    }
    for (i, l) in labels.iter().enumerate() {
        if let Some(j) = labels[..i].iter().position(|o| o == l) {
            return Err(format!(
                "servers {} and {} name themselves alike ({l}): the moves they record cannot be told apart",
                settings[j].label, settings[i].label
            ));
        }
    }
    let mut out: Vec<(i32, usize, usize, Pending)> = Vec::new();
    for (shard, side, peer, i, pending) in rows {
        let Some(other) = labels.iter().position(|l| *l == peer) else {
            return Err(format!(
                "shard {shard} is being moved between server {} and {peer}, which is not among the servers given",
                settings[i].label
            ));
        };
        let pair = if side == "leaving" {
            (i, other)
        } else {
            (other, i)
        };
        match out.iter_mut().find(|(s, _, _, _)| *s == shard) {
            Some(seen) if seen.3 < pending => seen.3 = pending,
            Some(_) => {}
            None => out.push((shard, pair.0, pair.1, pending)),
        }
    }
    Ok(out)
}

pub fn run(a: &Args, settings: &[Settings], roles: Vec<Role>, env: &Env) -> ExitCode {
    if a.pgbouncer.is_empty() && !a.routing_elsewhere {
        eprintln!(
            "insta-id: {}",
            mover::UNROUTED.replace(" (or --router)", "")
        );
        return ExitCode::from(2);
    }
    let targets = match a.pgbouncer.is_empty() {
        true => Vec::new(),
        false => match targets(settings) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("insta-id: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let one = |shard: i32, from: usize, to: usize| mover::Args {
        shard: shard as u32,
        from: a.servers[from].clone(),
        to: a.servers[to].clone(),
        subscription: None,
        router: None,
        router_target: None,
        undo: false,
        check: false,
        rollback: false,
        release: false,
        rollback_subscription: None,
        rollback_window: a.rollback_window.clone(),
        pgbouncer: a.pgbouncer.clone(),
        pgbouncer_map: a.pgbouncer_map.clone(),
        pgbouncer_target: targets.get(to).cloned(),
        pg_bin: None,
        no_verify: false,
        routing_elsewhere: a.routing_elsewhere,
        waits: a.waits.clone(),
    };
    let stopped = |shard: i32, e: Failure| {
        eprintln!(
            "insta-id: rebalance stopped at shard {shard}: {}\nOnce that is dealt with, run it again: it finishes or undoes that move first, then plans again.",
            e.message()
        );
        ExitCode::FAILURE
    };
    let pending = match interrupted(settings) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("insta-id: {e}");
            return ExitCode::FAILURE;
        }
    };
    for (shard, from, to, what) in pending {
        println!(
            "== rebalance: {} of shard {shard} ({} -> {})",
            match what {
                Pending::Move => "the interrupted move",
                Pending::Expired => "the old copy, past its rollback window,",
                Pending::Rollback => "the interrupted rollback",
            },
            settings[from].label,
            settings[to].label
        );
        let mut args = one(shard, from, to);
        if what == Pending::Rollback {
            args.rollback = true;
            args.pgbouncer_target = targets.get(from).cloned();
        }
        if let Err(e) = mover::move_shard(&args, env) {
            return stopped(shard, e);
        }
    }
    let fleet = match Fleet::read(settings, roles) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("insta-id: {e}");
            return ExitCode::FAILURE;
        }
    };
    let labels: Vec<String> = settings.iter().map(|s| s.label.clone()).collect();
    fleet.print(&labels, "carried out one at a time");
    let moves = &fleet.plan.moves;
    let total: u64 = moves.iter().map(|m| m.bytes).sum();
    let (started, mut done) = (Instant::now(), 0u64);
    for (k, m) in moves.iter().enumerate() {
        let elapsed = started.elapsed().as_secs_f64();
        let left = if done > 0 {
            format!(
                ", about {:.0} s left",
                elapsed * (total - done) as f64 / done as f64
            )
        } else {
            String::new()
        };
        println!(
            "== rebalance: move {} of {}: shard {} ({}, {}) {} -> {}; {} of {} moved in {:.1} s{left}",
            k + 1,
            moves.len(),
            m.shard,
            fleet.schema(m),
            pretty(m.bytes),
            settings[m.from].label,
            settings[m.to].label,
            pretty(done),
            pretty(total),
            elapsed
        );
        if let Err(e) = mover::move_shard(&one(m.shard, m.from, m.to), env) {
            return stopped(m.shard, e);
        }
        done += m.bytes;
    }
    println!(
        "== rebalanced: {} moves, {} in {:.1} s",
        moves.len(),
        pretty(total),
        started.elapsed().as_secs_f64()
    );
    if fleet.plan.balanced {
        ExitCode::SUCCESS
    } else {
        crate::plan::unreachable(&fleet.plan)
    }
}
