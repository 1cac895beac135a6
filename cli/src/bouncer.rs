//! Routing through PgBouncer during a move: every logical shard has an entry
//! of its own in PgBouncer's `[databases]`, named `shard<N>`, which
//! applications connect to (the database name picks the shard, so no
//! session state crosses transaction pooling). The entries live in a file
//! of their own, included by pgbouncer.ini (`%include`), which this tool
//! rewrites. At the cutover the move pauses the shard's entry (PAUSE waits
//! for the transactions open through it, then its clients queue in
//! PgBouncer instead of failing), and once the new server holds the shard,
//! points the entry there, reloads and resumes: the queued clients go on,
//! on the new server. Only that entry pauses; the other shards' clients are
//! not held.
//!
//! PAUSE has no limit of its own: it is sent from a thread, and given up
//! when the cutover's budget is spent (the entry resumed through a console
//! session opened before the try, `Resumer`; the writers go on).
//!
//! A PAUSE also closes the server connections PgBouncer is still logging in
//! for the entry (its pool was growing), and PgBouncer takes a login closed
//! before it finished for a failed one (`per_loop_pause`,
//! `disconnect_server`, 1.18 to today): after the RESUME it would open no
//! server connection for that pool until `server_login_retry` (15 s by
//! default) had passed, its queued clients waiting all along (make bench
//! saw it once in ten moves). So every RESUME here lifts that delay until
//! the entry's queued clients have a server connection (`resume`).

use crate::conninfo::{self, Settings};
use crate::db::printable;
use crate::pq::{Client, Row};
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Clone)]
pub struct Bouncer {
    /// PgBouncer's admin console (dbname=pgbouncer).
    pub admin: Settings,
    /// The file of `[databases]` entries pgbouncer.ini includes.
    pub map: PathBuf,
    /// The entry's connection string for the new server.
    pub target: String,
    /// shard<N>
    pub entry: String,
}

/// Why a PAUSE was given up.
pub enum Drain {
    /// A transaction through the entry stayed open past the wait; the
    /// PAUSE was sent then (the entry's clients queue from there).
    Busy(Instant),
    /// The try's deadline passed before the PAUSE was sent: not sent.
    Late,
    /// With several PgBouncers: sent to some (from then on), too late for
    /// the others.
    Partly(Instant),
    /// A PAUSE failed; with several PgBouncers, when the first PAUSE was
    /// sent to the others (the entry paused there from then on).
    Failed(String, Option<Instant>),
}

/// What PAUSEs sent to several PgBouncers come to, as one: the first sent
/// when all were drained; else why not, a failure first, then transactions
/// that kept one from draining, then a PAUSE too late for some only (the
/// entry paused on the others: its clients held from the first sent),
/// then one too late for all.
fn combined(tries: Vec<Result<Instant, Drain>>) -> Result<Instant, Drain> {
    if tries.iter().all(Result::is_ok) {
        return Ok(tries
            .into_iter()
            .filter_map(Result::ok)
            .min()
            .expect("at least one PgBouncer"));
    }
    let sent = tries.iter().filter_map(|t| match t {
        Ok(at) | Err(Drain::Busy(at) | Drain::Partly(at)) => Some(*at),
        Err(Drain::Failed(..) | Drain::Late) => None,
    });
    let first = sent.min();
    Err(tries
        .into_iter()
        .filter_map(Result::err)
        .map(|d| match (d, first) {
            (Drain::Busy(_), Some(at)) => Drain::Busy(at),
            (Drain::Late | Drain::Partly(_), Some(at)) => Drain::Partly(at),
            (Drain::Failed(e, _), first) => Drain::Failed(e, first),
            (d, _) => d,
        })
        .max_by_key(|d| match d {
            Drain::Failed(..) => 3,
            Drain::Busy(_) => 2,
            Drain::Partly(_) => 1,
            Drain::Late => 0,
        })
        .expect("a try failed"))
}

/// The entry of a logical shard.
pub fn entry_of(shard: u32) -> String {
    format!("shard{shard}")
}

/// The admin console's session (db::connect_console): only the simple
/// query protocol, which `command` speaks.
fn console(s: &Settings) -> Result<Client, String> {
    crate::db::connect_console(s).map_err(|e| format!("PgBouncer's console ({}): {e}", s.label))
}

fn command(c: &mut Client, sql: &str) -> Result<Vec<Row>, String> {
    c.simple_query(sql)
        .map_err(|e| format!("PgBouncer: {sql}: {}", crate::db::describe(&e)))
}

/// Whether the console's user may PAUSE, RELOAD and RESUME (stats_users
/// may only SHOW), decided as PgBouncer decides it (admin.c,
/// admin_pre_login and admin_post_login): named in admin_users, or the
/// user pgbouncer over a Unix socket from the user PgBouncer runs as (the
/// socket's owner). Read with SHOW CONFIG, which any console user may run:
/// a refused probe would leave an ERROR in PgBouncer's log at every move.
fn admin(c: &mut Client) -> Result<bool, String> {
    let rows = command(c, "SHOW CONFIG")?;
    let user = c.user();
    let listed = rows
        .iter()
        .find(|r| r.named("key") == Some("admin_users"))
        .and_then(|r| r.named("value"))
        .is_some_and(|users| named_in(users, &user));
    Ok(listed || (user == "pgbouncer" && same_user_as_socket(c)))
}

/// Whether `user` is one of a PgBouncer list setting's names (commas and
/// spaces between them, as its strlist reads them).
fn named_in(list: &str, user: &str) -> bool {
    list.split([',', ' ', '\t'])
        .any(|u| !u.is_empty() && u == user)
}

/// Over a Unix socket, whether this process runs as the owner of
/// PgBouncer's socket file, which PgBouncer made as the user it runs as.
fn same_user_as_socket(c: &Client) -> bool {
    use std::os::unix::fs::MetadataExt;
    extern "C" {
        fn geteuid() -> u32;
    }
    let host = c.host();
    if !host.starts_with('/') {
        return false;
    }
    let socket = format!("{host}/.s.PGSQL.{}", c.port());
    // SAFETY: geteuid(2) takes nothing and cannot fail.
    std::fs::metadata(socket).is_ok_and(|m| m.uid() == unsafe { geteuid() })
}

/// How long a run waits at most for the map's lock.
const LOCK_WITHIN: Duration = Duration::from_secs(30);

/// How long a RESUME waits at most for the entry's queued clients to get a
/// server connection, with PgBouncer's retry delay lifted.
const SERVED_WITHIN: Duration = Duration::from_secs(5);

/// Sets PgBouncer's `server_login_retry` (PgBouncer-wide) to `value`, as
/// login_retry read it: a number of seconds, checked there.
fn set_login_retry(c: &mut Client, value: &str) -> Result<Vec<Row>, String> {
    command(c, &format!("SET server_login_retry = '{value}'"))
}

/// PgBouncer's `server_login_retry` as SHOW CONFIG prints it (seconds,
/// `%g`), checked to be a number: it goes back quoted into a SET, which
/// PgBouncer's console takes unquoted only for `[0-9a-z_]+` (not `0.5`).
fn login_retry(c: &mut Client) -> Result<String, String> {
    let rows = command(c, "SHOW CONFIG")?;
    let value = rows
        .iter()
        .find(|r| r.named("key") == Some("server_login_retry"))
        .and_then(|r| r.named("value"))
        .ok_or_else(|| "PgBouncer's SHOW CONFIG has no server_login_retry".to_string())?;
    match value.parse::<f64>() {
        Ok(v)
            if v.is_finite()
                && v >= 0.0
                && value.bytes().all(|b| b"0123456789.e+-".contains(&b)) =>
        {
            Ok(value.to_string())
        }
        _ => Err(format!(
            "PgBouncer's server_login_retry is {}, not a number of seconds",
            printable(value)
        )),
    }
}

/// A pool of PgBouncer: (database, user).
type Pool = (String, String);

/// The pool of a SHOW POOLS or SHOW SERVERS row.
fn pool_of(r: &Row) -> Pool {
    let col = |n: &str| r.named(n).unwrap_or("").to_string();
    (col("database"), col("user"))
}

/// A server connection as SHOW SERVERS lists it: its pool, and what tells
/// it from another (`ptr` is an address PgBouncer hands out again; the
/// backend's process ID is new with every connection).
type Server = (Pool, String);

/// The map file with the entry's line set to `target` (appended when the
/// entry has none, and any later line of it dropped); every other line as
/// it was.
pub fn rewritten(map: &str, entry: &str, target: &str) -> String {
    let line = format!("{entry} = {target}");
    let mut found = false;
    let mut out: Vec<String> = map
        .lines()
        .filter_map(|l| {
            let key = l.split('=').next().unwrap_or("").trim();
            if key != entry || l.trim_start().starts_with([';', '#']) {
                Some(l.to_string())
            } else if !found {
                found = true;
                Some(line.clone())
            } else {
                None // a second line of the entry would override the first
            }
        })
        .collect();
    if !found {
        out.push(line);
    }
    out.join("\n") + "\n"
}

/// A console session of one PgBouncer opened before a try of the cutover,
/// to PAUSE the entry through.
pub struct Pauser {
    c: Client,
    entry: String,
    gate: Gate,
}

/// Whether a try's PAUSE may still be sent: the thread that sends it and
/// the try's watchdog each take it once, whoever first; so no PAUSE leaves
/// after the watchdog has resumed the entry (a thread starved past the
/// deadline would otherwise pause it again).
#[derive(Clone, Default)]
pub struct Gate(std::sync::Arc<std::sync::atomic::AtomicU8>);

impl Gate {
    const OPEN: u8 = 0;
    const SENDING: u8 = 1;
    const SHUT: u8 = 2;

    /// The sender's turn: true if it may send.
    fn send(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.0
            .compare_exchange(Self::OPEN, Self::SENDING, SeqCst, SeqCst)
            .is_ok()
    }

    /// The watchdog's turn (or, after a try, the caller's): true if a
    /// PAUSE was sent (or is on its way), and so may reach PgBouncer after
    /// the RESUME; none is sent after it.
    pub fn shut(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.0.swap(Self::SHUT, SeqCst) == Self::SENDING
    }
}

impl Pauser {
    /// What shuts its PAUSE out (the try's watchdog holds it).
    pub fn gate(&self) -> Gate {
        self.gate.clone()
    }

    /// PAUSEs the entry, unless `send_by` (the try's deadline) has passed
    /// or the try's watchdog has shut its gate: it may have resumed the
    /// entry already, and a PAUSE after that would hold the clients again
    /// (`Drain::Late`). Waits until `until` at most for the transactions
    /// open through it to end: returns when it was sent, or says why not
    /// (`Drain::Busy`: they did not end in time). Either way the entry may
    /// be paused: the caller resumes it (the try's `Resumer`s).
    pub fn pause(self, send_by: Instant, until: Instant) -> Result<Instant, Drain> {
        let Pauser { mut c, entry, gate } = self;
        let started = Instant::now();
        if started >= send_by {
            return Err(Drain::Late);
        }
        let (tx, rx) = mpsc::channel();
        // A try given up leaves this thread waiting on its console session:
        // PgBouncer answers it when a later PAUSE is done, or it ends with
        // the process.
        std::thread::spawn(move || {
            let sent = if gate.send() {
                command(&mut c, &format!("PAUSE {entry}")).map(Some)
            } else {
                Ok(None)
            };
            let _ = tx.send(sent);
        });
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(Ok(Some(_))) => Ok(started),
            Ok(Ok(None)) => Err(Drain::Late),
            Ok(Err(e)) => Err(Drain::Failed(e, None)),
            Err(_) => Err(Drain::Busy(started)),
        }
    }
}

/// A console session of one PgBouncer opened before a try of the cutover:
/// giving the try up resumes the entry through it in one round trip, with
/// no login in the way (a login on a loaded machine took most of a 150 ms
/// budget).
pub struct Resumer {
    c: Client,
    bouncer: Bouncer,
}

impl Resumer {
    /// One round trip on it (what a RESUME costs now, with no login), and
    /// how many server connections the entry has now (SHOW POOLS): a
    /// PAUSE closes them, and after the RESUME PgBouncer logs in anew for
    /// its queued clients.
    pub fn ping(&mut self) -> Result<(Duration, u32), String> {
        let started = Instant::now();
        let servers: u32 = command(&mut self.c, "SHOW POOLS")?
            .iter()
            .filter(|r| r.named("database") == Some(self.bouncer.entry.as_str()))
            .flat_map(|r| {
                ["sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login"]
                    .map(|n| r.named(n).and_then(|v| v.parse::<u32>().ok()).unwrap_or(0))
            })
            .sum();
        Ok((started.elapsed(), servers))
    }

    /// After a try of the cutover given up, the entry still pointing where
    /// it did before the try: a bare RESUME, at once (neither the map's
    /// lock nor the commands around it; the retry delay a PAUSE may have
    /// left is lifted after, `Bouncers::unstick`). `paused`: whether the
    /// entry is known to be paused (its PAUSE sent); else it is read first,
    /// so that PgBouncer logs no RESUME of an entry not paused. When
    /// PgBouncer acknowledged it, None if the entry was not paused.
    pub fn resume(&mut self, paused: bool) -> Result<Option<Instant>, String> {
        if !paused && !self.bouncer.show(&mut self.c)?.3 {
            return Ok(None);
        }
        match command(&mut self.c, &format!("RESUME {}", self.bouncer.entry)) {
            Ok(_) => Ok(Some(Instant::now())),
            // Not paused (PgBouncer says "database ... is not paused"): the
            // same as resume_acked's None, told by reading it.
            Err(_) if !self.bouncer.show(&mut self.c)?.3 => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Resumer {
    /// After a RESUME acknowledged at `resumed`: when every client of the
    /// entry that waited through the PAUSE has a server connection, that
    /// is when the oldest client still waiting (SHOW POOLS' maxwait) came
    /// after the RESUME, or none waits. A PAUSE closes the entry's server
    /// connections: the clients queued behind it wait for new ones after
    /// the RESUME too, which is the end of their wait. (Not cl_waiting
    /// alone: with more clients than servers some always wait.) Polled
    /// every 2 ms, SERVED_LOOK at most; then the time said is that bound.
    pub fn served(&mut self, resumed: Instant) -> Result<Instant, String> {
        loop {
            let now = Instant::now();
            let since = now.saturating_duration_since(resumed);
            let oldest = command(&mut self.c, "SHOW POOLS")?
                .iter()
                .filter(|r| r.named("database") == Some(self.bouncer.entry.as_str()))
                .map(|r| {
                    let n = |c: &str| r.named(c).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                    if n("cl_waiting") == 0 {
                        Duration::ZERO
                    } else {
                        Duration::from_secs(n("maxwait")) + Duration::from_micros(n("maxwait_us"))
                    }
                })
                .max()
                .unwrap_or(Duration::ZERO);
            if oldest < since || since >= SERVED_LOOK {
                return Ok(now);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// How long after a RESUME `Resumer::served` looks at the queue at most.
const SERVED_LOOK: Duration = Duration::from_millis(500);

/// After RESUMEs acknowledged at `resumed` (None: none was paused):
/// `Resumer::served` on each PgBouncer's, when the last one's clients had a
/// server again.
pub fn served_after(
    resumers: &mut [Resumer],
    resumed: Option<Instant>,
) -> Result<Option<Instant>, String> {
    let Some(at) = resumed else {
        return Ok(None);
    };
    let mut last = at;
    for r in resumers {
        last = last.max(r.served(at)?);
    }
    Ok(Some(last))
}

/// `Resumer::resume` on each PgBouncer's: when the last acknowledged it
/// (None if none was paused); each is tried, and what failed said.
/// `sent`: per PgBouncer, in order, whether the try sent it a PAUSE (then
/// resumed without reading it first; one not sent is left alone); None:
/// each is read first, and resumed if paused.
pub fn resume_each(
    resumers: &mut [Resumer],
    sent: Option<&[bool]>,
) -> Result<Option<Instant>, String> {
    let mut failed = Vec::new();
    let mut last = None;
    for (i, r) in resumers.iter_mut().enumerate() {
        // (One the try never sent a PAUSE to is left alone: a RESUME of an
        // entry not paused is an error in PgBouncer's log.)
        let paused = match sent {
            Some(sent) if !sent.get(i).copied().unwrap_or(true) => continue,
            Some(_) => true,
            None => false,
        };
        match r.resume(paused) {
            Ok(at) => last = last.max(at),
            Err(e) => failed.push(format!(
                "PgBouncer's console ({}): {e}",
                r.bouncer.admin.label
            )),
        }
    }
    if failed.is_empty() {
        Ok(last)
    } else {
        Err(failed.join("; "))
    }
}

impl Bouncer {
    /// Checks the entry's target before anything is made: a string
    /// PgBouncer reads from a file others may read, so no password.
    pub fn check(target: &str) -> Result<(), String> {
        if target.contains(|c: char| c.is_control() || c == '\'' || c == '\\') {
            return Err(format!(
                "PgBouncer's target {target:?}: one line of key=value pairs without quotes or backslashes (PgBouncer does not read libpq's quoting)"
            ));
        }
        conninfo::parse_foreign(target).map(|_| ()).map_err(|e| e.0)
    }

    /// The entry as PgBouncer has it: host, port, database and whether it
    /// is paused.
    fn show(&self, c: &mut Client) -> Result<(String, String, String, bool), String> {
        for r in command(c, "SHOW DATABASES")? {
            if r.named("name") == Some(&self.entry) {
                let col = |n: &str| r.named(n).unwrap_or("").to_string();
                return Ok((
                    col("host"),
                    col("port"),
                    col("database"),
                    col("paused") == "1",
                ));
            }
        }
        Err(format!(
            "PgBouncer has no entry {} (its [databases] in {}, included by pgbouncer.ini)",
            self.entry,
            self.map.display()
        ))
    }

    pub fn paused(&self) -> Result<bool, String> {
        let mut c = console(&self.admin)?;
        Ok(self.show(&mut c)?.3)
    }

    /// Resumes the entry if it is paused: when PgBouncer acknowledged the
    /// RESUME (the end of the clients' wait), None if it was not paused.
    pub fn resume_acked(&self) -> Result<Option<Instant>, String> {
        // Without the lock (the map's directory not writable) the entry is
        // resumed all the same: its clients matter more than the set-back.
        let _lock = self.lock_map().ok();
        let mut c = console(&self.admin)?;
        if self.show(&mut c)?.3 {
            return self.resume(&mut c).map(Some);
        }
        Ok(None)
    }

    /// A console session opened now, for a try of the cutover to resume
    /// the entry through at once when it gives up (`Resumer`).
    pub fn resumer(&self) -> Result<Resumer, String> {
        Ok(Resumer {
            c: console(&self.admin)?,
            bouncer: self.clone(),
        })
    }

    /// RESUMEs the entry, with PgBouncer's retry delay after a failed
    /// login lifted (`SET server_login_retry = 0`, PgBouncer-wide) until
    /// every pool of the entry with a client waiting has a server
    /// connection that logged in after the RESUME, for SERVED_WITHIN at
    /// most; then set back to what it was. Callers hold the map's lock, so
    /// that two moves never take each other's 0 for the value to set back.
    /// Once the RESUME is sent, nothing here fails the move: what went
    /// wrong after it is printed.
    /// Returns when PgBouncer acknowledged the RESUME: the end of the
    /// clients' wait (what follows is the watch of the pools).
    fn resume(&self, c: &mut Client) -> Result<Instant, String> {
        // A PgBouncer that does not let the delay be read or changed is
        // resumed all the same, as before.
        let lifted = login_retry(c).ok().and_then(|retry| {
            let before = self.servers(c).ok()?;
            set_login_retry(c, "0").ok()?;
            Some((retry, before))
        });
        let resumed = command(c, &format!("RESUME {}", self.entry));
        let at = Instant::now();
        let Some((retry, before)) = lifted else {
            return resumed.map(|_| at);
        };
        let served = match &resumed {
            Ok(_) => self.until_served(c, &before),
            Err(_) => Ok(true),
        };
        let restored = set_login_retry(c, &retry);
        if let Err(e) = resumed {
            return Err(match restored {
                Ok(_) => e,
                Err(r) => format!("{e}; and setting server_login_retry back to {retry}: {r}"),
            });
        }
        match (served, restored) {
            (_, Err(e)) => println!(
                "   WARNING:  PgBouncer's server_login_retry is still 0 after the RESUME of {} ({e}): set it back to {retry} (RELOAD reads pgbouncer.ini again)",
                self.entry
            ),
            (Ok(false), _) => println!(
                "   PgBouncer's entry {} still has clients waiting and no server connection opened since its RESUME, {} s after it: its pool is full, or its server refuses PgBouncer's logins (PgBouncer's log says)",
                self.entry,
                SERVED_WITHIN.as_secs()
            ),
            (Err(e), _) => println!(
                "   PgBouncer's entry {} resumed; its pools could not be watched after: {e}",
                self.entry
            ),
            (Ok(true), Ok(_)) => {}
        }
        Ok(at)
    }

    /// After a bare RESUME (a try given up): when the entry still has
    /// clients waiting and no server connection logged in, a PAUSE cut a
    /// login short and PgBouncer waits server_login_retry before the next
    /// (`resume`): the delay is lifted, as `resume` lifts it, until they
    /// are served, and set back. Under the map's lock, which `resume`
    /// takes too.
    pub fn unstick(&self) -> Result<(), String> {
        let _lock = self.lock_map().ok();
        let mut c = console(&self.admin)?;
        let waiting: u64 = command(&mut c, "SHOW POOLS")?
            .iter()
            .filter(|r| r.named("database") == Some(self.entry.as_str()))
            .map(|r| {
                r.named("cl_waiting")
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum();
        if waiting == 0 || !self.servers(&mut c)?.is_empty() {
            return Ok(());
        }
        let retry = login_retry(&mut c)?;
        set_login_retry(&mut c, "0")?;
        let served = self.until_served(&mut c, &[]);
        set_login_retry(&mut c, &retry)
            .map_err(|e| format!("setting server_login_retry back to {retry}: {e}"))?;
        match served? {
            true => Ok(()),
            false => Err(format!(
                "PgBouncer's entry {} still has clients waiting and no server connection, {} s after its RESUME",
                self.entry,
                SERVED_WITHIN.as_secs()
            )),
        }
    }

    /// The entry's server connections that are logged in: in SHOW
    /// SERVERS' states `idle`, `used`, `tested` or `active` (one logging in
    /// is `new`; `active_cancel` only carries a cancel request).
    fn servers(&self, c: &mut Client) -> Result<Vec<Server>, String> {
        Ok(command(c, "SHOW SERVERS")?
            .iter()
            .filter(|r| r.named("database") == Some(self.entry.as_str()))
            .filter(|r| {
                matches!(
                    r.named("state"),
                    Some("idle" | "used" | "tested" | "active")
                )
            })
            .map(|r| {
                let id = ["ptr", "remote_pid"].map(|n| r.named(n).unwrap_or(""));
                (pool_of(r), id.join(" "))
            })
            .collect())
    }

    /// Waits until every pool of the entry with a client waiting has a
    /// server connection logged in that `before` did not list: PgBouncer
    /// clears a pool's failed-login mark when a login succeeds, in the
    /// same step that takes the connection out of `new` (a server kept
    /// through a PAUSE given up, in its long transaction, does not count).
    /// True, or false after SERVED_WITHIN.
    fn until_served(&self, c: &mut Client, before: &[Server]) -> Result<bool, String> {
        let started = Instant::now();
        loop {
            let waiting: Vec<Pool> = command(c, "SHOW POOLS")?
                .iter()
                .filter(|r| r.named("database") == Some(self.entry.as_str()))
                .filter(|r| {
                    r.named("cl_waiting")
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0)
                        > 0
                })
                .map(pool_of)
                .collect();
            let fresh: Vec<Server> = self
                .servers(c)?
                .into_iter()
                .filter(|s| !before.contains(s))
                .collect();
            if waiting
                .iter()
                .all(|p| fresh.iter().any(|(pool, _)| pool == p))
            {
                return Ok(true);
            }
            if started.elapsed() >= SERVED_WITHIN {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// An I/O error on the map file or beside it, said with the map's path.
    fn map_error(&self, e: std::io::Error) -> String {
        format!("PgBouncer's map {}: {e}", self.map.display())
    }

    /// The lock that moves of different shards take on the map, from
    /// reading it to the end of the RESUME.
    /// Opened for reading when it exists: a lock file another user made
    /// (a run as root) serves a run as postgres too (flock needs no write
    /// access; 0.9.0 opened it for writing, and failed after a cutover).
    fn lock_map(&self) -> Result<std::fs::File, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let said = |e| self.map_error(e);
        let path = self.map.with_extension("insta-id-lock");
        // A regular file only: not a symbolic link another user planted,
        // nor a FIFO, which an open would wait on.
        const O_NONBLOCK: i32 = 0o4000;
        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
            return Err(format!(
                "{} is not a regular file: remove it",
                path.display()
            ));
        }
        let lock = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(O_NONBLOCK)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .open(&path)
                .map_err(said)?,
            Err(e) => return Err(said(e)),
        };
        if !lock.metadata().map_err(said)?.is_file() {
            return Err(format!(
                "{} is not a regular file: remove it",
                path.display()
            ));
        }
        // Held by another move for a moment (its RESUME); a process that
        // keeps it must not hold this one up for ever.
        let until = Instant::now() + LOCK_WITHIN;
        loop {
            match lock.try_lock() {
                Ok(()) => return Ok(lock),
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(format!(
                        "{} is locked by another process for {} s (another move's? fuser names it)",
                        path.display(),
                        LOCK_WITHIN.as_secs()
                    ))
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(said(e)),
            }
        }
    }

    /// A console session opened now, for a try of the cutover to PAUSE the
    /// entry through (`Pauser`): no login inside the try's budget.
    pub fn pauser(&self) -> Result<Pauser, String> {
        Ok(Pauser {
            c: console(&self.admin)?,
            entry: self.entry.clone(),
            gate: Gate::default(),
        })
    }

    /// The backend process IDs of the entry's server connections that are
    /// in a transaction (SHOW SERVERS' `active`: linked to a client), which
    /// a PAUSE waits for.
    pub fn busy_servers(&self) -> Result<Vec<i32>, String> {
        let mut c = console(&self.admin)?;
        Ok(command(&mut c, "SHOW SERVERS")?
            .iter()
            .filter(|r| {
                r.named("database") == Some(&self.entry) && r.named("state") == Some("active")
            })
            .filter_map(|r| r.named("remote_pid")?.parse().ok())
            .collect())
    }

    /// Before a move pauses anything: the map file can be read, and a file
    /// can be made beside it (what point_and_resume needs after the
    /// cutover, when a failure leaves the entry paused).
    pub fn preflight(&self) -> Result<(), String> {
        let mut c = console(&self.admin)?;
        if !admin(&mut c)? {
            return Err(format!(
                "PgBouncer's console ({}): its user {} is not one of PgBouncer's admin_users, and a move needs PAUSE, RELOAD and RESUME: add it to admin_users, or give --pgbouncer a user that is",
                self.admin.label,
                printable(&c.user())
            ));
        }
        let said = |e| self.map_error(e);
        std::fs::read_to_string(&self.map).map_err(said)?;
        drop(self.lock_map()?);
        let probe = self
            .map
            .with_extension(format!("insta-id-probe-{}", std::process::id()));
        let _ = std::fs::remove_file(&probe);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .map_err(said)?;
        std::fs::remove_file(&probe).map_err(said)
    }

    /// Points the entry at the new server (the map file replaced
    /// atomically), reloads PgBouncer, checks that it took the new target,
    /// and resumes the entry if it is paused: when it was resumed.
    pub fn point_and_resume(&self) -> Result<Option<Instant>, String> {
        let said = |e| self.map_error(e);
        // Moves of other shards rewrite the same file: one at a time, from
        // reading it to the RESUME.
        let _lock = self.lock_map()?;
        let old = std::fs::read_to_string(&self.map).map_err(said)?;
        let new = rewritten(&old, &self.entry, &self.target);
        if new != old {
            self.replace_map(&new).map_err(said)?;
        }
        let mut c = console(&self.admin)?;
        command(&mut c, "RELOAD")?;
        let (host, port, database, paused) = self.show(&mut c)?;
        let want = conninfo::parse_foreign(&self.target).map_err(|e| e.0)?;
        if let Some((k, v)) = [("host", &host), ("port", &port), ("dbname", &database)]
            .into_iter()
            .find(|(k, v)| want.get(*k).is_some_and(|w| w != *v))
        {
            // Not resumed: resumed, its clients would reach the old server,
            // where the shard is gone. They wait (query_wait_timeout) for
            // the run that fixes this.
            return Err(format!(
                "PgBouncer did not take the new target of {} after RELOAD ({k} is {}): is {} included by pgbouncer.ini? The entry stays paused: fix it and run the move again",
                self.entry,
                printable(v),
                self.map.display()
            ));
        }
        if paused {
            return self.resume(&mut c).map(Some);
        }
        Ok(None)
    }

    /// Replaces the map file with `text`: a new file of its own, with the
    /// old one's owner and mode, made durable, then renamed over it.
    fn replace_map(&self, text: &str) -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&self.map)?;
        let tmp = self
            .map
            .with_extension(format!("insta-id-{}", std::process::id()));
        // (One a killed run of the same process ID left.)
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        let written = (|| {
            // The old file's owner, where this user may give it (root); else
            // this user's, with the old mode: the check after RELOAD says
            // whether PgBouncer reads it.
            let _ = std::os::unix::fs::fchown(&f, Some(meta.uid()), Some(meta.gid()));
            f.set_permissions(meta.permissions())?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.map)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written?;
        let dir = self.map.parent().filter(|d| !d.as_os_str().is_empty());
        std::fs::File::open(dir.unwrap_or(std::path::Path::new(".")))?.sync_all()
    }
}

/// The PgBouncers in front of the fleet (several, for capacity or for
/// availability), driven as one: each has the shard's entry, and a move
/// pauses it on all, and points and resumes it on all.
#[derive(Clone)]
pub struct Bouncers {
    pub all: Vec<Bouncer>,
    /// shard<N>
    pub entry: String,
}

impl Bouncers {
    /// Whether any of them has the entry paused.
    pub fn paused(&self) -> Result<bool, String> {
        for b in &self.all {
            if b.paused()? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Resumes the entry wherever it is paused; every PgBouncer is tried,
    /// and what failed is said for each.
    pub fn resume_if_paused(&self) -> Result<(), String> {
        self.resume_acked().map(|_| ())
    }

    /// As resume_if_paused: when the last PgBouncer acknowledged its RESUME
    /// (None if none was paused).
    pub fn resume_acked(&self) -> Result<Option<Instant>, String> {
        let mut failed = Vec::new();
        let mut last = None;
        for b in &self.all {
            match b.resume_acked() {
                Ok(at) => last = last.max(at),
                Err(e) => failed.push(e),
            }
        }
        if failed.is_empty() {
            Ok(last)
        } else {
            Err(failed.join("; "))
        }
    }

    /// A console session of each PgBouncer, opened now (`Resumer`).
    pub fn resumers(&self) -> Result<Vec<Resumer>, String> {
        self.all.iter().map(Bouncer::resumer).collect()
    }

    /// Bouncer::unstick on every PgBouncer; what failed is said, for each.
    pub fn unstick(&self) -> Result<(), String> {
        let failed: Vec<String> = self.all.iter().filter_map(|b| b.unstick().err()).collect();
        match failed.is_empty() {
            true => Ok(()),
            false => Err(failed.join("; ")),
        }
    }

    /// A console session of each PgBouncer, opened now (`Pauser`).
    pub fn pausers(&self) -> Result<Vec<Pauser>, String> {
        self.all.iter().map(Bouncer::pauser).collect()
    }

    /// PAUSEs the entry on every PgBouncer at once, through `pausers`, as
    /// `Pauser::pause` does. Returns when the first PAUSE was sent; when
    /// one was not drained in time, came too late or failed, why (a
    /// failure first): the caller resumes the entry on all, so that none
    /// keeps clients waiting for a cutover that will not come.
    pub fn pause(pausers: Vec<Pauser>, send_by: Instant, until: Instant) -> Result<Instant, Drain> {
        let tries: Vec<Result<Instant, Drain>> = std::thread::scope(|s| {
            let handles: Vec<_> = pausers
                .into_iter()
                .map(|p| s.spawn(move || p.pause(send_by, until)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Drain::Failed("a PAUSE's thread panicked".into(), None))
                    })
                })
                .collect()
        });
        combined(tries)
    }

    /// The backend process IDs of the entry's server connections in a
    /// transaction, on every PgBouncer.
    pub fn busy_servers(&self) -> Result<Vec<i32>, String> {
        let mut pids = Vec::new();
        for b in &self.all {
            pids.extend(b.busy_servers()?);
        }
        Ok(pids)
    }

    pub fn preflight(&self) -> Result<(), String> {
        self.all.iter().try_for_each(Bouncer::preflight)
    }

    /// Points the entry at its new target on every PgBouncer and resumes
    /// it, one after another (several may share one map file: the second
    /// finds it rewritten). Each is tried; what failed is said for each,
    /// and that entry stays paused for a re-run. Returns when the last
    /// was resumed.
    pub fn point_and_resume(&self) -> Result<Option<Instant>, String> {
        let mut failed = Vec::new();
        let mut last = None;
        for b in &self.all {
            match b.point_and_resume() {
                Ok(at) => last = last.max(at),
                Err(e) => failed.push(format!("{}: {e}", b.admin.label)),
            }
        }
        if failed.is_empty() {
            Ok(last)
        } else {
            Err(failed.join("\n"))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn pauses_on_several_pgbouncers_come_to_one() {
        use super::{combined, Drain};
        let t0 = Instant::now();
        let (t1, t2) = (t0 + Duration::from_millis(1), t0 + Duration::from_millis(2));
        let said = |r: Result<Instant, Drain>| match r {
            Ok(at) => format!("ok {:?}", at - t0),
            Err(Drain::Busy(at)) => format!("busy {:?}", at - t0),
            Err(Drain::Partly(at)) => format!("partly {:?}", at - t0),
            Err(Drain::Late) => "late".into(),
            Err(Drain::Failed(e, sent)) => format!(
                "failed {e}{}",
                sent.map_or(String::new(), |at| format!(", sent {:?}", at - t0))
            ),
        };
        assert_eq!(said(combined(vec![Ok(t2), Ok(t1)])), "ok 1ms");
        // Sent to one, too late for the other: paused, from the first.
        assert_eq!(said(combined(vec![Ok(t2), Err(Drain::Late)])), "partly 2ms");
        assert_eq!(
            said(combined(vec![Err(Drain::Late), Err(Drain::Late)])),
            "late"
        );
        assert_eq!(
            said(combined(vec![
                Err(Drain::Busy(t2)),
                Ok(t1),
                Err(Drain::Late)
            ])),
            "busy 1ms"
        );
        assert_eq!(
            said(combined(vec![
                Err(Drain::Busy(t1)),
                Err(Drain::Failed("x".into(), None))
            ])),
            "failed x, sent 1ms"
        );
        assert_eq!(
            said(combined(vec![
                Err(Drain::Late),
                Err(Drain::Failed("x".into(), None))
            ])),
            "failed x"
        );
    }

    use super::*;

    #[test]
    fn the_map_changes_one_entry() {
        let map = "[databases]\n; shard7 = old comment\nshard7 = host=a dbname=app\nshard70=host=a dbname=app\n";
        assert_eq!(
            rewritten(map, "shard7", "host=b dbname=app"),
            "[databases]\n; shard7 = old comment\nshard7 = host=b dbname=app\nshard70=host=a dbname=app\n"
        );
        assert_eq!(
            rewritten("[databases]", "shard9", "host=b"),
            "[databases]\nshard9 = host=b\n"
        );
        assert_eq!(
            rewritten(
                "shard9 = host=a\nx = y\nshard9=host=c\n",
                "shard9",
                "host=b"
            ),
            "shard9 = host=b\nx = y\n"
        );
    }

    #[test]
    fn an_admin_is_named_in_admin_users() {
        assert!(named_in("pgbouncer, mover", "mover"));
        assert!(named_in("mover", "mover"));
        assert!(named_in("a,mover b", "b"));
        assert!(!named_in("movers", "mover"));
        assert!(!named_in("", "mover"));
        assert!(!named_in("Mover", "mover"));
    }

    #[test]
    fn a_target_is_one_line_without_a_password() {
        assert!(Bouncer::check("host=b port=5432 dbname=app").is_ok());
        assert!(Bouncer::check("host=b password=x").is_err());
        assert!(Bouncer::check("host=b\nshard1 = host=evil").is_err());
        assert!(Bouncer::check("host=b dbname='my db'").is_err());
    }
}
