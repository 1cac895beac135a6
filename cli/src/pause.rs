//! How long a cutover holds the shard's clients, and what it does when it
//! cannot finish in that time or the operator interrupts it.
//!
//! Each try of a cutover has a budget (--pause-budget): from the PAUSE of
//! the shard's PgBouncer entry (or, without PgBouncer, from the lock its
//! writers queue behind) to its COMMIT. A try that would spend more gives
//! up: at its deadline a watchdog thread ends its transaction (the try runs
//! in a session of its own, whose backend it terminates) and resumes the
//! entry through console sessions opened before the try, whatever the
//! tool's own thread is doing; a reserve of the budget, kept for that and
//! grown by what a try still overran, aims to keep every client's wait
//! within the budget (a bound it reports, not a guarantee: docs/fleet.md).
//! Then the sessions that held it up are named. Before a try, sessions that have held the shard's
//! tables (or kept a transaction open through the entry) longer than the
//! budget are waited for without pausing anything: pausing behind them
//! would only stall the clients.
//!
//! SIGINT and SIGTERM are caught: a watcher thread cancels the try's
//! statement, resumes the entry the run paused, and exits (130, 143). Once
//! the cutover is committing, it waits for the run to point the entry at
//! the shard's new home and resume it first.

use crate::bouncer::{Bouncers, Resumer};
use crate::db::{printable, Described};
use crate::pq::{CancelToken, Client, GenericClient};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// One try's allowance, from its start; and where its time went, step by
/// step (`lap`), for the try's line and make bench-moves.
pub struct Budget {
    total: Duration,
    /// Kept back for giving up: what the watchdog does (the try's backend
    /// terminated, the entry resumed) and PgBouncer's new logins after it,
    /// so that clients wait no longer than `total` (every wait of the try,
    /// and the watchdog's deadline, end `reserve` before it).
    reserve: Duration,
    started: Instant,
    laps: Mutex<Vec<(&'static str, Duration)>>,
}

impl Budget {
    #[cfg(test)]
    pub fn start(total: Duration) -> Budget {
        Budget::keeping(total, Duration::ZERO)
    }

    /// A budget of `total` whose waits end `reserve` before it.
    pub fn keeping(total: Duration, reserve: Duration) -> Budget {
        Budget {
            total,
            reserve: reserve.min(total / 2),
            started: Instant::now(),
            laps: Mutex::new(Vec::new()),
        }
    }

    /// Marks the end of the try's step `name`: its time is from the end of
    /// the step before (or the try's start).
    pub fn lap(&self, name: &'static str) {
        let mut laps = self.laps.lock().unwrap_or_else(|p| p.into_inner());
        let so_far: Duration = laps.iter().map(|(_, d)| *d).sum();
        let d = self.started.elapsed().saturating_sub(so_far);
        laps.push((name, d));
    }

    /// The steps so far, as `name 12, name 3` (milliseconds).
    pub fn laps(&self) -> String {
        let laps = self.laps.lock().unwrap_or_else(|p| p.into_inner());
        laps.iter()
            .map(|(n, d)| format!("{n} {}", d.as_millis()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// What is left of it for the try's work (zero once spent): its
    /// reserve for giving up is not.
    pub fn left(&self) -> Duration {
        (self.total - self.reserve).saturating_sub(self.started.elapsed())
    }

    /// What is left of the whole budget, its reserve included.
    pub fn left_of_total(&self) -> Duration {
        self.total.saturating_sub(self.started.elapsed())
    }

    /// What was kept back for giving up.
    pub fn reserve(&self) -> Duration {
        self.reserve
    }

    pub fn reserve_ms(&self) -> u128 {
        self.reserve.as_millis()
    }

    pub fn spent(&self) -> bool {
        self.left().is_zero()
    }

    /// How much of it the try has taken so far.
    pub fn used_ms(&self) -> u128 {
        self.started.elapsed().as_millis()
    }

    /// The budget as the operator gave it, for messages.
    pub fn total_ms(&self) -> u128 {
        self.total.as_millis()
    }

    /// What is left of the whole budget as a PostgreSQL setting's
    /// milliseconds (at least 1: 0 would mean no limit).
    pub fn left_setting(&self) -> String {
        self.left_of_total().as_millis().max(1).to_string()
    }
}

/// What the tries of one cutover keep back of their budget for giving up:
/// the watchdog's work (the try's backend terminated, a RESUME on each
/// PgBouncer) and the queued clients' new server connections after it
/// (PgBouncer opens them one at a time), so that no client waits past the
/// budget. A tenth of the budget (10 ms at least, unless that is over a
/// quarter); for a try, three times
/// its round trips and a login for each of the entry's server connections
/// as they take just before it if more (the machine's load then); grown by
/// what a try given up still held its clients past the budget; never over
/// a quarter of the budget, which a try's work keeps. (Giving up took
/// 10-30 ms on a 2-core machine, quiet or busy: a twentieth of 500 ms was
/// overrun.)
pub struct Reserve {
    budget: Duration,
    kept: Duration,
}

impl Reserve {
    pub fn of(budget: Duration) -> Reserve {
        Reserve {
            budget,
            kept: (budget / 10).max(Duration::from_millis(10)).min(budget / 4),
        }
    }

    /// For a try whose round trips took `trips` and whose entry's server
    /// connections, `logins` of them, take `login` each.
    pub fn for_try(&self, trips: Duration, login: Duration, logins: u32) -> Duration {
        self.kept
            .max(trips * 3 + login * logins)
            .min(self.budget / 4)
    }

    /// After a try given up that kept `kept` and held its clients `held`.
    pub fn overran(&mut self, kept: Duration, held: Duration) {
        self.kept = (kept + held.saturating_sub(self.budget)).min(self.budget / 4);
    }
}

/// What a try's watchdog ends at the try's deadline, first what holds
/// the clients up.
pub struct Deadline<'a> {
    /// A session on the server holding the shard other than the try's (the
    /// move's own, idle while the try runs in a session of its own), and
    /// the try's backend: terminated there, its transaction and its locks
    /// end at once, whatever the tool's own thread is doing or waiting for
    /// (a cancel reaches a running statement only, and a ROLLBACK waits for
    /// that thread).
    pub killer: &'a mut Client,
    pub try_pid: i32,
    /// When that backend started: a process ID is terminated only while
    /// it is still that backend's, never another's that reused it.
    pub try_started: Option<String>,
    /// The try's statement, cancelled when the backend could not be
    /// terminated (the killer's session broken): a cancelled statement
    /// aborts its transaction, which releases its locks too.
    pub try_cancel: CancelToken,
    /// Console sessions opened before the try: the entry resumed through
    /// them, one round trip each.
    pub resumers: &'a mut [Resumer],
    /// The gates of the try's PAUSEs: shut first, so that none is sent
    /// after the RESUME.
    pub gates: Vec<crate::bouncer::Gate>,
    /// The statements of the move's other sessions, then cancelled.
    pub cancels: Vec<CancelToken>,
}

/// Ends a try at its deadline (`Deadline`), unless disarmed first: before
/// the COMMIT, so that nothing ever meets the COMMIT's wait for a
/// synchronous standby (cancelled, it would leave it committed locally
/// only), and when the try gives up by itself.
pub struct Watchdog {
    state: Arc<(Mutex<Dog>, Condvar)>,
}

#[derive(Clone)]
enum Dog {
    Armed,
    Disarmed,
    /// Asked to end the try now, as at its deadline (`fire_now`).
    Now,
    /// It ended the try: when the try's clients were served again after
    /// the RESUME (None without PgBouncer, or with the entry not paused),
    /// or why not; and where its time went, step by step.
    Fired(std::result::Result<Option<Instant>, String>, String),
}

impl Watchdog {
    /// A thread of `scope` that waits for the deadline (what is left of
    /// `budget` for its work: its reserve is for the watchdog's round
    /// trips) or a disarm, whichever comes first.
    pub fn arm<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        budget: &Budget,
        d: Deadline<'scope>,
    ) -> Watchdog {
        let state = Arc::new((Mutex::new(Dog::Armed), Condvar::new()));
        let deadline = Instant::now() + budget.left();
        let reserve = budget.reserve().max(Duration::from_millis(10));
        let shared = state.clone();
        scope.spawn(move || {
            let (dog, wake) = &*shared;
            let mut dog = dog.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                match *dog {
                    Dog::Armed => {}
                    Dog::Now => break,
                    _ => return,
                }
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                dog = wake
                    .wait_timeout(dog, deadline - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            // (Under the lock: a disarm meanwhile waits, then sees it fired.)
            let fired = Instant::now();
            let sent: Vec<bool> = d.gates.iter().map(crate::bouncer::Gate::shut).collect();
            let in_flight = sent.contains(&true);
            // (The backend's start as an epoch, whatever the DateStyle.)
            let terminated = d
                .killer
                .query_one(
                    "SELECT pg_catalog.count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(a.pid)) > 0
                     FROM pg_catalog.pg_stat_activity a
                     WHERE a.pid = $1::int AND extract(epoch FROM a.backend_start)::text = $2::text",
                    &[&d.try_pid, &d.try_started],
                )
                .is_ok_and(|r| r.get::<_, bool>(0));
            if !terminated {
                let _ = d.try_cancel.cancel_within(reserve / 2);
            }
            let ended = Instant::now();
            // The entry resumed at once, while the backend exits: PgBouncer
            // logs in anew after a RESUME (a PAUSE closes the entry's server
            // connections, and it opens one at a time), which takes longer
            // than the backend's abort; a client served before that would
            // wait on the try's locks in the server instead, its wait no
            // longer. Then, until those locks are gone (the reserve's half at
            // most: pg_terminate_backend's own wait sleeps 100 ms, or all of
            // a shorter timeout, between looks), and until the clients that
            // waited through the PAUSE have a server: the end of their wait
            // is the later. Then each PgBouncer read again when a PAUSE was
            // on its way: one that reached it after the RESUME is resumed
            // too.
            let acked = crate::bouncer::resume_each(d.resumers, Some(&sent));
            let resumed_at = Instant::now();
            if terminated {
                let until = resumed_at + reserve / 2;
                while Instant::now() < until {
                    let gone = d.killer.query_one(
                        "SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_locks
                                            WHERE pid = $1::int AND locktype = 'relation')",
                        &[&d.try_pid],
                    );
                    if gone.map_or(true, |r| r.get::<_, bool>(0)) {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(500));
                }
            }
            let gone = Instant::now();
            let resumed = acked
                .and_then(|at| crate::bouncer::served_after(d.resumers, at))
                .map(|at| at.map(|at| at.max(gone)))
                .and_then(|at| match in_flight {
                    true => Ok(at.max(crate::bouncer::resume_each(d.resumers, None)?)),
                    false => Ok(at),
                });
            // (Each cancel is a connection of its own: after the clients.)
            // Each waited for: these sessions are used again, and a cancel
            // left on its way would end a later statement of theirs. (The
            // clients were resumed above: this wait holds none of them.)
            for token in &d.cancels {
                let _ = token.cancel_query();
            }
            let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_millis();
            let steps = format!(
                "its backend ended {}, the entry resumed {}, its locks gone {}, its clients served {}",
                ms(fired, ended),
                ms(ended, resumed_at),
                ms(resumed_at, gone),
                match &resumed {
                    Ok(Some(at)) => ms(gone, *at).to_string(),
                    _ => "-".into(),
                }
            );
            *dog = Dog::Fired(resumed, steps);
            wake.notify_all();
        });
        Watchdog { state }
    }

    /// Stops it (again: a no-op); whether it had fired by then.
    pub fn disarm(&self) -> bool {
        let (dog, wake) = &*self.state;
        let mut dog = dog.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*dog, Dog::Armed) {
            *dog = Dog::Disarmed;
            wake.notify_all();
        }
        matches!(*dog, Dog::Fired(..))
    }

    /// Ends the try now, as at its deadline, unless it was disarmed; returns
    /// once it has, the entry resumed: a try that gives up by itself before
    /// its deadline (its own lock_timeout beat a starved watchdog) resumes
    /// the clients before it looks at why. Whether it fired.
    pub fn fire_now(&self) -> bool {
        let (dog, wake) = &*self.state;
        let mut dog = dog.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*dog, Dog::Armed) {
            *dog = Dog::Now;
            wake.notify_all();
        }
        while matches!(*dog, Dog::Now) {
            dog = wake.wait(dog).unwrap_or_else(|p| p.into_inner());
        }
        matches!(*dog, Dog::Fired(..))
    }

    /// Once it fired: when the entry was resumed (None: nothing was
    /// paused), or why it was not.
    pub fn resumed(&self) -> Option<std::result::Result<Option<Instant>, String>> {
        match &*self.state.0.lock().unwrap_or_else(|p| p.into_inner()) {
            Dog::Fired(r, _) => Some(r.clone()),
            _ => None,
        }
    }

    /// Once it fired: where its time went (ms), for the try's line.
    pub fn steps(&self) -> Option<String> {
        match &*self.state.0.lock().unwrap_or_else(|p| p.into_inner()) {
            Dog::Fired(_, steps) => Some(steps.clone()),
            _ => None,
        }
    }
}

/// What the watcher does on a signal.
enum Held {
    /// Nothing paused: exit.
    Nothing,
    /// The entry is (being) paused; the try's session to cancel.
    Entry(Box<(Bouncers, CancelToken)>),
    /// The cutover is committing or committed: the run points the entry
    /// at the shard's new home and resumes it; the watcher waits for that.
    Committing,
}

static HELD: Mutex<Held> = Mutex::new(Held::Nothing);

/// How long a signal's cancel may take before the entry is resumed (the
/// process exits after: a cancel still on its way ends nothing of it).
const CANCEL_WITHIN: Duration = Duration::from_secs(2);
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: i32) {
    // (Only an atomic store: what a signal handler may do.)
    SIGNAL.store(sig, Ordering::SeqCst);
}

/// Catches SIGINT and SIGTERM for the rest of the process.
pub fn catch_signals() {
    extern "C" {
        fn signal(sig: i32, handler: extern "C" fn(i32)) -> usize;
    }
    const SIGINT: i32 = 2;
    const SIGTERM: i32 = 15;
    // SAFETY: signal(2) with a handler that only stores to an atomic.
    unsafe {
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
    }
    std::thread::spawn(|| loop {
        std::thread::sleep(Duration::from_millis(20));
        let sig = SIGNAL.load(Ordering::SeqCst);
        if sig == 0 {
            continue;
        }
        let name = if sig == 2 { "SIGINT" } else { "SIGTERM" };
        let held = lock();
        match &*held {
            Held::Committing => {
                drop(held);
                continue;
            }
            Held::Entry(held) => {
                let (b, cancel) = &**held;
                let _ = cancel.cancel_within(CANCEL_WITHIN);
                match b.resume_if_paused() {
                    Ok(()) => eprintln!("insta-id: {name}: PgBouncer's entry {} resumed; the shard is where it was: run the move again to go on", b.entry),
                    Err(e) => eprintln!("insta-id: {name}: resuming PgBouncer's entry {}: {e}; run the move again, which resumes it", b.entry),
                }
            }
            Held::Nothing => eprintln!("insta-id: {name}: stopped; run it again to go on"),
        }
        std::process::exit(128 + sig);
    });
}

fn lock() -> std::sync::MutexGuard<'static, Held> {
    HELD.lock().unwrap_or_else(|p| p.into_inner())
}

/// The entry is about to be paused (set before the PAUSE: one sent is
/// resumed by a signal even before PgBouncer answers it).
pub fn pausing(b: &Bouncers, cancel: CancelToken) {
    *lock() = Held::Entry(Box::new((b.clone(), cancel)));
}

/// The cutover commits: from here a signal waits for the entry to be
/// pointed and resumed. (Blocks while the watcher is handling a signal,
/// which exits the process: no COMMIT then.)
pub fn committing() {
    *lock() = Held::Committing;
}

/// Whether a cutover is committing (a signal then waits for the entry to
/// be resumed).
pub fn committing_now() -> bool {
    matches!(*lock(), Held::Committing)
}

/// The entry is resumed (or was never paused).
pub fn released() {
    *lock() = Held::Nothing;
}

/// The sessions, other than `except`, that hold or wait for a lock on the
/// tables of `schema` (or on its sequences, in a mode an ALTER SEQUENCE
/// waits for: nextval's, or pg_sequence_last_value's, which reading the
/// pg_sequences view takes on every sequence), each as a line naming its
/// process, role, application, state, since when its transaction is open
/// and its query. With `older_than`, only granted locks of transactions
/// open longer than that: those that hold a cutover up past its budget (a
/// prepared transaction's age is unknown: it counts; a session whose
/// transaction ended between the reading of pg_locks and that of
/// pg_stat_activity holds nothing any more, and does not).
pub fn holders(
    c: &mut Client,
    schema: &str,
    except: &[i32],
    older_than: Option<Duration>,
) -> Result<Vec<String>, String> {
    let secs = older_than.map(|d| d.as_secs_f64());
    let rows = c
        .query(
            "SELECT pg_catalog.format('%s (%s, application %s, %s, transaction open since %s UTC, %s s; %s): %s',
                        CASE WHEN l.pid IS NULL THEN 'a prepared transaction' ELSE 'process ' || l.pid END,
                        coalesce(a.usename::text, '?'), coalesce(pg_catalog.quote_literal(a.application_name), '?'),
                        coalesce(a.state, '?'),
                        coalesce(pg_catalog.to_char(a.xact_start AT TIME ZONE 'UTC', 'HH24:MI:SS'), '?'),
                        coalesce(pg_catalog.round(extract(epoch FROM pg_catalog.clock_timestamp() - a.xact_start)::numeric, 1)::text, '?'),
                        pg_catalog.string_agg(DISTINCT
                            CASE WHEN l.granted THEN 'holds ' ELSE 'waits for ' END || l.mode || ' on ' || c.relname,
                            ', '),
                        coalesce(pg_catalog.left(pg_catalog.regexp_replace(a.query, '\\s+', ' ', 'g'), 160), '?'))
             FROM pg_catalog.pg_locks l
             JOIN pg_catalog.pg_class c ON c.oid = l.relation
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
             WHERE l.locktype = 'relation'
               AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
               AND n.nspname = $1::text
               AND (l.pid IS NULL OR (l.pid <> pg_catalog.pg_backend_pid() AND l.pid <> ALL ($2::int[])))
               AND (c.relkind IN ('r', 'p') OR (c.relkind = 'S' AND l.mode NOT IN ('AccessShareLock', 'RowShareLock')))
               AND ($3::float8 IS NULL
                    OR (l.granted AND (l.pid IS NULL
                                       OR a.xact_start < pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => $3::float8))
                        AND NOT (a.backend_type = 'autovacuum worker' AND a.query NOT LIKE '%(to prevent wraparound)%')))
             GROUP BY l.pid, a.usename, a.application_name, a.state, a.xact_start, a.query
             ORDER BY a.xact_start NULLS FIRST LIMIT 5",
            &[&schema, &except, &secs],
        )
        .described()?;
    Ok(rows.iter().map(|r| printable(r.get(0))).collect())
}

/// Cancels the autovacuum workers (not those preventing wraparound) that
/// hold a lock on a table of `schema`, as PostgreSQL cancels one that a
/// lock has waited for deadlock_timeout (1 s by default, longer than a
/// budget): it runs again later. Returns the tables said so; a role that
/// may not cancel them (PostgreSQL 18: pg_signal_autovacuum_worker) leaves
/// them to be named by the try they hold up.
pub fn cancel_autovacuum(c: &mut Client, schema: &str) -> Result<Vec<String>, String> {
    let rows = c
        .query(
            // (Materialized: the cancel runs for these processes only,
            // never as a filter the planner could apply to others first.)
            "WITH av AS MATERIALIZED (
               SELECT DISTINCT a.pid, c.relname
               FROM pg_catalog.pg_locks l
               JOIN pg_catalog.pg_class c ON c.oid = l.relation
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
               JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
               WHERE l.locktype = 'relation' AND l.granted AND n.nspname = $1::text
                 AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
                 AND a.backend_type = 'autovacuum worker' AND a.query NOT LIKE '%(to prevent wraparound)%')
             SELECT pg_catalog.format('autovacuum (process %s) on %s cancelled', av.pid, av.relname)
             FROM av WHERE pg_catalog.pg_cancel_backend(av.pid)",
            &[&schema],
        )
        .map_err(|e| crate::db::describe(&e))?;
    Ok(rows.iter().map(|r| printable(r.get(0))).collect())
}

/// The server processes `pids` (PgBouncer's server connections of the
/// entry), described as `holders` describes them, those in a transaction
/// open longer than `older_than` only when it is given.
pub fn sessions(
    c: &mut Client,
    pids: &[i32],
    older_than: Option<Duration>,
) -> Result<Vec<String>, String> {
    let secs = older_than.map(|d| d.as_secs_f64());
    let rows = c
        .query(
            "SELECT pg_catalog.format('process %s (%s, application %s, %s, transaction open since %s UTC, %s s): %s',
                        a.pid, a.usename, pg_catalog.quote_literal(a.application_name), a.state,
                        pg_catalog.to_char(a.xact_start AT TIME ZONE 'UTC', 'HH24:MI:SS'),
                        pg_catalog.round(extract(epoch FROM pg_catalog.clock_timestamp() - a.xact_start)::numeric, 1),
                        pg_catalog.left(pg_catalog.regexp_replace(a.query, '\\s+', ' ', 'g'), 160))
             FROM pg_catalog.pg_stat_activity a
             WHERE a.pid = ANY ($1::int[]) AND a.xact_start IS NOT NULL
               AND ($2::float8 IS NULL OR a.xact_start < pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => $2::float8))
             ORDER BY a.xact_start LIMIT 5",
            &[&pids, &secs],
        )
        .described()?;
    Ok(rows.iter().map(|r| printable(r.get(0))).collect())
}

/// Lines as a message's tail, one per session.
pub fn listed(who: &[String]) -> String {
    who.iter().map(|w| format!("\n  {w}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_ends_the_work_early_and_is_at_most_half() {
        let b = Budget::keeping(Duration::from_millis(500), Duration::from_millis(50));
        assert!(b.left() <= Duration::from_millis(450));
        assert_eq!((b.total_ms(), b.reserve_ms()), (500, 50));
        let b = Budget::keeping(Duration::from_millis(100), Duration::from_millis(80));
        assert_eq!(b.reserve_ms(), 50);
    }

    #[test]
    fn a_reserve_covers_giving_up_and_leaves_the_work_three_quarters() {
        let ms = Duration::from_millis;
        let mut r = Reserve::of(ms(500));
        assert_eq!(r.for_try(ms(1), ms(5), 4), ms(50));
        // a loaded machine's logins, up to a quarter
        assert_eq!(r.for_try(ms(2), ms(15), 4), ms(66));
        assert_eq!(r.for_try(ms(2), ms(30), 20), ms(125));
        // grown by an overrun, kept after
        r.overran(ms(50), ms(520));
        assert_eq!(r.for_try(ms(1), ms(5), 4), ms(70));
        r.overran(ms(70), ms(900));
        assert_eq!(r.for_try(ms(1), ms(5), 4), ms(125));
        // none lost to a try within its budget
        r.overran(ms(125), ms(400));
        assert_eq!(r.for_try(ms(1), ms(5), 4), ms(125));
        // small budgets: 10 ms, unless that is over a quarter
        assert_eq!(Reserve::of(ms(60)).for_try(ms(0), ms(0), 0), ms(10));
        assert_eq!(Reserve::of(ms(20)).for_try(ms(0), ms(0), 0), ms(5));
    }

    #[test]
    fn a_try_is_told_step_by_step() {
        let b = Budget::start(Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(3));
        b.lap("pause");
        b.lap("lock");
        let said = b.laps();
        let ms: Vec<u128> = said
            .split(", ")
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(
            said.starts_with("pause ") && said.contains(", lock "),
            "{said}"
        );
        assert!(
            ms[0] >= 3 && ms.iter().sum::<u128>() <= b.used_ms(),
            "{said}"
        );
    }

    #[test]
    fn a_budget_counts_down_and_never_below_a_millisecond() {
        let b = Budget::start(Duration::from_millis(0));
        assert!(b.spent());
        assert_eq!(b.left_setting(), "1");
        let b = Budget::start(Duration::from_secs(60));
        assert!(!b.spent());
        assert!(b.left() <= Duration::from_secs(60));
        assert_eq!(b.total_ms(), 60000);
    }
}
