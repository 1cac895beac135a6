//! The durable high-water mark: what the guard remembers across restarts.
//!
//! The guard keeps each sequence's last millisecond in memory, which a
//! restart empties. A server whose clock is behind after the restart (set
//! back while it was down, a VM restored from a snapshot, NTP correcting a
//! clock that ran fast) would then re-enter milliseconds it already used and
//! repeat IDs. So no ID of millisecond `m` leaves next_id before a mark
//! `>= m` is on disk, and at start every millisecond up to the mark counts as
//! used: IDs continue above it (within `insta_id.max_lead` of the clock,
//! waiting for it past that) until the clock passes it.
//!
//! The mark is one number for the server (the guard works in ms since 1970,
//! whatever the epoch), kept in the file `insta_id.mark` in the data
//! directory: written and fsync'd (unless `fsync = off`) by the backend that
//! needs it, so it works without preloading, where no hook runs at shutdown
//! or checkpoint. It is reserved `STEP_MS` ahead and renewed when less than
//! `RENEW_MS` is left, so a server issuing IDs without pause writes it about
//! 1000 / (STEP_MS - RENEW_MS) times a second, not once per ID; the price is
//! that right after a restart quicker than `STEP_MS` IDs may start up to
//! `STEP_MS` ahead of the clock. Writers take an exclusive `flock` on the
//! file, so sessions and servers never lower it.
//!
//! The per-session guard (15 and 16 without preloading) has no memory shared
//! by its sessions, so each new session must start above what earlier ones
//! issued. The mark is an upper bound of that, but a loose one: up to
//! `STEP_MS` above the last ID. A session starting there would issue ahead
//! of the clock and reserve `STEP_MS` above that, and the next session again
//! (0.8.0 ran 160 ms further ahead with every new session, without bound).
//! So the sessions of a server's run (`Run`, changed by every start and crash
//! restart) keep a tighter bound together in the file `insta_id.sessions`
//! (`Sessions`): every millisecond a session issues in ahead of its clock is
//! claimed there first (`claim`), so no two sessions issue ahead in the same
//! millisecond; an ending session adds its last millisecond. Every other ID
//! was issued on the clock, so a later session's clock is past it, unless the
//! clock stepped back: the record keeps the gap between the wall clock and
//! the monotonic one, which a step back shrinks. A new session starts above
//! the record when the run is the same and the clock did not step back, and
//! above the mark otherwise (`session_floor`).
//!
//! This module holds the decisions and the file formats as pure Rust; the file
//! I/O is `MarkFile`, and `guard_store` wires both to the guard's table.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

/// How far ahead of the millisecond being issued a mark is reserved.
pub const STEP_MS: i64 = 200;
/// Renew the mark when it is less than this far ahead of an issued ms.
pub const RENEW_MS: i64 = 100;

/// The file, relative to the data directory (a backend's working directory).
pub const FILE_NAME: &str = "insta_id.mark";

/// What covering millisecond `ms` needs, given the durable mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The mark covers `ms` with room to spare.
    Covered,
    /// The mark covers `ms`, but will not for long: renew it to this value
    /// if no other session is already doing so.
    Ahead(i64),
    /// The mark is below `ms`: it must be at least `ms` on disk (reserve
    /// this value) before the ID may be returned.
    Now(i64),
}

#[inline]
pub fn need(ms: i64, durable: i64) -> Need {
    if ms.saturating_add(RENEW_MS) <= durable {
        Need::Covered
    } else if ms <= durable {
        Need::Ahead(ms.saturating_add(STEP_MS))
    } else {
        Need::Now(ms.saturating_add(STEP_MS))
    }
}

/// How far beyond `insta_id.max_lead` ahead of the server's clock
/// `raise_high_water_mark` may put the mark, by default: a move carries the
/// old server's mark (at most its max_lead ahead of its clock) to a server
/// whose clock may be behind, and its cutover waits for that clock to pass
/// the mark within the pause budget, so a minute covers every move that can
/// succeed. A mark further ahead is likely a typo, and every `next_id` of
/// the server would wait for the clock to come within max_lead of it.
pub const DEFAULT_RAISE_SLACK_MS: i64 = 60_000;
/// The most `slack` the caller may give: an hour (0.8.0's fixed bound).
pub const MAX_RAISE_SLACK_MS: i64 = 3_600_000;

/// Why a raise is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum RaiseRefused {
    /// The slack given is negative or more than MAX_RAISE_SLACK_MS.
    Slack,
    /// The mark would be further ahead of the clock than max_lead + slack.
    TooFarAhead { bound_ms: i64 },
}

/// Whether the mark may be raised to `ms` on a server whose clock reads
/// `now`, with `insta_id.max_lead` = `max_lead` and the caller's `slack`
/// (all in ms).
pub fn may_raise_to(ms: i64, now: i64, max_lead: i64, slack: i64) -> Result<(), RaiseRefused> {
    if !(0..=MAX_RAISE_SLACK_MS).contains(&slack) {
        return Err(RaiseRefused::Slack);
    }
    let bound_ms = max_lead.saturating_add(slack);
    if ms > now.saturating_add(bound_ms) {
        return Err(RaiseRefused::TooFarAhead { bound_ms });
    }
    Ok(())
}

/// The file's content: a magic, the mark, and a checksum of both, 24 bytes
/// written in one `pwrite` at offset 0 (a sector write, atomic as
/// pg_control's own writes are assumed to be).
pub const RECORD_LEN: usize = 24;
const MAGIC: [u8; 8] = *b"INSTAIDM";

pub fn encode(mark: i64) -> [u8; RECORD_LEN] {
    let mut rec = [0u8; RECORD_LEN];
    rec[..8].copy_from_slice(&MAGIC);
    rec[8..16].copy_from_slice(&mark.to_le_bytes());
    let sum = checksum(&rec[..16]);
    rec[16..].copy_from_slice(&sum.to_le_bytes());
    rec
}

/// The damaged file's content, for the error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged(pub Vec<u8>);

/// `Ok(None)`: an empty file (nothing issued yet).
pub fn decode(bytes: &[u8]) -> Result<Option<i64>, Damaged> {
    if bytes.is_empty() {
        return Ok(None);
    }
    if bytes.len() != RECORD_LEN || bytes[..8] != MAGIC {
        return Err(Damaged(bytes.to_vec()));
    }
    let sum = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    if sum != checksum(&bytes[..16]) {
        return Err(Damaged(bytes.to_vec()));
    }
    Ok(Some(i64::from_le_bytes(bytes[8..16].try_into().unwrap())))
}

/// FNV-1a: enough to tell a torn or foreign file from ours.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// One run of a server: from a start (or a crash restart, which builds new
/// shared memory) to its stop. Sessions of one run saw the same clock history
/// and their exits were all observed; a new run's first session cannot know
/// what the last one's sessions issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// The postmaster's start time (timestamptz).
    pub started: i64,
    /// Drawn anew whenever shared memory is built: at every start and crash
    /// restart.
    pub shmem: u64,
}

/// What the per-session guard's sessions of a run share (`insta_id.sessions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sessions {
    pub run: Run,
    /// At or above every millisecond a session of the run issued in ahead of
    /// its clock, and the last of every session that ended.
    pub floor_ms: i64,
    /// The wall clock minus the monotonic clock (µs) when the floor was last
    /// known to bound every ID of the run: a step back of the wall clock
    /// since makes it larger than the gap now.
    pub offset_us: i64,
}

/// A step back smaller than this goes unnoticed: the wall clock's reading
/// itself is whole microseconds, and slewing moves the gap by that much in
/// seconds. (A step back noticed when there was none costs one session a
/// start above the mark.)
pub const STEP_BACK_TOLERANCE_US: i64 = 1_000;

/// The file holding `Sessions`, beside the mark. Not fsync'd: it is only
/// ever trusted within the run that wrote it, which a machine crash ends.
pub const SESSIONS_FILE_NAME: &str = "insta_id.sessions";
pub const SESSIONS_LEN: usize = 48;
const SESSIONS_MAGIC: [u8; 8] = *b"INSTAIDT";

pub fn encode_sessions(r: Sessions) -> [u8; SESSIONS_LEN] {
    let mut rec = [0u8; SESSIONS_LEN];
    rec[..8].copy_from_slice(&SESSIONS_MAGIC);
    rec[8..16].copy_from_slice(&r.run.started.to_le_bytes());
    rec[16..24].copy_from_slice(&r.run.shmem.to_le_bytes());
    rec[24..32].copy_from_slice(&r.floor_ms.to_le_bytes());
    rec[32..40].copy_from_slice(&r.offset_us.to_le_bytes());
    let sum = checksum(&rec[..40]);
    rec[40..].copy_from_slice(&sum.to_le_bytes());
    rec
}

/// `None` for an empty, torn or foreign file: a session then starts above
/// the mark, which is always safe.
pub fn decode_sessions(bytes: &[u8]) -> Option<Sessions> {
    if bytes.len() != SESSIONS_LEN || bytes[..8] != SESSIONS_MAGIC {
        return None;
    }
    let word = |i: usize| <[u8; 8]>::try_from(&bytes[i..i + 8]).unwrap();
    if u64::from_le_bytes(word(40)) != checksum(&bytes[..40]) {
        return None;
    }
    Some(Sessions {
        run: Run {
            started: i64::from_le_bytes(word(8)),
            shmem: u64::from_le_bytes(word(16)),
        },
        floor_ms: i64::from_le_bytes(word(24)),
        offset_us: i64::from_le_bytes(word(32)),
    })
}

/// Where a new session of the per-session guard starts (every millisecond up
/// to the floor counts as used), and the record to write first, if any.
/// - Same run, no step back since the record's gap: above the record.
/// - A new run (a restart, perhaps with the clock set back; a crash restart,
///   after which sessions may have ended without adding to the record), or a
///   step back: above the mark, which bounds every ID issued so far (no ID
///   leaves before the mark covers it), and the record restarts from there
///   with today's gap, so the run's later sessions start there too rather
///   than above another reservation.
/// - The same run with the gap grown (the clock stepped forward): the gap is
///   recorded, so that a step back to where it was is noticed.
pub fn session_floor(
    mark: Option<i64>,
    rec: Option<Sessions>,
    run: Run,
    offset_us: i64,
) -> (i64, Option<Sessions>) {
    match rec {
        Some(r) if r.run == run && offset_us + STEP_BACK_TOLERANCE_US >= r.offset_us => {
            let grown = offset_us > r.offset_us + STEP_BACK_TOLERANCE_US;
            (r.floor_ms, grown.then_some(Sessions { offset_us, ..r }))
        }
        _ => {
            let same_run = rec
                .filter(|r| r.run == run)
                .map_or(i64::MIN, |r| r.floor_ms);
            let floor = mark.unwrap_or(i64::MIN).max(same_run);
            (
                floor,
                Some(Sessions {
                    run,
                    floor_ms: floor,
                    offset_us,
                }),
            )
        }
    }
}

/// This run's record, or a fresh one bounding nothing yet (none, damaged, or
/// of another run, which `session_floor` rewrites at a run's first session).
fn of_run(rec: Option<Sessions>, run: Run, offset_us: i64) -> Sessions {
    rec.filter(|r| r.run == run).unwrap_or(Sessions {
        run,
        floor_ms: i64::MIN,
        offset_us,
    })
}

/// A session about to issue an ID in `ms`, ahead of its clock, claims it:
/// `Ok` with the record to write, or `Err(taken)` when another session of
/// the run has claimed up to `taken >= ms` already (issue above it instead).
pub fn claim(rec: Option<Sessions>, run: Run, ms: i64, offset_us: i64) -> Result<Sessions, i64> {
    let r = of_run(rec, run, offset_us);
    if r.floor_ms >= ms {
        Err(r.floor_ms)
    } else {
        Ok(Sessions { floor_ms: ms, ..r })
    }
}

/// What an ending session leaves in the record: its last millisecond.
pub fn ended(rec: Option<Sessions>, run: Run, last_ms: i64, offset_us: i64) -> Sessions {
    let r = of_run(rec, run, offset_us);
    Sessions {
        floor_ms: r.floor_ms.max(last_ms),
        ..r
    }
}

/// The mark as the server's sessions share it (in the guard's shared memory,
/// or in a session's own memory with the per-session guard).
#[repr(C)]
pub struct MarkState {
    /// Highest mark known to be on disk; i64::MIN before the first.
    durable: AtomicI64,
    /// 1 once the file was read and the guard's table raised to it.
    loaded: AtomicU32,
}

impl MarkState {
    pub const fn new() -> Self {
        MarkState {
            durable: AtomicI64::new(i64::MIN),
            loaded: AtomicU32::new(0),
        }
    }

    #[inline]
    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire) == 1
    }

    #[inline]
    pub fn durable(&self) -> i64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Whether a durable mark covers `ms` with room to spare (no renewal).
    #[inline]
    pub fn covers(&self, ms: i64) -> bool {
        need(ms, self.durable()) == Need::Covered
    }

    /// A durable mark set directly: for tests of the slots' table.
    #[cfg(test)]
    pub fn set_durable(&self, ms: i64) {
        self.durable.store(ms, Ordering::Release);
    }

    /// Forgets everything: the state of a slot being reused.
    pub fn reset(&self) {
        self.loaded.store(0, Ordering::Release);
        self.durable.store(i64::MIN, Ordering::Release);
    }

    /// First use after a (re)start: read the mark and hand it to
    /// `raise_floor` (which raises the guard's table to it, or with the
    /// per-session guard to `session_floor`) before anyone issues an ID; it
    /// runs under the store's lock. Returns the mark read, if this call did
    /// the loading.
    pub fn load<D: Durable>(
        &self,
        store: &D,
        raise_floor: impl FnOnce(Option<i64>) -> Result<(), MarkError>,
    ) -> Result<Option<i64>, MarkError> {
        if self.is_loaded() {
            return Ok(None);
        }
        let _lock = store.lock(true)?.expect("a blocking lock");
        if self.is_loaded() {
            return Ok(None);
        }
        let mark = store.read()?;
        if let Some(mark) = mark {
            // Left by a writer that failed half-way, or found after a crash
            // or a promotion: durable (and confirmed) here before trusted.
            store.confirm(mark)?;
        }
        raise_floor(mark)?;
        if let Some(mark) = mark {
            self.durable.fetch_max(mark, Ordering::AcqRel);
        }
        self.loaded.store(1, Ordering::Release);
        Ok(mark)
    }

    /// Makes sure `ms` is covered by a durable mark before an ID of it is
    /// returned; renews ahead when the mark runs low. `store` is only asked
    /// for then: the usual call is one atomic load and a compare.
    #[inline]
    pub fn cover<'s, D: Durable + 's>(
        &self,
        ms: i64,
        store: impl FnOnce() -> &'s D,
    ) -> Result<(), MarkError> {
        match need(ms, self.durable()) {
            Need::Covered => Ok(()),
            Need::Ahead(want) => self.reserve(store(), ms, want, false),
            Need::Now(want) => self.reserve(store(), ms, want, true),
        }
    }

    #[cold]
    fn reserve<D: Durable>(
        &self,
        store: &D,
        ms: i64,
        want: i64,
        must: bool,
    ) -> Result<(), MarkError> {
        // Renewing ahead is optional: when another session holds the lock it
        // is renewing already.
        let Some(_lock) = store.lock(must)? else {
            return Ok(());
        };
        let mark = match store.read()? {
            // Another session wrote it. Its writer made it durable before
            // using it, unless that writer failed half-way (an fsync error,
            // a cancelled wait for the standby): make it durable again.
            Some(stored) if need(ms, stored) == Need::Covered => {
                store.confirm(stored)?;
                stored
            }
            // Never below what this state knew to be durable (a restore that
            // lowered the stored value by hand).
            Some(stored) => store.write(want.max(stored).max(self.durable()), false)?,
            None => store.write(want.max(self.durable()), true)?,
        };
        self.durable.fetch_max(mark, Ordering::AcqRel);
        Ok(())
    }
}

/// Where a mark is kept durably: a file of the data directory (0.8.0, and a
/// database whose SQL predates 0.9.0), or a WAL-logged sequence of the
/// database (`mark_wal`). Writers hold `lock`, so sessions never lower it.
pub trait Durable {
    type Lock<'a>
    where
        Self: 'a;
    /// `must`: wait for the lock; else `None` when another session holds it.
    fn lock(&self, must: bool) -> Result<Option<Self::Lock<'_>>, MarkError>;
    /// The mark stored, `None` before the first.
    fn read(&self) -> Result<Option<i64>, MarkError>;
    /// Stores `mark` and makes it durable before returning it. `first`:
    /// nothing was stored before.
    fn write(&self, mark: i64, first: bool) -> Result<i64, MarkError>;
    /// Makes durable `stored`, which `read` returned, whoever wrote it.
    fn confirm(&self, stored: i64) -> Result<(), MarkError>;
}

impl Default for MarkState {
    fn default() -> Self {
        Self::new()
    }
}

/// Why the mark could not be read or written.
#[derive(Debug)]
pub enum MarkError {
    /// The file's name, what failed (open, read, ...), and why.
    Io(&'static str, &'static str, std::io::Error),
    Damaged(Damaged),
}

/// The mark file, opened once per backend.
pub struct MarkFile {
    file: File,
    name: &'static str,
    dir: std::path::PathBuf,
    /// Whether writes must be made durable (read at each write: PostgreSQL's
    /// `fsync` setting can change at reload).
    fsync: fn() -> bool,
}

/// Holds the file's exclusive lock; released on drop (and by the kernel if
/// the process dies).
pub struct Locked<'a>(&'a File);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

impl MarkFile {
    /// Opens (creating if missing) `FILE_NAME` in `dir`.
    pub fn open(dir: &std::path::Path, fsync: fn() -> bool) -> Result<Self, MarkError> {
        Self::open_named(dir, FILE_NAME, fsync)
    }

    /// Opens (creating if missing) `name` in `dir` (the mark, or `SESSIONS_FILE_NAME`).
    pub fn open_named(
        dir: &std::path::Path,
        name: &'static str,
        fsync: fn() -> bool,
    ) -> Result<Self, MarkError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join(name))
            .map_err(|e| MarkError::Io(name, "open", e))?;
        Ok(MarkFile {
            file,
            name,
            dir: dir.to_path_buf(),
            fsync,
        })
    }

    /// Opens `name` in `dir` for reading only: `None` when it does not exist.
    pub fn open_existing(
        dir: &std::path::Path,
        name: &'static str,
    ) -> Result<Option<Self>, MarkError> {
        match File::open(dir.join(name)) {
            Ok(file) => Ok(Some(MarkFile {
                file,
                name,
                dir: dir.to_path_buf(),
                fsync: || false,
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(MarkError::Io(name, "open", e)),
        }
    }

    /// `must`: wait for the lock; else `None` when another process holds it.
    pub fn lock(&self, must: bool) -> Result<Option<Locked<'_>>, MarkError> {
        if must {
            self.file
                .lock()
                .map_err(|e| MarkError::Io(self.name, "lock", e))?;
        } else {
            match self.file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(MarkError::Io(self.name, "lock", e))
                }
            }
        }
        Ok(Some(Locked(&self.file)))
    }

    pub fn read_mark(&self) -> Result<Option<i64>, MarkError> {
        let mut buf = [0u8; RECORD_LEN + 1];
        let len = self.read_into(&mut buf)?;
        decode(&buf[..len]).map_err(MarkError::Damaged)
    }

    /// The sessions' record (in a file opened as `SESSIONS_FILE_NAME`).
    pub fn read_sessions(&self) -> Result<Option<Sessions>, MarkError> {
        let mut buf = [0u8; SESSIONS_LEN + 1];
        let len = self.read_into(&mut buf)?;
        Ok(decode_sessions(&buf[..len]))
    }

    /// Writes the sessions' record; never fsync'd (see `Sessions`).
    pub fn write_sessions(&self, rec: Sessions) -> Result<(), MarkError> {
        self.file
            .write_all_at(&encode_sessions(rec), 0)
            .map_err(|e| MarkError::Io(self.name, "write", e))
    }

    /// Reads the file's first `buf.len()` bytes at most; returns how many.
    fn read_into(&self, buf: &mut [u8]) -> Result<usize, MarkError> {
        let mut len = 0;
        loop {
            match self.file.read_at(&mut buf[len..], len as u64) {
                Ok(0) => break,
                Ok(n) => {
                    len += n;
                    if len == buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(MarkError::Io(self.name, "read", e)),
            }
        }
        Ok(len)
    }

    fn sync(&self, directory_too: bool) -> Result<(), MarkError> {
        if (self.fsync)() {
            self.file
                .sync_data()
                .map_err(|e| MarkError::Io(self.name, "fsync", e))?;
            if directory_too {
                File::open(&self.dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| MarkError::Io(self.name, "fsync the directory of", e))?;
            }
        }
        Ok(())
    }
}

impl Durable for MarkFile {
    type Lock<'a> = Locked<'a>;

    fn lock(&self, must: bool) -> Result<Option<Locked<'_>>, MarkError> {
        MarkFile::lock(self, must)
    }

    fn read(&self) -> Result<Option<i64>, MarkError> {
        self.read_mark()
    }

    /// `first`: the file was empty (new), so its directory entry must be
    /// made durable too.
    fn write(&self, mark: i64, first: bool) -> Result<i64, MarkError> {
        self.file
            .write_all_at(&encode(mark), 0)
            .map_err(|e| MarkError::Io(self.name, "write", e))?;
        self.sync(first)?;
        Ok(mark)
    }

    /// A writer whose fsync failed left its mark in the page cache only,
    /// perhaps marked clean by the kernel (so a second fsync would succeed
    /// without writing it): write it again and sync, directory included.
    /// An fsync error PANICs unless `data_sync_retry` is on, as PostgreSQL
    /// does with its own files.
    fn confirm(&self, stored: i64) -> Result<(), MarkError> {
        self.write(stored, true).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raise_is_bounded_by_max_lead_and_the_slack() {
        let (now, lead) = (1_000_000, 1_000);
        let slack = DEFAULT_RAISE_SLACK_MS;
        assert_eq!(may_raise_to(now + lead + slack, now, lead, slack), Ok(()));
        assert_eq!(may_raise_to(now - 5, now, lead, slack), Ok(()));
        assert_eq!(
            may_raise_to(now + lead + slack + 1, now, lead, slack),
            Err(RaiseRefused::TooFarAhead {
                bound_ms: lead + slack
            })
        );
        // An hour's typo is refused by default, allowed when asked for.
        assert!(may_raise_to(now + 3_600_000, now, lead, slack).is_err());
        assert_eq!(
            may_raise_to(now + 3_600_000, now, lead, MAX_RAISE_SLACK_MS),
            Ok(())
        );
        assert_eq!(may_raise_to(now, now, lead, -1), Err(RaiseRefused::Slack));
        assert_eq!(
            may_raise_to(now, now, lead, MAX_RAISE_SLACK_MS + 1),
            Err(RaiseRefused::Slack)
        );
        assert_eq!(may_raise_to(i64::MAX, i64::MAX - 1, i64::MAX, 0), Ok(()));
        assert!(may_raise_to(i64::MAX, now, lead, MAX_RAISE_SLACK_MS).is_err());
    }

    #[test]
    fn need_reserves_ahead_and_renews_before_running_out() {
        assert_eq!(need(1000, i64::MIN), Need::Now(1000 + STEP_MS));
        assert_eq!(need(1000, 999), Need::Now(1000 + STEP_MS));
        assert_eq!(need(1000, 1000), Need::Ahead(1000 + STEP_MS));
        assert_eq!(need(1000, 1000 + RENEW_MS - 1), Need::Ahead(1000 + STEP_MS));
        assert_eq!(need(1000, 1000 + RENEW_MS), Need::Covered);
        // A fresh reservation covers the next STEP_MS - RENEW_MS ms.
        assert_eq!(
            need(1000 + STEP_MS - RENEW_MS, 1000 + STEP_MS),
            Need::Covered
        );
        assert_eq!(need(i64::MAX - 1, i64::MIN), Need::Now(i64::MAX));
    }

    #[test]
    fn records_round_trip_and_damage_is_detected() {
        for v in [0, 1, 1_700_000_000_000, i64::MAX, i64::MIN] {
            assert_eq!(decode(&encode(v)), Ok(Some(v)));
        }
        assert_eq!(decode(&[]), Ok(None));
        let good = encode(1_700_000_000_000);
        for i in 0..RECORD_LEN {
            let mut bad = good;
            bad[i] ^= 0x10;
            assert!(decode(&bad).is_err(), "flipped byte {i}");
        }
        assert!(decode(&good[..20]).is_err());
        assert!(decode(b"hello").is_err());
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("insta_id-mark-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn cover_writes_before_the_ms_and_only_when_running_low() {
        let dir = temp_dir("cover");
        let file = MarkFile::open(&dir, || true).unwrap();
        let state = MarkState::new();
        assert_eq!(
            state
                .load(&file, |m| {
                    assert_eq!(m, None);
                    Ok(())
                })
                .unwrap(),
            None
        );
        state.cover(5_000, || &file).unwrap();
        assert_eq!(file.read().unwrap(), Some(5_000 + STEP_MS));
        // Inside the reservation with room left: no write.
        state.cover(5_000 + STEP_MS - RENEW_MS, || &file).unwrap();
        assert_eq!(file.read().unwrap(), Some(5_000 + STEP_MS));
        // Running low: renewed ahead.
        state
            .cover(5_000 + STEP_MS - RENEW_MS + 1, || &file)
            .unwrap();
        assert_eq!(
            file.read().unwrap(),
            Some(5_000 + 2 * STEP_MS - RENEW_MS + 1)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_session_never_lowers_the_mark_another_wrote() {
        let dir = temp_dir("lower");
        let (a, b) = (
            MarkFile::open(&dir, || false).unwrap(),
            MarkFile::open(&dir, || false).unwrap(),
        );
        let (sa, sb) = (MarkState::new(), MarkState::new());
        sa.cover(9_000, || &a).unwrap();
        // b knows nothing of a's mark and covers an earlier ms.
        sb.cover(1_000, || &b).unwrap();
        assert_eq!(b.read().unwrap(), Some(9_000 + STEP_MS));
        assert_eq!(sb.durable(), 9_000 + STEP_MS);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn load_raises_the_floor_once_and_reports_damage() {
        let dir = temp_dir("load");
        std::fs::write(dir.join(FILE_NAME), encode(7_000)).unwrap();
        let file = MarkFile::open(&dir, || false).unwrap();
        let state = MarkState::new();
        let mut floor = None;
        let raise = |m| {
            floor = m;
            Ok(())
        };
        assert_eq!(state.load(&file, raise).unwrap(), Some(7_000));
        assert_eq!((floor, state.durable()), (Some(7_000), 7_000));
        assert_eq!(state.load(&file, |_| panic!("loaded twice")).unwrap(), None);
        std::fs::write(dir.join(FILE_NAME), b"garbage").unwrap();
        let fresh = MarkState::new();
        assert!(matches!(
            fresh.load(&file, |_| Ok(())),
            Err(MarkError::Damaged(_))
        ));
        assert!(!fresh.is_loaded());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    const RUN: Run = Run {
        started: 800_000_000_000_000,
        shmem: 32_769,
    };

    #[test]
    fn sessions_of_one_run_start_above_the_record_not_above_the_mark() {
        const GAP: i64 = 1_700_000_000_000_000;
        // The run's first session knows nothing of the run: the mark, and it
        // records that for the next ones, with the clocks' gap.
        let first = session_floor(Some(9_200), None, RUN, GAP);
        let rec = Sessions {
            run: RUN,
            floor_ms: 9_200,
            offset_us: GAP,
        };
        assert_eq!(first, (9_200, Some(rec)));
        // Sessions that ended issued up to 12_345: the next one starts there,
        // not above the mark the renewals left 200 ms past it.
        let rec = ended(Some(rec), RUN, 12_345, GAP);
        assert_eq!(rec.floor_ms, 12_345);
        assert_eq!(
            session_floor(Some(12_545), Some(rec), RUN, GAP + 7),
            (12_345, None)
        );
        // One that issued less does not lower it.
        assert_eq!(ended(Some(rec), RUN, 100, GAP).floor_ms, 12_345);
        // A restart (or a crash restart: new shared memory) is a new run: the
        // mark again, whatever the old run's record says.
        for other in [
            Run {
                started: RUN.started + 1,
                ..RUN
            },
            Run {
                shmem: RUN.shmem + 1,
                ..RUN
            },
        ] {
            let fresh = Sessions {
                run: other,
                floor_ms: 12_545,
                offset_us: GAP,
            };
            assert_eq!(
                session_floor(Some(12_545), Some(rec), other, GAP),
                (12_545, Some(fresh))
            );
        }
        // The wall clock stepped back 2 s (the gap shrank): the mark, and the
        // record restarts from it with the new gap.
        let back = GAP - 2_000_000;
        let restarted = Sessions {
            run: RUN,
            floor_ms: 12_545,
            offset_us: back,
        };
        assert_eq!(
            session_floor(Some(12_545), Some(rec), RUN, back),
            (12_545, Some(restarted))
        );
        // Within the tolerance, not a step back; a step forward is recorded.
        assert_eq!(
            session_floor(Some(12_545), Some(rec), RUN, GAP - 999).1,
            None
        );
        let forward = Sessions {
            offset_us: GAP + 5_000,
            ..rec
        };
        assert_eq!(
            session_floor(Some(12_545), Some(rec), RUN, GAP + 5_000),
            (12_345, Some(forward))
        );
        // No mark at all (nothing ever issued): no floor.
        assert_eq!(session_floor(None, None, RUN, GAP).0, i64::MIN);
    }

    #[test]
    fn a_millisecond_ahead_of_the_clock_is_claimed_by_one_session_only() {
        let rec = Sessions {
            run: RUN,
            floor_ms: 500,
            offset_us: 0,
        };
        // Claimed up to 500 by someone: 500 is taken, 501 is free.
        assert_eq!(claim(Some(rec), RUN, 500, 0), Err(500));
        assert_eq!(claim(Some(rec), RUN, 499, 0), Err(500));
        let mine = claim(Some(rec), RUN, 501, 0).unwrap();
        assert_eq!(mine.floor_ms, 501);
        // A second session wanting 501 must go above it.
        assert_eq!(claim(Some(mine), RUN, 501, 0), Err(501));
        // No record of this run (none yet, or damaged): the claim makes one.
        assert_eq!(
            claim(None, RUN, 7, 42),
            Ok(Sessions {
                run: RUN,
                floor_ms: 7,
                offset_us: 42
            })
        );
    }

    #[test]
    fn sessions_records_round_trip_and_damage_reads_as_none() {
        let r = Sessions {
            run: RUN,
            floor_ms: 1_700_000_000_000,
            offset_us: -5,
        };
        assert_eq!(decode_sessions(&encode_sessions(r)), Some(r));
        for i in 0..SESSIONS_LEN {
            let mut bad = encode_sessions(r);
            bad[i] ^= 0x01;
            assert_eq!(decode_sessions(&bad), None, "flipped byte {i}");
        }
        assert_eq!(decode_sessions(&[]), None);
        assert_eq!(decode_sessions(&encode(5)), None);
        let dir = temp_dir("sessions");
        let f = MarkFile::open_named(&dir, SESSIONS_FILE_NAME, || false).unwrap();
        assert_eq!(f.read_sessions().unwrap(), None);
        f.write_sessions(r).unwrap();
        assert_eq!(f.read_sessions().unwrap(), Some(r));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
