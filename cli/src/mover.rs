//! `insta-id move`: one logical shard from one server to another while it
//! takes writes, with PostgreSQL's logical replication (both servers need
//! insta_id 0.11.0 or later, whose gate reads the shard's tables). Each server's half is the extension's
//! (src/sql/moves.sql: the lock, the state, the fence, the cutover's locks,
//! what replication does not carry); this only sequences it over its
//! sessions, and runs pg_dump for the schema, whose definitions it applies
//! as the shard's owner (src/restore.rs).
//!
//! Each server records its side in insta_id_admin.moves in the transaction that
//! makes the step, so a re-run after an interruption at any point reads how
//! far the move got: the old server's row reaches 'reserved' in the
//! transaction that unregisters and fences the shard there, the point of no
//! return. Before it, a re-run takes a complete copy up or undoes a partial
//! one; after it, it only finishes. What a run does is decided in one place
//! (rerun::decide, a pure function of both servers' records and the
//! operator's flags); the steps are types (steps.rs), and each phase a file
//! of its own: checks, copy, cutover, finish, rollback (with the release).
//!
//! Steps (each printed with its duration):
//!  1. checks, under insta_id.lock_shard_for_move on the old server, held by
//!     one session to the cutover (a second mover is refused; migrate skips
//!     the shard: DDL is not replicated);
//!  2. a publication of the schema on the old server;
//!  3. on the new server, in one transaction: the schema (pg_dump -s, run
//!     as the one owner of its objects), the
//!     fence (a copy that refuses clients' writes until adopted) and a
//!     subscription without a slot, so a schema of ours is there exactly
//!     while that subscription is; then the slot on the old server, and the
//!     copy;
//!  4. the copy, its progress printed;
//!  5. the cutover, in the old server's held session: move_lock (the
//!     shard's tables and sequences; writers wait), the new server applies
//!     everything, move_state there and move_carry here carry sequences, the
//!     high-water mark and the migration history, then move_reserve (the
//!     old copy unregistered and fenced, not dropped: a drop's time grows
//!     with the schema) and COMMIT;
//!  6. the new server adopts the shard (the fence opens); the router's map;
//!  7. the subscription, slots, publication and fence dropped; without a
//!     rollback window, the old copy (move_release).

mod checks;
mod copy;
mod cutover;
mod failover;
mod finish;
mod rerun;
mod rollback;
pub(crate) mod steps;

use crate::bouncer::{self, Bouncer, Bouncers, Drain};
use crate::conninfo::{self, Env, Settings};
use crate::db::{
    connect, ident, literal, need_superuser, printable, terminal, Described, SESSION_OPTIONS,
};
use crate::pause::{self, Budget, Watchdog};
use crate::pq::sqlstate;
use crate::pq::{Client, GenericClient};
use crate::shared::{pretty, shard_number, DEFAULT_PAUSE_BUDGET_MS};
use crate::shared::{Failure, Result};
use crate::verify;
use copy::Kept;
use failover::{applied_past_failover, failed_over, failed_over_since, make_slot, slot_in_use};
use rerun::{Locus, Next, Seen, Want};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use steps::{Arriving, Leaving, Step};

/// What `insta-id move` was asked.
#[derive(clap::Args)]
pub struct Args {
    /// The logical shard, 0 to 8191.
    #[arg(value_parser = shard_number)]
    pub shard: u32,
    /// The server holding the shard.
    #[arg(long, value_name = "CONNINFO")]
    pub from: String,
    /// The server receiving it (insta_id installed; the schema absent).
    #[arg(long, value_name = "CONNINFO")]
    pub to: String,
    /// How the new server's subscription reaches the old one (default:
    /// --from). It is stored in pg_subscription: its password belongs
    /// in the new server's password file, never in it.
    #[arg(long, value_name = "CONNINFO")]
    pub subscription: Option<String>,
    /// The fleet's router database (the demo's PL/Proxy router,
    /// scripts/demo/fleet_router.sql), whose map is re-pointed once the
    /// new server holds the shard.
    #[arg(long, value_name = "CONNINFO", requires = "router_target")]
    pub router: Option<String>,
    /// The connection string the router's map gets for the new server:
    /// the application's, not this tool's.
    #[arg(long, value_name = "CONNINFO", requires = "router")]
    pub router_target: Option<String>,
    /// Only undo an interrupted move while the old server still holds the
    /// shard (before its cutover): the partial copy dropped.
    #[arg(long, conflicts_with_all = ["rollback", "release"])]
    pub undo: bool,
    /// Run every check a move runs before it makes anything, and stop:
    /// nothing is made or changed (exit 0 when every check passes).
    #[arg(long, conflicts_with_all = ["undo", "rollback", "release"])]
    pub check: bool,
    /// Return a moved shard to the old server (the same --from and --to as
    /// its move) within its --rollback-window: every write acknowledged on
    /// the new server comes back, by the replication back that the move
    /// started at its cutover. With --pgbouncer, --pgbouncer-target is the
    /// old server's entry.
    #[arg(long, conflicts_with = "release")]
    pub rollback: bool,
    /// Drop the copy the old server keeps for a rollback, and the
    /// replication back, now rather than when the window has passed.
    #[arg(long)]
    pub release: bool,
    /// How the old server's subscription back (for a rollback) reaches
    /// the new one (default: --to); stored in pg_subscription like
    /// --subscription.
    #[arg(long, value_name = "CONNINFO")]
    pub rollback_subscription: Option<String>,
    /// How long after the cutover the old server keeps its copy of the
    /// shard, fenced and following the new one, for --rollback (a
    /// PostgreSQL interval up to 7 days; 0: dropped at the cutover). The
    /// copy holds a replication slot on the new server and an apply
    /// worker on the old one meanwhile. Any run of the move after the
    /// window drops it.
    #[arg(long, value_name = "INTERVAL", default_value = "15 min")]
    pub rollback_window: String,
    /// PgBouncer's admin console (dbname=pgbouncer, a user of its
    /// admin_users): the cutover pauses the shard's entry, shard<N>, so
    /// its clients wait instead of failing, then points it at the new
    /// server and resumes it. Repeatable: with several PgBouncers, the
    /// entry is paused on all, and pointed and resumed on all.
    #[arg(long, value_name = "CONNINFO", requires_all = ["pgbouncer_map", "pgbouncer_target"])]
    pub pgbouncer: Vec<String>,
    /// The file of PgBouncer's [databases] entries, one per logical
    /// shard, which pgbouncer.ini includes (%include); rewritten
    /// atomically with the shard's new entry.
    /// One for all the PgBouncers (a file they share), or one per
    /// --pgbouncer, in the same order.
    #[arg(long, value_name = "FILE", requires = "pgbouncer")]
    pub pgbouncer_map: Vec<std::path::PathBuf>,
    /// The shard's entry for the new server (with --rollback: the old
    /// one), as PgBouncer reaches it (host=... port=... dbname=...; no
    /// password).
    #[arg(long, value_name = "CONNSTR", requires = "pgbouncer")]
    pub pgbouncer_target: Option<String>,
    /// The shard's clients find its server otherwise (their own map, a
    /// DNS name, a router this tool does not drive): the move re-points
    /// nothing. Without it, a move needs --pgbouncer or --router; once the
    /// old server drops the shard, clients still sent there get `relation
    /// ... does not exist`.
    #[arg(long, conflicts_with_all = ["pgbouncer", "router"])]
    pub routing_elsewhere: bool,
    /// The directory of the pg_dump that dumps the shard's definitions. It
    /// must be of the old server's major, the new one's or one between:
    /// an older pg_dump cannot read the old server, a newer one writes
    /// what the new server may not know. Default: the pg_dump in PATH if
    /// it is one of those, else /usr/lib/postgresql/<N>/bin's (Debian's
    /// layout) for the new server's major down to the old one's.
    #[arg(long, value_name = "DIR")]
    pub pg_bin: Option<std::path::PathBuf>,
    /// Do not compare the copy with the old server's before the cutover
    /// (as `insta-id verify` does; for a shard whose full reading on both
    /// servers would take too long).
    #[arg(long)]
    pub no_verify: bool,
    #[command(flatten)]
    pub waits: Waits,
}

/// How long a move waits at each step, before it gives up (a move and a
/// rebalance take the same).
#[derive(clap::Args, Clone)]
pub struct Waits {
    /// Milliseconds each try of the cutover may hold the shard's clients:
    /// from the PAUSE of its PgBouncer entry (without one, from its lock)
    /// to its COMMIT, giving up included: a try that would take longer is
    /// ended at its deadline, a reserve before the budget (a tenth of it,
    /// up to a quarter on a loaded machine), its session terminated and
    /// the entry resumed, and the sessions that held it up are named.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_PAUSE_BUDGET_MS,
          value_parser = clap::value_parser!(u64).range(10..=60000))]
    pub pause_budget: u64,
    /// How many times the cutover is tried.
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u16).range(1..=999))]
    pub cutover_attempts: u16,
    /// Seconds between tries of the cutover, the clients going on
    /// meanwhile; also how long a try waits, without pausing anything,
    /// for sessions that have held the shard longer than the budget.
    #[arg(long, value_name = "SECONDS", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub cutover_retry: u64,
    /// How long the move's other locks wait (a PostgreSQL interval): the
    /// move's own lock on the shard, the adoption's.
    #[arg(long, value_name = "INTERVAL", default_value = "5s")]
    pub lock_timeout: String,
    /// Seconds the initial copy may take.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    pub copy_timeout: u64,
    /// Seconds to wait for another run finishing the same move.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub finish_wait: u64,
}

/// Where a run stands, read again after each lock it waits for.
struct State {
    /// The schema registered for the shard on each server.
    on_from: Option<String>,
    on_to: Option<String>,
    /// The move's subscription on the new server: its OID and the schema
    /// of its tables ('' when it has none yet).
    sub: Option<(u32, String)>,
}

struct Mover<'a> {
    a: &'a Args,
    shard: i32,
    /// insta_move_<shard>: the publication, the slot, the subscription.
    name: String,
    /// insta_back_<shard>: the same, from the new server to the old one,
    /// for a rollback.
    back: String,
    /// The rollback window (None: the old copy is dropped at the cutover).
    keep: Option<String>,
    /// Both servers 16 or later: the subscription back filters by origin.
    origin_filter: bool,
    from_s: Settings,
    to_s: Settings,
    from: Client,
    to: Client,
    router: Option<Client>,
    bouncer: Option<Bouncers>,
    /// When the cutover paused the shard's PgBouncer entry.
    paused_at: Option<Instant>,
    /// The pg_dump chosen for this move (pg_dump()).
    pg_dump: Option<PathBuf>,
    /// Each server as the other's insta_id_admin.moves row names it.
    from_label: String,
    to_label: String,
    /// Each server's system identifier and database OID (what a
    /// registry's moved_from records).
    from_id: String,
    to_id: String,
    to_sysid: String,
    step_started: Option<Instant>,
    /// What the cutover compares (verify.rs): the rows made since this
    /// ID, and the buckets that differed before it; on the new server
    /// through a session of the comparison's own.
    verified_until: Option<i64>,
    verify_again: Vec<verify::Mismatch>,
    verify_from: Option<Client>,
    verify_to: Option<Client>,
    /// Whether the new server failed over since the move began, once
    /// after_new_failover has looked (and raised its mark).
    new_failover: Option<bool>,
}

pub fn run(a: &Args, env: &Env) -> ExitCode {
    match move_shard(a, env) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.exit(),
    }
}

/// A move that would re-point nothing, unless the operator says so.
pub const UNROUTED: &str = "a move re-points what sends the shard's clients to its server: give --pgbouncer (or --router); or, when they find it otherwise (their own map, a DNS name), --routing-elsewhere. Once the old server drops the shard, clients still sent there get `relation ... does not exist`";

/// Moves, finishes or undoes one shard's move, as `a` says.
pub fn move_shard(a: &Args, env: &Env) -> Result<()> {
    Mover::new(a, env)?.run()
}

fn fail<T>(msg: impl Into<String>) -> Result<T> {
    Err(Failure::Failed(msg.into()))
}

/// Polls `done` every 50 ms until it says so, for `secs` at most.
fn wait_for(secs: u64, what: &str, done: impl FnMut() -> Result<bool>) -> Result<()> {
    poll(secs, Duration::from_millis(50), what, done)
}

/// Polls `done` every `every` until it says so, for `secs` at most.
fn poll(
    secs: u64,
    every: Duration,
    what: &str,
    mut done: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(secs);
    while !done()? {
        if Instant::now() > until {
            return fail(format!("gave up waiting for {what}"));
        }
        std::thread::sleep(every);
    }
    Ok(())
}

/// INSTA_ID_MOVE_STOP_AFTER=<step> kills the tool after that step (slot,
/// copy, back, verified, blocked, sequences, cutover, adopted, map,
/// unsubscribed, moved, released-old; of a rollback back-blocked,
/// rolled-back),
/// its sessions cut as a crash would: how the tests interrupt a move.
/// <step>:INT or <step>:TERM sends the tool that signal instead, as an
/// operator would, and goes on until the signal's handling ends the run.
fn stop_after(step: &str) {
    let Ok(said) = std::env::var("INSTA_ID_MOVE_STOP_AFTER") else {
        return;
    };
    let (at, sig) = match said.split_once(':') {
        Some((at, "INT")) => (at, 2),
        Some((at, "TERM")) => (at, 15),
        _ => (said.as_str(), 9),
    };
    if at != step {
        return;
    }
    if sig == 9 {
        println!("   (killed after step '{step}': INSTA_ID_MOVE_STOP_AFTER)");
    } else {
        println!("   (signalled after step '{step}': INSTA_ID_MOVE_STOP_AFTER)");
    }
    let _ = std::io::stdout().flush();
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: kill(2) with this process's own ID and SIGKILL, SIGINT or
    // SIGTERM (both caught: pause::catch_signals).
    unsafe {
        kill(std::process::id() as i32, sig);
    }
    // The signal's handler exits the process, at once unless the cutover
    // is committing (it then waits for the entry to be resumed): until
    // then this run goes no further, as an operator's Ctrl-C would find it.
    while sig != 9 && !pause::committing_now() {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The first minor release of each major whose pg_dump and psql are fixed
/// for CVE-2025-8714/8715 (a name with a newline in a dump became psql
/// meta-commands, run as the restoring superuser); 18 was fixed before its
/// release.
const FIXED_CLIENT: [(u32, u32); 5] = [(13, 22), (14, 19), (15, 14), (16, 10), (17, 6)];

/// A session kept for a whole phase of the move: on the old server the one
/// that holds the move's lock and then the cutover's; when finishing, one on
/// the new server. No timeout of the server cuts its waits short
/// (transaction_timeout where there is one: 17+), and its transactions
/// read committed whatever the role's default: they update rows (a move's
/// record) that the move's other sessions update meanwhile.
fn hold_open(s: &Settings, lock_timeout: &str) -> Result<Client> {
    let mut c = connect(s).map_err(|e| format!("server {}: {}", s.label, e))?;
    c.execute(
        "SELECT pg_catalog.set_config('client_min_messages', 'warning', false),
                pg_catalog.set_config('statement_timeout', '0', false),
                pg_catalog.set_config('idle_in_transaction_session_timeout', '0', false),
                pg_catalog.set_config('idle_session_timeout', '0', false),
                pg_catalog.set_config('default_transaction_isolation', 'read committed', false),
                pg_catalog.set_config('tcp_keepalives_idle', '10', false),
                pg_catalog.set_config('tcp_keepalives_interval', '5', false),
                pg_catalog.set_config('tcp_keepalives_count', '3', false),
                pg_catalog.set_config('lock_timeout', $1, false),
                (SELECT pg_catalog.set_config(g.name, '0', false) FROM pg_catalog.pg_settings g
                 WHERE g.name = 'transaction_timeout')",
        &[&lock_timeout],
    )
    .described()?;
    Ok(c)
}

pub const LABEL: &str = "SELECT pg_catalog.format('%s:%s/%s',
        coalesce(pg_catalog.host(pg_catalog.inet_server_addr()),
                 pg_catalog.split_part(pg_catalog.current_setting('unix_socket_directories'), ',', 1)),
        pg_catalog.current_setting('port'), pg_catalog.current_database())";
const THIS_DB: &str =
    "(SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())";

impl<'a> Mover<'a> {
    fn new(a: &'a Args, env: &Env) -> Result<Mover<'a>> {
        let usage = |e: conninfo::Error| Failure::Usage(e.to_string());
        if a.shard > 8191 {
            return Err(Failure::Usage(format!(
                "the shard must be a number from 0 to 8191, not {}",
                a.shard
            )));
        }
        if a.rollback && a.router.is_some() {
            return Err(Failure::Usage(
                "--rollback re-points PgBouncer's entry (--pgbouncer), not the PL/Proxy router's map: give --pgbouncer, or re-point the router with repoint_shard yourself".into(),
            ));
        }
        if a.pgbouncer.is_empty()
            && a.router.is_none()
            && !a.routing_elsewhere
            && !a.undo
            && !a.release
        {
            return Err(Failure::Usage(UNROUTED.into()));
        }
        if a.router.is_some() != a.router_target.is_some() {
            return Err(Failure::Usage(
                "--router and --router-target go together: the router's database, and the new server's connection string for the application".into(),
            ));
        }
        // Every string first: a refused one (a password) stops the move
        // before it connects anywhere. The subscription's and the router
        // target's are the servers' to use, not ours: only checked.
        let from = conninfo::resolve(&a.from, env).map_err(usage)?;
        let to = conninfo::resolve(&a.to, env).map_err(usage)?;
        let router = a
            .router
            .as_deref()
            .map(|r| conninfo::resolve(r, env))
            .transpose()
            .map_err(usage)?;
        for other in [&a.subscription, &a.rollback_subscription, &a.router_target]
            .into_iter()
            .flatten()
        {
            conninfo::parse_foreign(other).map_err(usage)?;
        }
        let bouncer = match (&a.pgbouncer[..], &a.pgbouncer_map[..], &a.pgbouncer_target) {
            (admins @ [_, ..], maps @ [_, ..], Some(target)) => {
                Bouncer::check(target).map_err(Failure::Usage)?;
                if maps.len() != 1 && maps.len() != admins.len() {
                    return Err(Failure::Usage(format!(
                        "{} --pgbouncer and {} --pgbouncer-map: give one map for all, or one per PgBouncer, in the same order",
                        admins.len(),
                        maps.len()
                    )));
                }
                let entry = bouncer::entry_of(a.shard);
                let mut all = Vec::new();
                for (i, admin) in admins.iter().enumerate() {
                    all.push(Bouncer {
                        admin: conninfo::resolve(admin, env).map_err(usage)?,
                        map: maps[if maps.len() == 1 { 0 } else { i }].clone(),
                        target: target.clone(),
                        entry: entry.clone(),
                    });
                }
                Some(Bouncers { all, entry })
            }
            ([], [], None) => None,
            _ => {
                return Err(Failure::Usage(
                    "--pgbouncer, --pgbouncer-map and --pgbouncer-target go together".into(),
                ))
            }
        };
        let on = |s: &Settings, what: &str| -> Result<Client> {
            connect(s).map_err(|e| Failure::Failed(format!("{what} ({}): {}", s.label, e)))
        };
        let mut from_c = on(&from, "the old server")?;
        let mut to_c = on(&to, "the new server")?;
        let router = router.map(|r| on(&r, "the router")).transpose()?;
        // A move makes publications, slots and subscriptions and writes
        // insta_id's tables: a superuser's, on both. 0.11.0: the
        // comparisons read each table through insta_id's gate.
        for (c, which, s) in [
            (&mut from_c, "the old server", &from),
            (&mut to_c, "the new server", &to),
        ] {
            need_superuser(c, "a move makes publications, replication slots and subscriptions and writes insta_id's tables")
                .map_err(|e| format!("{which} ({}): {e}", s.label))?;
            let r = c
                .query_one(
                    "SELECT (SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'insta_id'),
                            pg_catalog.to_regprocedure('insta_id._gate_query(name, pg_catalog.regclass[], text)') IS NOT NULL",
                    &[],
                )
                .described()?;
            match (r.get::<_, Option<String>>(0), r.get::<_, bool>(1)) {
                (None, _) => return fail(format!("insta_id is not installed on {which} ({}): CREATE EXTENSION insta_id there, in that database", s.label)),
                (Some(v), false) => return fail(format!("insta_id 0.11.0 or later is needed on both servers, and {which} ({}) has {}: ALTER EXTENSION insta_id UPDATE there", s.label, printable(&v))),
                (Some(_), true) => {}
            }
        }
        // Two strings for one database would move a shard onto itself.
        let identity = "SELECT s.system_identifier::text || '/' || d.oid::text
                        FROM pg_catalog.pg_control_system() s, pg_catalog.pg_database d
                        WHERE d.datname = pg_catalog.current_database()";
        let (from_id, to_id): (String, String) = (
            from_c.query_one(identity, &[]).described()?.get(0),
            to_c.query_one(identity, &[]).described()?.get(0),
        );
        if from_id == to_id {
            return fail(format!(
                "--from and --to are one database ({} and {}): a shard moves between two",
                from.label, to.label
            ));
        }
        let label =
            |c: &mut Client| -> Result<String> { Ok(c.query_one(LABEL, &[]).described()?.get(0)) };
        let (from_label, to_label) = (label(&mut from_c)?, label(&mut to_c)?);
        // Checked now, not at the cutover (move_reserve's range), after
        // what may be hours of copy.
        let keep = match from_c.query_one(
            "SELECT $1::text::interval <> interval '0',
                    $1::text::interval = interval '0' OR $1::text::interval BETWEEN interval '1 second' AND interval '7 days'",
            &[&a.rollback_window],
        ) {
            // (A bad argument, though the server reads it: exit 2.)
            Ok(r) if !r.get::<_, bool>(1) => {
                return Err(Failure::Usage(format!(
                    "--rollback-window must be 0 or between 1 second and 7 days, not {}",
                    printable(&a.rollback_window)
                )))
            }
            Ok(r) if r.get::<_, bool>(0) => Some(a.rollback_window.clone()),
            Ok(_) => None,
            Err(e) => {
                return Err(Failure::Usage(format!(
                    "--rollback-window: {}",
                    crate::db::describe(&e)
                )))
            }
        };
        // From 16 on both, the subscription back asks for the changes that
        // no replication made (origin = none): the forward stream's rows
        // never go back, whatever the slot back's position after a crash.
        let version = "SELECT pg_catalog.current_setting('server_version_num')::int";
        let origin_filter = from_c.query_one(version, &[]).described()?.get::<_, i32>(0) >= 160000
            && to_c.query_one(version, &[]).described()?.get::<_, i32>(0) >= 160000;
        let to_sysid: String = to_c
            .query_one(
                "SELECT system_identifier::text FROM pg_catalog.pg_control_system()",
                &[],
            )
            .described()?
            .get(0);
        Ok(Mover {
            a,
            shard: a.shard as i32,
            name: format!("insta_move_{}", a.shard),
            back: format!("insta_back_{}", a.shard),
            keep,
            origin_filter,
            from_s: from,
            to_s: to,
            from: from_c,
            to: to_c,
            router,
            bouncer,
            paused_at: None,
            pg_dump: None,
            from_label,
            to_label,
            from_id,
            to_id,
            to_sysid,
            step_started: None,
            verified_until: None,
            verify_again: Vec::new(),
            verify_from: None,
            verify_to: None,
            new_failover: None,
        })
    }

    /// The connection string the new server's subscription reaches the old
    /// server with (--subscription, else --from).
    fn conninfo_for_subscription(&self) -> &str {
        self.a.subscription.as_deref().unwrap_or(&self.a.from)
    }

    /// The one the old server's subscription back reaches the new server
    /// with (--rollback-subscription, else --to).
    fn back_conninfo(&self) -> &str {
        self.a
            .rollback_subscription
            .as_deref()
            .unwrap_or(&self.a.to)
    }

    /// Prints a step, and how long the one before took.
    fn step(&mut self, what: &str) {
        if let Some(t) = self.step_started {
            println!("   ({:.2} s)", t.elapsed().as_secs_f64());
        }
        self.step_started = Some(Instant::now());
        println!("== {what}");
    }

    fn read_state(&mut self) -> Result<State> {
        let registered = |c: &mut Client, shard: i32| -> Result<Option<String>> {
            Ok(c.query_opt(
                "SELECT schema_name::text FROM insta_id_admin.shard_registry WHERE shard_id = $1::int",
                &[&shard],
            )
            .described()?
            .map(|r| r.get(0)))
        };
        let on_from = registered(&mut self.from, self.shard)?;
        let on_to = registered(&mut self.to, self.shard)?;
        let sub = self
            .to
            .query_opt(
                &format!(
                    "SELECT s.oid::bigint, coalesce((SELECT pg_catalog.min(n.nspname::text) FROM pg_catalog.pg_subscription_rel r
                                               JOIN pg_catalog.pg_class c ON c.oid = r.srrelid
                                               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                                               WHERE r.srsubid = s.oid), '')
                     FROM pg_catalog.pg_subscription s WHERE s.subname = $1::text AND s.subdbid = {THIS_DB}"
                ),
                &[&self.name],
            )
            .described()?
            .map(|r| (r.get::<_, i64>(0) as u32, r.get(1)));
        Ok(State {
            on_from,
            on_to,
            sub,
        })
    }

    /// The call that records a step of one side, on that side's server.
    fn record<S: Step>(
        c: &mut impl crate::pq::GenericClient,
        shard: i32,
        step: S,
        schema: &str,
        peer: &str,
    ) -> Result<()> {
        c.execute(
            "SELECT insta_id.move_step($1::int, $2::text, $3::text, $4::text::name, $5::text)",
            &[&shard, &S::SIDE, &step.as_str(), &schema, &peer],
        )
        .described()?;
        Ok(())
    }
    /// This server's side of the move is over: its row forgotten.
    fn done(c: &mut impl crate::pq::GenericClient, shard: i32, side: &str) -> Result<()> {
        c.execute(
            "SELECT insta_id.move_done($1::int, $2::text)",
            &[&shard, &side],
        )
        .described()?;
        Ok(())
    }

    fn record_from(&mut self, step: Leaving, schema: &str) -> Result<()> {
        Self::record(&mut self.from, self.shard, step, schema, &self.to_label)
    }
    fn record_to(&mut self, step: Arriving, schema: &str) -> Result<()> {
        Self::record(&mut self.to, self.shard, step, schema, &self.from_label)
    }

    /// The new server's record of the move: the old server as it names it,
    /// and whether the move paused PgBouncer's entry without pointing it
    /// at the new server yet.
    fn arriving(&mut self) -> Result<Option<(String, bool)>> {
        Ok(self
            .to
            .query_opt(
                concat!(
                    "SELECT peer, ",
                    steps::entry_held!("steps"),
                    " FROM insta_id_admin.moves WHERE shard_id = $1::int AND side = 'arriving'"
                ),
                &[&self.shard],
            )
            .described()?
            .map(|r| (r.get(0), r.get(1))))
    }

    /// The old server's record of the move: its step.
    fn leaving_step(&mut self) -> Result<Option<Leaving>> {
        let step: Option<String> = self
            .from
            .query_opt(
                "SELECT step FROM insta_id_admin.moves WHERE shard_id = $1::int AND side = 'leaving'",
                &[&self.shard],
            )
            .described()?
            .map(|r| r.get(0));
        step.as_deref().map(recorded).transpose()
    }

    /// One run: the move's lock, what both servers record read under it,
    /// the decision (rerun::decide), carried out.
    fn run(&mut self) -> Result<()> {
        let want = Want {
            rollback: self.a.rollback,
            release: self.a.release,
            undo: self.a.undo,
            check: self.a.check,
            bouncer: self.bouncer.is_some(),
        };
        // The move's lock first: a mover still running elsewhere is never
        // undone, a finisher beside this one never raced.
        let locus = Locus::of(
            self.read_state()?.on_from.is_some(),
            self.arriving_step()?.map(|(step, _)| step),
        );
        let hold = match locus {
            Locus::Old => {
                let mut hold = hold_open(&self.from_s, &self.a.waits.lock_timeout)?;
                hold.execute(
                    "SELECT insta_id.lock_shard_for_move($1::int)",
                    &[&self.shard],
                )
                .described()?;
                hold
            }
            Locus::New => self.lock_finish()?.0,
        };
        let st = self.read_state()?;
        let seen = self.seen(&st)?;
        let next = rerun::decide(&seen, want, locus);
        // A rollback interrupted before its cutover committed: the shard
        // is still the new server's, its clients go on there (whatever
        // this run does next, a refusal too).
        if seen.on_to && !seen.sub && seen.subscribed_back && seen.entry_paused {
            if let (Some(b), Some(schema)) = (&self.bouncer, &st.on_to) {
                b.resume_if_paused()?;
                println!(
                    "   PgBouncer's entry {} was left paused by an interrupted rollback: resumed",
                    b.entry
                );
                let schema = schema.clone();
                self.record_to(Arriving::Resumed, &schema)?;
            }
        }
        // The schema: the old server's while it holds the shard, else the
        // new one's, else its copy's (its subscription's tables).
        let schema = st
            .on_from
            .clone()
            .or_else(|| st.on_to.clone())
            .or_else(|| st.sub.as_ref().map(|(_, s)| s.clone()))
            .unwrap_or_default();
        match next {
            Next::Refuse(why) => fail(why),
            Next::Nothing(what) => {
                self.step(&what);
                Ok(())
            }
            Next::FinishRollback => match self.arriving_step()? {
                Some((_, schema)) => self.finish_rollback(hold, &schema),
                // (Read under the lock: only a finisher could have ended it.)
                None => fail(format!(
                    "the rollback of shard {} was finished while this read it: run again to see",
                    self.shard
                )),
            },
            Next::Check => {
                if let Some(b) = &self.bouncer {
                    b.preflight()?;
                }
                self.step("checks");
                self.checks(&schema)?;
                self.step(&format!(
                    "every check of a move of shard {} passed; nothing was made",
                    self.shard
                ));
                Ok(())
            }
            Next::Move { leftovers } => self.move_shard(hold, &st, &schema, leftovers),
            Next::Rollback => self.rollback(hold, &schema),
            Next::Release => self.release(hold, &schema),
            Next::Finish => {
                self.step(&format!(
                    "shard {} left the old server: finishing the move",
                    self.shard
                ));
                self.finish_move(hold, &st, &schema)
            }
        }
    }

    /// What both servers record of the move (rerun::Seen).
    fn seen(&mut self, st: &State) -> Result<Seen> {
        let arriving = self.arriving()?;
        let r = self
            .to
            .query_one(
                "SELECT coalesce(steps @> '[{\"step\": \"paused\"}]', false), coalesce(steps @> '[{\"step\": \"map\"}]', false)
                 FROM (SELECT (SELECT steps FROM insta_id_admin.moves WHERE shard_id = $1::int AND side = 'arriving') AS steps) x",
                &[&self.shard],
            )
            .described()?;
        Ok(Seen {
            shard: self.shard,
            on_from: st.on_from.is_some(),
            on_to: st.on_to.is_some(),
            sub: st.sub.is_some(),
            sub_schema: st.sub.as_ref().is_some_and(|(_, s)| !s.is_empty()),
            leaving: self.leaving_step()?,
            arriving: self.arriving_step()?.map(|(step, _)| step),
            arriving_from_elsewhere: arriving
                .as_ref()
                .filter(|(peer, _)| *peer != self.from_label)
                .map(|(peer, _)| (printable(peer), self.from_label.clone())),
            entry_paused: arriving.is_some_and(|(_, paused)| paused),
            bounced: r.get(0),
            mapped: r.get(1),
            kept: self.kept()?.map(|(_, until, expired)| (until, expired)),
            subscribed_back: self.subscribed_back()?,
            leftovers: self.leftovers(st)?,
            legacy_cutover: self.legacy_cutover()?,
            moved_from: self.moved_from()?,
        })
    }

    /// The new server's registry: where a move brought the shard from
    /// (rerun::Seen::moved_from).
    fn moved_from(&mut self) -> Result<Option<(bool, String)>> {
        let r = self
            .to
            .query_opt(
                "SELECT moved_from = $2::text, pg_catalog.format('%s, at %s', moved_from_label, moved_at)
                 FROM insta_id_admin.shard_registry WHERE shard_id = $1::int AND moved_from IS NOT NULL",
                &[&self.shard, &self.from_id],
            )
            .described()?;
        Ok(r.map(|r| (r.get(0), printable(&r.get::<_, String>(1)))))
    }

    /// The old server holds the shard (under its move lock, `hold`): an
    /// entry an interrupted run left paused resumed; a complete copy taken
    /// up, or what is left undone; then, unless --undo, the copy, the
    /// comparison and the cutover.
    fn move_shard(
        &mut self,
        hold: Client,
        st: &State,
        schema: &str,
        leftovers: bool,
    ) -> Result<()> {
        if let Some(b) = &self.bouncer {
            b.preflight()?;
        }
        // A move killed in its cutover leaves the shard's entry paused, its
        // clients queued: they go on, on the old server, which still holds
        // the shard.
        if let Some(b) = &self.bouncer {
            if b.paused()? {
                b.resume_if_paused()?;
                println!(
                    "   PgBouncer's entry {} was left paused by an interrupted move: resumed",
                    b.entry
                );
            }
        }
        // A move interrupted with its copy complete and streaming (a cutover
        // given up within its budget, say), or still being copied by the
        // subscription's workers, goes on from its copy: a large shard's
        // copy takes hours. Any other is undone, and the run says why.
        let kept = if leftovers && !self.a.undo {
            self.copy_kept(st, schema)?
        } else {
            Kept::Untrusted(String::new())
        };
        match &kept {
            Kept::Complete | Kept::Copying => {
                self.step(&format!(
                    "the copy of shard {} by an interrupted move is {} and streaming: {}",
                    self.shard,
                    if matches!(kept, Kept::Complete) {
                        "complete"
                    } else {
                        "under way"
                    },
                    if matches!(kept, Kept::Complete) {
                        "on to its cutover"
                    } else {
                        "waiting for it"
                    },
                ));
                if !self.arriving_step()?.is_some_and(|(step, _)| step.copied()) {
                    let subid = st.sub.as_ref().map_or(0, |(oid, _)| i64::from(*oid));
                    self.wait_copy(subid, schema)?;
                    self.record_to(Arriving::Copied, schema)?;
                }
                self.apply_checks(schema)?;
                if self.keep.is_some() {
                    self.make_back(schema)?;
                }
            }
            Kept::Untrusted(why) if leftovers => {
                self.step(&format!(
                    "undo an interrupted move: the old server still holds shard {}",
                    self.shard
                ));
                if !why.is_empty() {
                    println!("   its copy is not taken up: {why}");
                }
                self.drop_replication(st, Some(schema))?;
            }
            Kept::Untrusted(_) => {}
        }
        if self.a.undo {
            self.step(&format!("shard {} is on the old server only", self.shard));
            return Ok(());
        }
        if matches!(kept, Kept::Untrusted(_)) {
            self.copy(schema)?;
        }
        self.verify_copy(schema, false)?;
        stop_after("verified");
        self.cutover_and_finish(hold, schema)
    }

    /// Whether an earlier run left anything of this move on either server.
    fn leftovers(&mut self, st: &State) -> Result<bool> {
        Ok(st.sub.is_some()
            || self
                .from
                .query_one(
                    "SELECT EXISTS (SELECT FROM pg_catalog.pg_publication WHERE pubname = $1::text)
                         OR EXISTS (SELECT FROM pg_catalog.pg_replication_slots
                                    WHERE slot_name = $1::text AND database = pg_catalog.current_database())
                         OR EXISTS (SELECT FROM insta_id_admin.moves WHERE shard_id = $2::int AND side = 'leaving')",
                    &[&self.name, &self.shard],
                )
                .described()?
                .get::<_, bool>(0)
            || self.back_left()?)
    }

    /// From a complete copy: the cutover (within its budget, tried again),
    /// then the new server's part.
    fn cutover_and_finish(&mut self, mut hold: Client, schema: &str) -> Result<()> {
        let schema = schema.to_string();
        self.step("cutover");
        // (Objects made elsewhere meanwhile that depend on the shard's are
        // looked for before each try of the cutover: Mover::tries.)
        // Every lock the new server's part needs once the old server lets
        // the shard go is taken before that point of no return: the
        // finishers' lock, and the adoption itself, begun and left open
        // (its registry row, which a create_shard of the same shard there
        // would now wait for). So nothing on the new server can hold the
        // move up after the cutover committed, when the shard is registered
        // nowhere and its PgBouncer entry paused.
        let (mut fin, _) = self.lock_finish()?;
        let adopted = Self::adopt_begin(&mut fin, true, self.shard, &schema).map_err(|e| {
            format!(
                "the new server could not adopt the copy of shard {} (nothing was changed): {}",
                self.shard,
                e.message()
            )
        })?;
        if let Err(e) = self.cutover(&mut hold, &schema) {
            let _ = fin.batch_execute("ROLLBACK");
            return Err(e);
        }
        drop(hold);
        stop_after("cutover");
        // At once: until then the shard takes writes nowhere.
        self.step(&format!("adopt {} on the new server", printable(&schema)));
        let advance = (!self.origin_filter).then_some(self.back.as_str());
        Self::adopt_end(
            &mut fin,
            &self.a.waits.lock_timeout,
            adopted,
            self.shard,
            &schema,
            (&self.from_label, &self.from_id),
            advance,
        )
        .map_err(|e| {
            format!(
                "{}\nThe cutover committed: shard {} left the old server; run the move again, which adopts it on the new server and finishes",
                e.message(),
                self.shard
            )
        })?;
        let st = self.read_state()?;
        self.finish_move(fin, &st, &schema)
    }

    /// The new server's record of the move: its step and schema.
    fn arriving_step(&mut self) -> Result<Option<(Arriving, String)>> {
        self.to
            .query_opt(
                "SELECT step, schema_name::text FROM insta_id_admin.moves WHERE shard_id = $1::int AND side = 'arriving'",
                &[&self.shard],
            )
            .described()?
            .map(|r| Ok((recorded(r.get::<_, &str>(0))?, r.get(1))))
            .transpose()
    }

    /// The old server's record of a copy it keeps for a rollback: its step
    /// ('reserved'; 'returning' once a rollback carried the new server's
    /// state onto it), until when, and whether that time has passed.
    fn kept(&mut self) -> Result<Option<(String, String, bool)>> {
        Ok(self
            .from
            .query_opt(
                "SELECT step, pg_catalog.to_char(reserve_until AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC',
                        reserve_until < pg_catalog.clock_timestamp()
                 FROM insta_id_admin.moves
                 WHERE shard_id = $1::int AND side = 'leaving' AND step IN ('reserved', 'returning')",
                &[&self.shard],
            )
            .described()?
            .map(|r| (r.get(0), r.get(1), r.get(2))))
    }

    /// Whether the new server has the publication or the slot back.
    fn back_left(&mut self) -> Result<bool> {
        Ok(self
            .to
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_publication WHERE pubname = $1::text)
                     OR EXISTS (SELECT FROM pg_catalog.pg_replication_slots
                                WHERE slot_name = $1::text AND database = pg_catalog.current_database())",
                &[&self.back],
            )
            .described()?
            .get(0))
    }
}

/// The shard's tables (every partition) that `subscription`, on the
/// subscriber `c`, does not both have and stream: a table made on both
/// servers during a move exists on each, but its rows never came. `state`
/// is move_state's; `states`, the pg_subscription_rel states that count
/// ("r": ready, streaming). (A partitioned table's rows are its partitions'.)
fn unsubscribed(
    c: &mut Client,
    state: &str,
    subscription: &str,
    schema: &str,
    states: &str,
) -> Result<Option<String>> {
    Ok(c.query_one(
        &format!(
            "SELECT pg_catalog.string_agg(pg_catalog.quote_ident(t), ', ' ORDER BY t)
             FROM pg_catalog.jsonb_array_elements_text($1::text::jsonb -> 'tables') t
             WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_subscription_rel r
                               JOIN pg_catalog.pg_subscription s ON s.oid = r.srsubid
                               JOIN pg_catalog.pg_class c ON c.oid = r.srrelid
                               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                               WHERE s.subname = $2::text AND s.subdbid = {THIS_DB}
                                 AND n.nspname = $3::text AND c.relname = t
                                 AND pg_catalog.strpos($4::text, r.srsubstate::text) > 0)
               AND NOT EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                               WHERE n.nspname = $3::text AND c.relname = t AND c.relkind = 'p')"
        ),
        &[&state, &subscription, &schema, &states],
    )
    .described()?
    .get(0))
}

/// Whether this database has the subscription named $1.
fn subscribed_sql() -> String {
    format!("SELECT EXISTS (SELECT FROM pg_catalog.pg_subscription WHERE subname = $1::text AND subdbid = {THIS_DB})")
}

/// A step as a server recorded it: one of steps.rs's, which its test
/// compares with the extension's; another is a newer extension's.
fn recorded<S: Step>(text: &str) -> Result<S> {
    S::parse(text).ok_or_else(|| {
        Failure::Failed(format!(
            "the server records a step of the move ({} side) this insta-id does not know, {}: run the insta-id of the servers' insta_id",
            S::SIDE,
            printable(text)
        ))
    })
}

/// The non-superusers owning code a subscription's apply would run for a
/// schema: its relations, functions, types and operators, the functions its
/// tables' constraints, indexes, triggers and defaults call, its columns'
/// types (a domain elsewhere) and what their constraints call, and its
/// indexes' operator classes. (The schema's own relations owned by a
/// non-superuser are refused too, so its owner cannot change the copy on
/// the new server during the move either.)
const APPLY_CODE_OWNERS: &str = "
WITH nsp AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1::text),
     rels AS (SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relnamespace = (SELECT oid FROM nsp)),
     owner AS (SELECT c.relowner AS o FROM pg_catalog.pg_class c WHERE c.relnamespace = (SELECT oid FROM nsp)
               UNION SELECT p.proowner FROM pg_catalog.pg_proc p WHERE p.pronamespace = (SELECT oid FROM nsp)
               UNION SELECT t.typowner FROM pg_catalog.pg_type t WHERE t.typnamespace = (SELECT oid FROM nsp)
               UNION SELECT o.oprowner FROM pg_catalog.pg_operator o WHERE o.oprnamespace = (SELECT oid FROM nsp)
               UNION SELECT p.proowner FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_proc p ON p.oid = d.refobjid
               WHERE d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                 AND (d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid IN (SELECT oid FROM rels)
                      OR d.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass
                         AND d.objid IN (SELECT oid FROM pg_catalog.pg_constraint WHERE conrelid IN (SELECT oid FROM rels))
                      OR d.classid = 'pg_catalog.pg_trigger'::pg_catalog.regclass
                         AND d.objid IN (SELECT oid FROM pg_catalog.pg_trigger WHERE tgrelid IN (SELECT oid FROM rels))
                      OR d.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass
                         AND d.objid IN (SELECT oid FROM pg_catalog.pg_attrdef WHERE adrelid IN (SELECT oid FROM rels)))
               -- the types of its columns, wherever they live (a domain's
               -- checks run in the apply), and what their constraints call
               UNION SELECT t.typowner FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
               WHERE a.attrelid IN (SELECT oid FROM rels) AND a.attnum > 0
               UNION SELECT p.proowner FROM pg_catalog.pg_attribute a
               JOIN pg_catalog.pg_constraint k ON k.contypid = a.atttypid
               JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass AND d.objid = k.oid
                                          AND d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
               JOIN pg_catalog.pg_proc p ON p.oid = d.refobjid
               WHERE a.attrelid IN (SELECT oid FROM rels) AND a.attnum > 0
               -- the operator classes of its indexes
               UNION SELECT o.opcowner FROM pg_catalog.pg_index x JOIN pg_catalog.pg_opclass o ON o.oid = ANY (x.indclass::pg_catalog.oid[])
               WHERE x.indrelid IN (SELECT oid FROM rels))
SELECT pg_catalog.string_agg(DISTINCT pg_catalog.quote_ident(r.rolname), ', ')
FROM owner JOIN pg_catalog.pg_roles r ON r.oid = owner.o WHERE NOT r.rolsuper";
