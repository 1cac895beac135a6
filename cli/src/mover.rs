//! `insta-id move`: one logical shard from one server to another while it
//! takes writes, with PostgreSQL's logical replication (both servers need
//! insta_id 0.9.0 or later). Each server's half is the extension's
//! (src/sql/moves.sql: the lock, the state, the fence, the cutover's locks,
//! what replication does not carry); this only sequences it over its
//! sessions, and runs pg_dump for the schema, whose definitions it applies
//! as the shard's owner (src/restore.rs).
//!
//! Each server records its side in insta_id_admin.moves in the transaction that
//! makes the step, so a re-run after an interruption at any point reads how
//! far the move got: the old server's row reaches 'cutover' in the
//! transaction that drops the shard there, the point of no return. Before
//! it, a re-run undoes the partial copy and moves afresh; after it, it only
//! finishes.
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
//!     high-water mark and the migration history, then drop_shard and
//!     COMMIT;
//!  6. the new server adopts the shard (the fence opens); the router's map;
//!  7. the subscription, slots, publication and fence dropped.

mod checks;
mod cutover;
mod rollback;

use crate::bouncer::{self, Bouncer, Bouncers, Drain};
use crate::conninfo::{self, Env, Settings};
use crate::db::{connect, ident, literal, printable, terminal, Described, SESSION_OPTIONS};
use crate::pause::{self, Budget, Watchdog};
use crate::plan::pretty;
use postgres::error::SqlState;
use postgres::Client;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

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
    /// The directory of the pg_dump that dumps the shard's definitions. It
    /// must be of the old server's major, the new one's or one between:
    /// an older pg_dump cannot read the old server, a newer one writes
    /// what the new server may not know. Default: the pg_dump in PATH if
    /// it is one of those, else /usr/lib/postgresql/<N>/bin's (Debian's
    /// layout) for the new server's major down to the old one's.
    #[arg(long, value_name = "DIR")]
    pub pg_bin: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub waits: Waits,
}

/// How long a move waits at each step, before it gives up (a move and a
/// rebalance take the same).
#[derive(clap::Args, Clone)]
pub struct Waits {
    /// Milliseconds each try of the cutover may hold the shard's clients:
    /// from the PAUSE of its PgBouncer entry (without one, from its lock)
    /// to its COMMIT. A try that would take longer gives up, rolls back,
    /// resumes the entry and names the sessions that held it up.
    #[arg(long, value_name = "MS", default_value_t = 500,
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
    to_sysid: String,
    step_started: Option<Instant>,
}

pub fn run(a: &Args, env: &Env) -> ExitCode {
    match move_shard(a, env) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.exit(),
    }
}

/// A shard's number as the operator gives it; a schema's name (insta5) is
/// told apart from it.
fn shard_number(said: &str) -> std::result::Result<u32, String> {
    said.parse().map_err(|_| {
        // A name, then digits: insta5.
        let digits = said.trim_start_matches(|c: char| !c.is_ascii_digit());
        let name = &said[..said.len() - digits.len()];
        if !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && name.chars().all(|c| c.is_alphabetic() || c == '_')
            && !name.is_empty()
        {
            format!(
                "a shard is a number from 0 to 8191, not a schema's name: {digits}, not {said}?"
            )
        } else {
            "a shard is a number from 0 to 8191".to_string()
        }
    })
}

/// Moves, finishes or undoes one shard's move, as `a` says.
pub fn move_shard(a: &Args, env: &Env) -> Result<()> {
    Mover::new(a, env)?.run()
}

pub enum Failure {
    /// Refused before connecting anywhere (exit 2).
    Usage(String),
    Failed(String),
    /// A try of the cutover that would have held the clients past its
    /// budget, undone; after the last try, the move's exit is 75
    /// (EX_TEMPFAIL: nothing changed, try again later).
    GaveUp(String),
}

impl Failure {
    /// Says it, and exits 2 for a refusal before any connection, 75 for a
    /// cutover given up, else 1.
    pub fn exit(self) -> ExitCode {
        match self {
            Failure::Usage(e) => {
                eprintln!("insta-id: {e}");
                ExitCode::from(2)
            }
            Failure::Failed(e) => {
                eprintln!("insta-id: {e}");
                ExitCode::FAILURE
            }
            Failure::GaveUp(e) => {
                eprintln!("insta-id: {e}");
                ExitCode::from(75)
            }
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Failure::Usage(e) | Failure::Failed(e) | Failure::GaveUp(e) => e,
        }
    }
}

impl From<String> for Failure {
    fn from(e: String) -> Failure {
        Failure::Failed(e)
    }
}

pub type Result<T> = std::result::Result<T, Failure>;

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
/// copy, back, blocked, sequences, cutover, adopted, map, unsubscribed; of
/// a rollback back-blocked, rolled-back; of a release released-old), its
/// sessions cut as a crash would: how the tests interrupt a move.
fn stop_after(step: &str) {
    if std::env::var("INSTA_ID_MOVE_STOP_AFTER").as_deref() == Ok(step) {
        println!("   (killed after step '{step}': INSTA_ID_MOVE_STOP_AFTER)");
        let _ = std::io::stdout().flush();
        extern "C" {
            fn kill(pid: i32, sig: i32) -> i32;
        }
        // SAFETY: kill(2) with this process's own ID and SIGKILL.
        unsafe {
            kill(std::process::id() as i32, 9);
        }
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
        for c in [&mut from_c, &mut to_c] {
            let recorded: bool = c
                .query_one(
                    "SELECT pg_catalog.to_regclass('insta_id_admin.moves') IS NOT NULL",
                    &[],
                )
                .described()?
                .get(0);
            if !recorded {
                return fail("insta_id 0.9.0 or later is needed on both servers (ALTER EXTENSION insta_id UPDATE)");
            }
        }
        // Two strings for one database would move a shard onto itself.
        let identity = "SELECT s.system_identifier::text || '/' || d.oid::text
                        FROM pg_catalog.pg_control_system() s, pg_catalog.pg_database d
                        WHERE d.datname = pg_catalog.current_database()";
        let (i1, i2): (String, String) = (
            from_c.query_one(identity, &[]).described()?.get(0),
            to_c.query_one(identity, &[]).described()?.get(0),
        );
        if i1 == i2 {
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
            to_sysid,
            step_started: None,
        })
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
    fn record(
        c: &mut impl postgres::GenericClient,
        shard: i32,
        side: &str,
        step: &str,
        schema: &str,
        peer: &str,
    ) -> Result<()> {
        c.execute(
            "SELECT insta_id.move_step($1::int, $2::text, $3::text, $4::text::name, $5::text)",
            &[&shard, &side, &step, &schema, &peer],
        )
        .described()?;
        Ok(())
    }
    /// This server's side of the move is over: its row forgotten.
    fn done(c: &mut impl postgres::GenericClient, shard: i32, side: &str) -> Result<()> {
        c.execute(
            "SELECT insta_id.move_done($1::int, $2::text)",
            &[&shard, &side],
        )
        .described()?;
        Ok(())
    }

    fn record_from(&mut self, step: &str, schema: &str) -> Result<()> {
        Self::record(
            &mut self.from,
            self.shard,
            "leaving",
            step,
            schema,
            &self.to_label,
        )
    }
    fn record_to(&mut self, step: &str, schema: &str) -> Result<()> {
        Self::record(
            &mut self.to,
            self.shard,
            "arriving",
            step,
            schema,
            &self.from_label,
        )
    }

    /// The new server's record of the move: the old server as it names it,
    /// and whether the move paused PgBouncer's entry without pointing it
    /// at the new server yet.
    fn arriving(&mut self) -> Result<Option<(String, bool)>> {
        Ok(self
            .to
            .query_opt(
                "SELECT peer, coalesce((SELECT e ->> 'step' FROM pg_catalog.jsonb_array_elements(steps) WITH ORDINALITY x(e, o)
                                        WHERE e ->> 'step' IN ('paused', 'resumed', 'map') ORDER BY o DESC LIMIT 1) = 'paused', false)
                 FROM insta_id_admin.moves WHERE shard_id = $1::int AND side = 'arriving'",
                &[&self.shard],
            )
            .described()?
            .map(|r| (r.get(0), r.get(1))))
    }

    /// A move that paused the shard's PgBouncer entry is finished or undone
    /// only by a run that can resume it.
    fn refuse_paused_without_bouncer(&mut self) -> Result<()> {
        if self.bouncer.is_none() && self.arriving()?.is_some_and(|(_, paused)| paused) {
            return fail(format!(
                "this move of shard {} paused its PgBouncer entry (shard{}) at the cutover and did not resume it: run it again with --pgbouncer, --pgbouncer-map and --pgbouncer-target, which resume it",
                self.shard, self.shard
            ));
        }
        Ok(())
    }

    fn leaving_step(&mut self) -> Result<Option<String>> {
        Ok(self
            .from
            .query_opt(
                "SELECT step FROM insta_id_admin.moves WHERE shard_id = $1::int AND side = 'leaving'",
                &[&self.shard],
            )
            .described()?
            .map(|r| r.get(0)))
    }

    fn run(&mut self) -> Result<()> {
        // A rollback whose cutover committed (the shard dropped on the new
        // server) is only finished.
        if let Some((step, schema)) = self.arriving_step()? {
            if step == "returned" {
                // Only a run that knows it is a rollback: its PgBouncer
                // target is the old server's, not the move's.
                if !self.a.rollback {
                    return fail(format!("a rollback of shard {} committed (the shard was dropped on the new server): finish it with --rollback, and with --pgbouncer-target naming the old server", self.shard));
                }
                self.refuse_paused_without_bouncer()?;
                let (hold, _) = self.lock_finish()?;
                return self.finish_rollback(hold, &schema);
            }
        }
        let st = self.read_state()?;
        if st.on_from.is_some() && st.on_to.is_some() {
            return fail(format!(
                "shard {} is registered on both servers: not a state a move leaves; compare them and drop one by hand",
                self.shard
            ));
        }
        if st.on_from.is_some() && (self.a.rollback || self.a.release) {
            return fail(format!(
                "shard {} is on the old server: no move of it to roll back or release",
                self.shard
            ));
        }
        let Some(schema) = st.on_from.clone() else {
            if self.a.check {
                return fail(format!(
                    "shard {} is not registered on the old server: nothing to check",
                    self.shard
                ));
            }
            return self.not_on_from(st);
        };
        // The move's lock first: a mover still running elsewhere is never
        // undone.
        let mut hold = hold_open(&self.from_s, &self.a.waits.lock_timeout)?;
        hold.execute(
            "SELECT insta_id.lock_shard_for_move($1::int)",
            &[&self.shard],
        )
        .described()?;
        // A move whose cutover committed is never undone, even with the
        // shard registered on the old server again: the new server's copy
        // is the shard.
        let arriving: Option<String> = self
            .to
            .query_opt(
                "SELECT step FROM insta_id_admin.moves WHERE shard_id = $1::int AND side = 'arriving'",
                &[&self.shard],
            )
            .described()?
            .map(|r| r.get(0));
        if cut_over(self.leaving_step()?.as_deref())
            || matches!(
                arriving.as_deref(),
                Some("adopted" | "map" | "cleanup" | "reserved")
            )
        {
            return fail(format!("shard {} is registered on the old server, but its move to the new one committed its cutover there: the new server's copy is the shard; compare them by hand", self.shard));
        }
        self.refuse_paused_without_bouncer()?;
        if let Some(b) = &self.bouncer {
            b.preflight()?;
        }
        let leftovers = self.leftovers(&st)?;
        if self.a.check {
            if leftovers {
                return fail(format!("an interrupted move of shard {} is recorded: run the move (it takes a complete copy up, or undoes a partial one) or --undo; insta-id status says where it stands", self.shard));
            }
            self.step("checks");
            self.checks(&schema)?;
            self.step(&format!(
                "every check of a move of shard {} passed; nothing was made",
                self.shard
            ));
            return Ok(());
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
        // given up within its budget, say) goes on from its copy: a large
        // shard's copy takes hours.
        let kept = leftovers && !self.a.undo && self.copy_kept(&st, &schema)?;
        if kept {
            self.step(&format!(
                "the copy of shard {} by an interrupted move is complete and streaming: on to its cutover",
                self.shard
            ));
            self.apply_checks(&schema)?;
            if self.keep.is_some() {
                self.make_back(&schema)?;
            }
        } else if leftovers {
            self.step(&format!(
                "undo an interrupted move: the old server still holds shard {}",
                self.shard
            ));
            self.drop_replication(&st, Some(&schema))?;
        }
        if self.a.undo {
            self.step(&format!("shard {} is on the old server only", self.shard));
            return Ok(());
        }
        if !kept {
            self.copy(&schema)?;
        }
        self.cutover_and_finish(hold, &schema)
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

    /// The checks, then the copy: publication, schema and subscription,
    /// slot, the initial copy, and for a rollback window the publication
    /// and slot back.
    fn copy(&mut self, schema: &str) -> Result<()> {
        let schema = schema.to_string();
        self.step("checks");
        self.checks(&schema)?;

        self.step("publication on the old server");
        {
            let mut tx = self.from.transaction().described()?;
            tx.batch_execute(&format!(
                "CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}",
                ident(&self.name),
                ident(&schema)
            ))
            .described()?;
            Self::record(
                &mut tx,
                self.shard,
                "leaving",
                "published",
                &schema,
                &self.to_label,
            )?;
            tx.commit().described()?;
        }

        self.step("schema and subscription on the new server (one transaction)");
        self.copy_schema(&schema)?;
        let subid: i64 = self
            .to
            .query_one(
                &format!("SELECT oid::bigint FROM pg_catalog.pg_subscription WHERE subname = $1::text AND subdbid = {THIS_DB}"),
                &[&self.name],
            )
            .described()?
            .get(0);

        self.step("slot on the old server; copy");
        self.from
            .execute(
                "SELECT pg_catalog.pg_create_logical_replication_slot($1::text, 'pgoutput')",
                &[&self.name],
            )
            .described()?;
        self.record_from("slot", &schema)?;
        {
            let mut tx = self.to.transaction().described()?;
            tx.batch_execute(&format!("ALTER SUBSCRIPTION {} ENABLE", ident(&self.name)))
                .described()?;
            Self::record(
                &mut tx,
                self.shard,
                "arriving",
                "copying",
                &schema,
                &self.from_label,
            )?;
            tx.commit().described()?;
        }
        stop_after("slot");

        self.step("waiting for the copy");
        self.wait_copy(subid)?;
        self.record_to("copied", &schema)?;
        stop_after("copy");
        if self.keep.is_some() {
            self.step("publication and slot back on the new server, for a rollback");
            self.make_back(&schema)?;
            stop_after("back");
        }
        Ok(())
    }

    /// Whether an interrupted move's copy can be taken up where it
    /// stopped: the old server's side at its slot (no cutover begun), the
    /// new server's copied, every table of the shard subscribed and ready,
    /// and no replication back left unless this run keeps a window (it
    /// makes the back afresh).
    fn copy_kept(&mut self, st: &State, schema: &str) -> Result<bool> {
        if st.sub.as_ref().map(|(_, s)| s.as_str()) != Some(schema)
            || self.leaving_step()?.as_deref() != Some("slot")
            || !self.arriving_step()?.is_some_and(|(step, s)| {
                s == schema
                    && matches!(step.as_str(), "copied" | "paused" | "resumed" | "sequences")
            })
            || (self.keep.is_none() && self.back_left()?)
        {
            return Ok(false);
        }
        let (tables, published): (String, bool) = {
            let r = self
                .from
                .query_one(
                    "SELECT pg_catalog.jsonb_build_object('tables', coalesce(pg_catalog.jsonb_agg(c.relname), '[]'))::text,
                            EXISTS (SELECT FROM pg_catalog.pg_publication WHERE pubname = $2::text)
                              AND EXISTS (SELECT FROM pg_catalog.pg_replication_slots
                                          WHERE slot_name = $2::text AND database = pg_catalog.current_database())
                     FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = $1::text AND c.relkind IN ('r', 'p')",
                    &[&schema, &self.name],
                )
                .described()?;
            (r.get(0), r.get(1))
        };
        let enabled: bool = self
            .to
            .query_one(
                &format!("SELECT coalesce((SELECT subenabled FROM pg_catalog.pg_subscription WHERE subname = $1::text AND subdbid = {THIS_DB}), false)"),
                &[&self.name],
            )
            .described()?
            .get(0);
        if !(published
            && enabled
            && unsubscribed(&mut self.to, &tables, &self.name, schema)?.is_none())
        {
            return Ok(false);
        }
        // Definitions changed on the old server since the copy was made (a
        // migration ran between two runs, when no mover held the shard):
        // replication carries rows, not DDL, so the copy is made again.
        let (old, new) = (
            fingerprint(&mut self.from, schema)?,
            fingerprint(&mut self.to, schema)?,
        );
        if old != new {
            println!("   the shard's definitions changed on the old server since its copy was made: the copy is made again");
            return Ok(false);
        }
        Ok(true)
    }

    /// From a complete copy: the cutover (within its budget, tried again),
    /// then the new server's part.
    fn cutover_and_finish(&mut self, mut hold: Client, schema: &str) -> Result<()> {
        let schema = schema.to_string();
        self.step("cutover");
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
            adopted,
            self.shard,
            &schema,
            &self.from_label,
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

    /// The shard is not registered on the old server: a move past its
    /// cutover to finish, or nothing to do.
    fn not_on_from(&mut self, st: State) -> Result<()> {
        if self.a.undo {
            return fail(format!("shard {} is not on the old server: nothing to undo (a move past its cutover is only finished)", self.shard));
        }
        if st.on_to.is_none() && st.sub.is_none() {
            return fail(format!(
                "shard {} is not registered on the old server",
                self.shard
            ));
        }
        let (hold, st) = self.lock_finish()?;
        if st.on_from.is_some() {
            return fail(format!(
                "shard {} came back to the old server while this waited: run again",
                self.shard
            ));
        }
        let arriving = self.arriving()?;
        if st.on_to.is_some() && arriving.is_none() && st.sub.is_none() {
            // (A second run finishing the same move finds it finished.)
            self.step(&format!(
                "shard {} is on the new server, and no move of it is recorded there: nothing to do",
                self.shard
            ));
            return Ok(());
        }
        if let Some((peer, _)) = arriving {
            // A label names a route (a socket, an address), which a re-run
            // may take otherwise: the old server's own record decides.
            if peer != self.from_label && !cut_over(self.leaving_step()?.as_deref()) {
                return fail(format!(
                    "shard {} is being moved to the new server from {}, not from {}: give that server as --from",
                    self.shard,
                    printable(&peer),
                    self.from_label
                ));
            }
        }
        self.refuse_paused_without_bouncer()?;
        // A finished move whose old copy is kept: the forward subscription
        // gone, the one back made (a rollback given up since may have left
        // the new server's row at 'paused' or 'resumed').
        if let (Some(schema), None, Some((_, _, expired))) = (&st.on_to, &st.sub, self.kept()?) {
            let schema = schema.clone();
            if self.subscribed_back()? {
                return self.kept_copy(hold, &schema);
            }
            // Its subscription back gone (a run killed before making it,
            // or dropped by hand): a release needs none; a plain run
            // within the window makes it again (below).
            if self.a.release || expired {
                return self.release(hold, &schema);
            }
            if self.a.rollback {
                return fail(format!("the old server's copy of shard {} does not follow the new server (no subscription {} there): run the move once without --rollback, which subscribes it again, then roll back", self.shard, self.back));
            }
        }
        // (--release goes on: a release interrupted after the old server's
        // part is finished by the cleanup below.)
        if self.a.rollback {
            return fail(format!(
                "no finished move of shard {} keeps a copy on the old server: nothing to roll back (a move is rolled back once it has finished, within its window)",
                self.shard
            ));
        }
        // Adopted on the new server (only ever after the cutover), or the
        // old server's record of the cutover, committed with the drop:
        // anything else is not a move this can finish.
        if st.on_to.is_none()
            && !cut_over(self.leaving_step()?.as_deref())
            && !self.legacy_cutover()?
        {
            return fail(format!("shard {} is on neither server's registry and its cutover did not commit: compare the servers by hand", self.shard));
        }
        let schema = match (&st.on_to, &st.sub) {
            (Some(s), _) => s.clone(),
            (None, Some((_, s))) if !s.is_empty() => s.clone(),
            _ => return fail(format!("shard {} left the old server, but its copy on the new one has no tables: compare the servers by hand", self.shard)),
        };
        self.step(&format!(
            "shard {} left the old server: finishing the move",
            self.shard
        ));
        self.finish_move(hold, &st, &schema)
    }

    /// On the new server, in one transaction: the schema, made by the
    /// operator and owned by the one owner of its objects; pg_dump's
    /// definitions of them run as that owner in a security-restricted
    /// operation (src/restore.rs says why); the schema's own owner; its
    /// fence, and the move's subscription, disabled and without a slot.
    fn copy_schema(&mut self, schema: &str) -> Result<()> {
        let options = match std::env::var("PGOPTIONS") {
            Ok(o) if !o.is_empty() => format!("{o} {SESSION_OPTIONS}"),
            _ => SESSION_OPTIONS.to_string(),
        };
        let pg_dump = self.pg_dump()?;
        // The schema's name quoted: a name, not a pattern. The DDL stays in
        // memory, never in a file a killed move would leave.
        let dump = Command::new(&pg_dump)
            .args(["-s", "-n", &ident(schema), "-d", &self.a.from])
            .env("PGOPTIONS", &options)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{} could not be run: {e}", pg_dump.display()))?;
        if !dump.status.success() {
            return fail(format!(
                "pg_dump of {}: {}",
                printable(schema),
                terminal(String::from_utf8_lossy(&dump.stderr).trim_end())
            ));
        }
        let (quoted, code_owner, schema_owner) = self.owners(schema)?;
        // pg_dump's output sets search_path to '': what follows names
        // everything in full.
        let owners_part =
            crate::restore::owners_part(&String::from_utf8_lossy(&dump.stdout), &quoted)
                .map_err(|e| format!("the schema on the new server (nothing of it made): {e}"))?;
        let subscription = self.a.subscription.as_deref().unwrap_or(&self.a.from);
        let mut tx = self.to.transaction().described()?;
        let made = (|| -> std::result::Result<(), postgres::Error> {
            tx.batch_execute(&format!(
                "CREATE SCHEMA {} AUTHORIZATION {}",
                ident(schema),
                ident(&code_owner)
            ))?;
            tx.execute(
                "SELECT insta_id._run_in_schema($1::text::pg_catalog.name,
                     (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = $2::text)::pg_catalog.regrole,
                     ARRAY[$3::text])",
                &[&schema, &code_owner, &owners_part],
            )?;
            tx.batch_execute(&format!(
                "ALTER SCHEMA {schema} OWNER TO {owner};
                 SELECT insta_id.move_fence({literal_schema}, {shard});
                 CREATE SUBSCRIPTION {name} CONNECTION {conn} PUBLICATION {name}
                   WITH (enabled = false, create_slot = false, slot_name = {slot});
                 SELECT insta_id.move_step({shard}, 'arriving', 'subscribed', {literal_schema}, {peer});",
                schema = ident(schema),
                owner = ident(&schema_owner),
                literal_schema = literal(schema),
                shard = self.shard,
                name = ident(&self.name),
                slot = literal(&self.name),
                conn = literal(subscription),
                peer = literal(&self.from_label),
            ))
        })();
        match made {
            Ok(()) => tx.commit().described(),
            Err(e) => Err(e).described(),
        }
        .map_err(|e| format!("the schema on the new server (nothing of it made): {e}"))?;
        Ok(())
    }

    /// The schema's name as pg_dump quotes it, the one owner of its objects
    /// (insta_id._code_owner: a schema of several owners is refused, 42501)
    /// and the schema's owner, read on the old server; both roles must exist
    /// on the new one.
    fn owners(&mut self, schema: &str) -> Result<(String, String, String)> {
        let row = self
            .from
            .query_one(
                "SELECT pg_catalog.quote_ident($1::text),
                        (SELECT r.rolname::text FROM pg_catalog.pg_roles r WHERE r.oid = insta_id._code_owner($1::text)),
                        (SELECT r.rolname::text FROM pg_catalog.pg_roles r JOIN pg_catalog.pg_namespace n ON n.nspowner = r.oid
                         WHERE n.nspname = $1::text)",
                &[&schema],
            )
            .described()
            .map_err(|e| format!("the owner of {}'s objects: {e}", printable(schema)))?;
        let (quoted, code_owner, schema_owner): (String, String, String) =
            (row.get(0), row.get(1), row.get(2));
        let missing: Option<String> = self
            .to
            .query_one(
                "SELECT pg_catalog.string_agg(DISTINCT pg_catalog.quote_ident(x), ', ')
                 FROM pg_catalog.unnest(ARRAY[$1::text, $2::text]) x
                 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.rolname = x)",
                &[&code_owner, &schema_owner],
            )
            .described()?
            .get(0);
        if let Some(missing) = missing {
            return fail(format!(
                "roles owning {} are missing on the new server: {}; create them there first (pg_dumpall --roles-only)",
                printable(schema),
                printable(&missing)
            ));
        }
        Ok((quoted, code_owner, schema_owner))
    }

    /// Until every table is copied and streaming, printing how far the copy
    /// is every 5 s.
    fn wait_copy(&mut self, subid: i64) -> Result<()> {
        let until = Instant::now() + Duration::from_secs(self.a.waits.copy_timeout);
        let mut said = Instant::now();
        loop {
            let r = self
                .to
                .query_one(
                    "SELECT pg_catalog.count(*) FILTER (WHERE r.srsubstate = 'r'), pg_catalog.count(*),
                            coalesce((SELECT sum(p.bytes_processed) FROM pg_catalog.pg_stat_progress_copy p
                                      WHERE p.relid IN (SELECT srrelid FROM pg_catalog.pg_subscription_rel
                                                        WHERE srsubid = $1::bigint::oid)), 0)::bigint
                     FROM pg_catalog.pg_subscription_rel r WHERE r.srsubid = $1::bigint::oid",
                    &[&subid],
                )
                .described()?;
            let (ready, tables, bytes): (i64, i64, i64) = (r.get(0), r.get(1), r.get(2));
            if ready == tables {
                return Ok(());
            }
            if Instant::now() > until {
                return fail("gave up waiting for the initial copy");
            }
            if said.elapsed() >= Duration::from_secs(5) {
                said = Instant::now();
                let behind: Option<i64> = self
                    .from
                    .query_opt(
                        "SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), confirmed_flush_lsn)::bigint
                         FROM pg_catalog.pg_replication_slots WHERE slot_name = $1::text",
                        &[&self.name],
                    )
                    .described()?
                    .and_then(|r| r.get(0));
                println!(
                    "   {ready} of {tables} tables copied; {} of the others so far; the stream {} behind",
                    pretty(bytes as u64),
                    behind.map_or("-".into(), |b| pretty(b.max(0) as u64))
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Finishers of one move (two re-runs, or a re-run beside the mover)
    /// queue on insta_id's lock on the new server, the key of
    /// lock_shard_for_move (so migrate skips the shard meanwhile), held by a
    /// session kept to the end; each reads the state again once it has it.
    fn lock_finish(&mut self) -> Result<(Client, State)> {
        let until = Instant::now() + Duration::from_secs(self.a.waits.finish_wait);
        let mut hold = hold_open(&self.to_s, "0")?;
        let mut said = false;
        loop {
            let got: bool = hold
                .query_one(
                    "SELECT insta_id._lock(insta_id._move_lock_key(), $1::int, false, true, false)",
                    &[&self.shard],
                )
                .described()?
                .get(0);
            if got {
                break;
            }
            if !said {
                let pid: Option<i32> = self
                    .to
                    .query_one(
                        "SELECT insta_id._lock_holder(insta_id._move_lock_key(), $1::int)",
                        &[&self.shard],
                    )
                    .described()?
                    .get(0);
                println!(
                    "   waiting for process {} on the new server (finishing this move, or moving the shard on)",
                    pid.map_or("-".into(), |p| p.to_string())
                );
                said = true;
            }
            if Instant::now() > until {
                return fail(format!(
                    "gave up waiting for the lock of shard {} on the new server",
                    self.shard
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let st = self.read_state()?;
        Ok((hold, st))
    }

    /// After the cutover committed, under lock_finish: the shard is the new
    /// server's; finish what is left.
    fn finish_move(&mut self, mut hold: Client, st: &State, schema: &str) -> Result<()> {
        if st.on_to.is_none() {
            self.step(&format!("adopt {} on the new server", printable(schema)));
            let advance = (!self.origin_filter).then_some(self.back.as_str());
            Self::adopt(&mut hold, self.shard, schema, &self.from_label, advance)?;
        }
        stop_after("adopted");
        if let Some(entry) = self.bouncer.as_ref().map(|b| b.entry.clone()) {
            self.step(&format!(
                "point PgBouncer's entry {entry} at the new server"
            ));
            let pointed = self.bouncer.as_ref().expect("a bouncer").point_and_resume();
            // (Resumed, or not to be resumed by a signal: its target may be
            // the old one.)
            pause::released();
            pointed.map_err(|e| format!("{e}\nThe shard is the new server's; its entry may still be paused: fix this and run the move again"))?;
            if let Some(t) = self.paused_at {
                println!("   {entry} paused for {:.3} s", t.elapsed().as_secs_f64());
            }
        }
        // (Without PgBouncer too: a signal from here on exits at once.)
        pause::released();
        if let Some(target) = &self.a.router_target {
            self.step("re-point the router's map");
            let router = self.router.as_mut().expect("--router with --router-target");
            let version: i32 = router
                .query_one(
                    "SELECT public.repoint_shard($1::int, $2::text)",
                    &[&self.shard, target],
                )
                .described()?
                .get(0);
            println!("   map version {version}");
        }
        if self.bouncer.is_some() || self.router.is_some() {
            self.record_to("map", schema)?;
            stop_after("map");
        }
        self.step("cleanup: subscription, slots, publication, fence");
        self.record_to("cleanup", schema)?;
        self.drop_replication(st, None)?;
        stop_after("unsubscribed");
        drop_fence(&mut self.to, schema)?;
        // The old server keeps its copy for a rollback: it follows the new
        // server from now on (the forward stream gone, nothing loops).
        let kept = self.kept()?.is_some();
        if kept {
            self.subscribe_back()?;
        }
        {
            let mut tx = self.to.transaction().described()?;
            // (0.9.0's first script made the fence's function in the schema.)
            tx.batch_execute(&format!(
                "DROP FUNCTION IF EXISTS {}.insta_id_move_fence()",
                ident(schema)
            ))
            .described()?;
            if kept {
                Self::record(
                    &mut tx,
                    self.shard,
                    "arriving",
                    "reserved",
                    schema,
                    &self.from_label,
                )?;
            }
            tx.commit().described()?;
        }
        // No copy kept (any more): the slot and publication back, if a
        // window or an interrupted release left them, go with the record.
        if !kept {
            self.drop_back()?;
        }
        drop(hold);
        self.step(&format!(
            "moved shard {} ({})",
            self.shard,
            printable(schema)
        ));
        if let Some((_, until, _)) = self.kept()? {
            println!("   the old server keeps its copy, fenced and following this one, for a rollback until {until}");
        }
        Ok(())
    }

    /// The new server's record of the move: its step and schema.
    fn arriving_step(&mut self) -> Result<Option<(String, String)>> {
        Ok(self
            .to
            .query_opt(
                "SELECT step, schema_name::text FROM insta_id_admin.moves WHERE shard_id = $1::int AND side = 'arriving'",
                &[&self.shard],
            )
            .described()?
            .map(|r| (r.get(0), r.get(1))))
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

    /// On the new server, once the copy is streaming: the publication and
    /// the slot the old server's copy will follow after the cutover, made
    /// now so that no client waits on the slot's snapshot at the cutover.
    /// Made afresh: a slot left by a run killed here is from before it.
    fn make_back(&mut self, schema: &str) -> Result<()> {
        self.to
            .execute(
                "SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots
                 WHERE slot_name = $1::text AND database = pg_catalog.current_database()",
                &[&self.back],
            )
            .described()?;
        self.to
            .batch_execute(&format!(
                "SET client_min_messages = warning; DROP PUBLICATION IF EXISTS {name};
                 RESET client_min_messages; CREATE PUBLICATION {name} FOR TABLES IN SCHEMA {schema}",
                name = ident(&self.back),
                schema = ident(schema)
            ))
            .described()?;
        self.to
            .execute(
                "SELECT pg_catalog.pg_create_logical_replication_slot($1::text, 'pgoutput')",
                &[&self.back],
            )
            .described()?;
        Ok(())
    }

    /// Registers the copy on the new server (the fence opens), under the
    /// finishers' lock for this transaction, unless a run beside this one
    /// did. On 15 (no origin filter), the slot back `advance`, if the move
    /// made one, is first moved past everything written here so far (the
    /// forward stream's rows, which the old copy has): only what clients
    /// write from now on goes back. (A logical slot's advance reaches disk
    /// at the next checkpoint: a crash of the new server before it would
    /// send those rows back, and the copy stop following; the rollback is
    /// then refused, nothing lost.)
    fn adopt(
        c: &mut Client,
        shard: i32,
        schema: &str,
        from_label: &str,
        back: Option<&str>,
    ) -> Result<()> {
        let done = Self::adopt_begin(c, true, shard, schema)
            .and_then(|now| Self::adopt_end(c, now, shard, schema, from_label, back));
        if done.is_err() {
            let _ = c.batch_execute("ROLLBACK");
        }
        done
    }

    /// The adoption's first half, in a transaction it opens and leaves
    /// open: the finishers' lock for the transaction (`lock`: the move's
    /// new server), then adopt_shard, unless the shard is registered here
    /// already (a re-run finishing beside this one adopted first: false).
    fn adopt_begin(c: &mut Client, lock: bool, shard: i32, schema: &str) -> Result<bool> {
        c.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            .described()?;
        if lock {
            c.execute(
                "SELECT insta_id._lock(insta_id._move_lock_key(), $1::int, false, false, true)",
                &[&shard],
            )
            .described()?;
        }
        let registered: bool = c
            .query_one(
                "SELECT EXISTS (SELECT FROM insta_id_admin.shard_registry WHERE shard_id = $1::int)",
                &[&shard],
            )
            .described()?
            .get(0);
        if !registered {
            c.execute(
                "SELECT insta_id.adopt_shard($1::text::name, $2::int)",
                &[&schema, &shard],
            )
            .described()?;
        }
        Ok(!registered)
    }

    /// Its second half, once the old server has let the shard go: the
    /// slot back advanced and the step recorded (when this run adopted),
    /// COMMIT.
    fn adopt_end(
        c: &mut Client,
        adopted: bool,
        shard: i32,
        schema: &str,
        from_label: &str,
        back: Option<&str>,
    ) -> Result<()> {
        if adopted {
            if let Some(back) = back {
                c.execute(
                    "SELECT pg_catalog.pg_replication_slot_advance(slot_name, pg_catalog.pg_current_wal_flush_lsn())
                     FROM pg_catalog.pg_replication_slots WHERE slot_name = $1::text AND database = pg_catalog.current_database()",
                    &[&back],
                )
                .described()?;
            }
            Self::record(c, shard, "arriving", "adopted", schema, from_label)?;
        }
        c.batch_execute("COMMIT").described()?;
        Ok(())
    }

    /// On the old server, once the forward stream is gone: the subscription
    /// that keeps its copy following the new server, from the slot back
    /// (nothing copied: the copy has every row up to the slot's start). It
    /// flushes what it applies at once (synchronous_commit = local), so a
    /// rollback's cutover waits for no WAL writer; set now, since changing
    /// it at the rollback would restart its worker while clients wait.
    fn subscribe_back(&mut self) -> Result<()> {
        if self.subscribed_back()? {
            return Ok(());
        }
        let conn = self
            .a
            .rollback_subscription
            .as_deref()
            .unwrap_or(&self.a.to);
        self.from
            .batch_execute(&format!(
                "CREATE SUBSCRIPTION {name} CONNECTION {conn} PUBLICATION {name}
                   WITH (create_slot = false, slot_name = {slot}, copy_data = false, synchronous_commit = local{origin})",
                name = ident(&self.back),
                slot = literal(&self.back),
                conn = literal(conn),
                origin = if self.origin_filter {
                    ", origin = none"
                } else {
                    ""
                },
            ))
            .described()?;
        Ok(())
    }

    /// Whether the old server has the subscription back.
    fn subscribed_back(&mut self) -> Result<bool> {
        Ok(self
            .from
            .query_one(&subscribed_sql(), &[&self.back])
            .described()?
            .get(0))
    }

    /// In a transaction on the old server: the subscription back, detached
    /// from its slot (the new server's, dropped there), if it is there.
    fn unsubscribe_back(tx: &mut postgres::Transaction, back: &str) -> Result<()> {
        let exists: bool = tx
            .query_one(&subscribed_sql(), &[&back])
            .described()?
            .get(0);
        if exists {
            let name = ident(back);
            tx.batch_execute(&format!(
                "SET LOCAL client_min_messages = warning;
                 ALTER SUBSCRIPTION {name} DISABLE;
                 ALTER SUBSCRIPTION {name} SET (slot_name = NONE);
                 DROP SUBSCRIPTION {name}"
            ))
            .described()?;
        }
        Ok(())
    }

    /// On the new server: the slot and the publication back, then its
    /// record of the move.
    fn drop_back(&mut self) -> Result<()> {
        let (to, back) = (&mut self.to, &self.back);
        let free = "SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_replication_slots WHERE slot_name = $1::text AND active)";
        // Its subscriber is gone (dropped on the old server, or the old
        // server itself): a walsender still holding the slot is one whose
        // peer vanished, which wal_sender_timeout would end later.
        if wait_for(10, "the slot back to be released", || {
            Ok(to.query_one(free, &[back]).described()?.get(0))
        })
        .is_err()
        {
            to.execute(
                "SELECT pg_catalog.pg_terminate_backend(active_pid) FROM pg_catalog.pg_replication_slots
                 WHERE slot_name = $1::text AND active",
                &[back],
            )
            .described()?;
            wait_for(20, "the slot back to be released", || {
                Ok(to.query_one(free, &[back]).described()?.get(0))
            })?;
        }
        self.to
            .execute(
                "SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots
                 WHERE slot_name = $1::text AND database = pg_catalog.current_database()",
                &[&self.back],
            )
            .described()?;
        let mut tx = self.to.transaction().described()?;
        tx.batch_execute(&format!(
            "SET LOCAL client_min_messages = warning; DROP PUBLICATION IF EXISTS {}",
            ident(&self.back)
        ))
        .described()?;
        Self::done(&mut tx, self.shard, "arriving")?;
        tx.commit().described()?;
        Ok(())
    }

    /// Drops what the move made for replication, each part only if it is
    /// there. On the new server in one transaction: the subscription,
    /// detached from its slot, and when undoing (`undo`: the schema) the
    /// schema and its history with it, so that a schema of ours is there
    /// exactly while the subscription is. Then on the old server the slots
    /// (the subscription's and its table copies') and the publication.
    fn drop_replication(&mut self, st: &State, undo: Option<&str>) -> Result<()> {
        let mut copy_slots = String::new();
        if let Some((subid, _)) = &st.sub {
            let mut tx = self.to.transaction().described()?;
            let name = ident(&self.name);
            tx.batch_execute(&format!(
                "SET LOCAL client_min_messages = warning;
                 ALTER SUBSCRIPTION {name} DISABLE;
                 ALTER SUBSCRIPTION {name} SET (slot_name = NONE);
                 DROP SUBSCRIPTION {name}"
            ))
            .described()?;
            if let Some(schema) = undo {
                tx.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", ident(schema)))
                    .described()?;
                tx.execute(
                    "DELETE FROM insta_id_admin.applied_migrations WHERE schema_name = $1::text",
                    &[&schema],
                )
                .described()?;
                // The new server's side ends with its schema; when finishing,
                // with the fence (finish_move).
                Self::done(&mut tx, self.shard, "arriving")?;
            }
            tx.commit().described()?;
            // Table-copy slots are pg_<subscription oid>_sync_<relid>_<system
            // identifier of the new server>: only this move's.
            copy_slots = format!("pg\\_{subid}\\_sync\\_%\\_{}", self.to_sysid);
        }
        let ours = "(slot_name = $1::text OR slot_name LIKE $2::text) AND database = pg_catalog.current_database()";
        let (from, name) = (&mut self.from, &self.name);
        wait_for(30, "the slots of the move to be released", || {
            Ok(from
                .query_one(
                    &format!("SELECT pg_catalog.count(*) = 0 FROM pg_catalog.pg_replication_slots WHERE {ours} AND active"),
                    &[name, &copy_slots],
                )
                .described()?
                .get(0))
        })?;
        self.from
            .execute(
                &format!("SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots WHERE {ours}"),
                &[&self.name, &copy_slots],
            )
            .described()?;
        let mut tx = self.from.transaction().described()?;
        tx.batch_execute(&format!(
            "SET LOCAL client_min_messages = warning; DROP PUBLICATION IF EXISTS {}",
            ident(&self.name)
        ))
        .described()?;
        // (A copy kept for a rollback keeps its record.)
        tx.execute(
            "SELECT insta_id.move_done($1::int, 'leaving') FROM insta_id_admin.moves
             WHERE shard_id = $1::int AND side = 'leaving' AND step NOT IN ('reserved', 'returning')",
            &[&self.shard],
        )
        .described()?;
        tx.commit().described()?;
        if undo.is_some() {
            self.drop_back()?;
        }
        Ok(())
    }
}

/// The shard's tables (every partition) that `subscription`, on the
/// subscriber `c`, does not both have and stream: a table made on both
/// servers during a move exists on each, but its rows never came. `state`
/// is move_state's. (A partitioned table's rows are its partitions'.)
fn unsubscribed(
    c: &mut Client,
    state: &str,
    subscription: &str,
    schema: &str,
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
                                 AND n.nspname = $3::text AND c.relname = t AND r.srsubstate = 'r')
               AND NOT EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                               WHERE n.nspname = $3::text AND c.relname = t AND c.relkind = 'p')"
        ),
        &[&state, &subscription, &schema],
    )
    .described()?
    .get(0))
}

/// A digest of what a schema defines, as the catalogs of either server say
/// it: the relations, their columns and types, their constraints and
/// triggers by name and kind, and the functions, without the move's own
/// fence. By names, not deparsed text, and without 18's NOT NULL
/// constraints (15 to 17 have none): equal across majors for a copy made
/// from the old server's definitions and not changed since.
fn fingerprint(c: &mut Client, schema: &str) -> Result<String> {
    Ok(c.query_one(
        "WITH nsp AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1::text)
         SELECT coalesce(pg_catalog.md5(pg_catalog.string_agg(x, E'\\n' ORDER BY x)), '') FROM (
           SELECT 'r ' || c.relname || ' ' || c.relkind::text FROM pg_catalog.pg_class c WHERE c.relnamespace = (SELECT oid FROM nsp)
           UNION ALL
           SELECT 'a ' || c.relname || '.' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text
           FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
           WHERE c.relnamespace = (SELECT oid FROM nsp) AND a.attnum > 0 AND NOT a.attisdropped
           UNION ALL
           SELECT 'c ' || c.relname || '.' || k.conname || ' ' || k.contype::text
           FROM pg_catalog.pg_constraint k JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
           WHERE c.relnamespace = (SELECT oid FROM nsp) AND k.contype <> 'n'
           UNION ALL
           SELECT 't ' || c.relname || '.' || t.tgname FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
           WHERE c.relnamespace = (SELECT oid FROM nsp) AND NOT t.tgisinternal AND t.tgname <> 'insta_id_move_fence'
           UNION ALL
           SELECT 'f ' || p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')'
           FROM pg_catalog.pg_proc p WHERE p.pronamespace = (SELECT oid FROM nsp) AND p.proname <> 'insta_id_move_fence'
         ) s(x)",
        &[&schema],
    )
    .described()?
    .get(0))
}

/// Whether this database has the subscription named $1.
fn subscribed_sql() -> String {
    format!("SELECT EXISTS (SELECT FROM pg_catalog.pg_subscription WHERE subname = $1::text AND subdbid = {THIS_DB})")
}

/// Where a move's old server records a committed cutover: the shard
/// dropped there, or its copy kept for a rollback.
fn cut_over(step: Option<&str>) -> bool {
    matches!(step, Some("cutover" | "reserved" | "returning"))
}

/// Drops the fence's triggers from a schema's tables. Dropping a trigger
/// locks its table (ACCESS EXCLUSIVE), which now takes writes: one table at
/// a time, each wait short. The fence is open already; a re-run drops what
/// this leaves.
fn drop_fence(c: &mut Client, schema: &str) -> Result<()> {
    let fenced = c.query(
            "SELECT n.nspname::text, c.relname::text FROM pg_catalog.pg_trigger t
             JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE t.tgname = 'insta_id_move_fence' AND n.nspname = $1::text",
            &[&schema],
        )
        .described()?;
    c.batch_execute("SET lock_timeout = '500ms'").described()?;
    for r in fenced {
        let (nsp, rel): (String, String) = (r.get(0), r.get(1));
        let drop = format!(
            "DROP TRIGGER IF EXISTS insta_id_move_fence ON {}.{}",
            ident(&nsp),
            ident(&rel)
        );
        let mut attempt = 1;
        while let Err(e) = c.batch_execute(&drop) {
            if attempt == 20 {
                return fail(format!(
                    "the fence's trigger on {}.{} is still there (open; a re-run drops it): {}",
                    printable(&nsp),
                    printable(&rel),
                    crate::db::describe(&e)
                ));
            }
            attempt += 1;
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    c.batch_execute("RESET lock_timeout").described()?;
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::shard_number;

    #[test]
    fn a_shard_is_a_number_and_a_schema_name_is_told_apart() {
        assert_eq!(shard_number("5"), Ok(5));
        assert_eq!(
            shard_number("insta5"),
            Err("a shard is a number from 0 to 8191, not a schema's name: 5, not insta5?".into())
        );
        for bad in ["", "-1", "five", "5a", "insta"] {
            assert_eq!(
                shard_number(bad),
                Err("a shard is a number from 0 to 8191".into()),
                "{bad}"
            );
        }
    }
}
