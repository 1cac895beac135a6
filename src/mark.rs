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
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The mark as the server's sessions share it (in the guard's shared memory).
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
    /// `raise_floor` (which raises the guard's table to it) before anyone
    /// issues an ID; it
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

    /// Opens (creating if missing) `name` in `dir` (the mark, or `guard_segment::FILE_NAME`).
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

    /// Whether the file opened is still the one at its path (not removed
    /// or replaced since).
    pub fn in_place(&self) -> Result<bool, MarkError> {
        use std::os::unix::fs::MetadataExt;
        let open = self
            .file
            .metadata()
            .map_err(|e| MarkError::Io(self.name, "stat", e))?;
        match std::fs::metadata(self.dir.join(self.name)) {
            Ok(at_path) => Ok(at_path.dev() == open.dev() && at_path.ino() == open.ino()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(MarkError::Io(self.name, "stat", e)),
        }
    }

    /// The file's content when it is exactly `N` bytes long (a record
    /// written by `write_record`), else `None`.
    pub fn read_record<const N: usize>(&self) -> Result<Option<[u8; N]>, MarkError> {
        let mut buf = vec![0u8; N + 1];
        let len = self.read_into(&mut buf)?;
        Ok((len == N).then(|| buf[..N].try_into().expect("N bytes")))
    }

    /// Writes `rec` over the file's first bytes; never fsync'd. Under the
    /// file's lock, with readers taking it too, no reader sees it half done.
    pub fn write_record(&self, rec: &[u8]) -> Result<(), MarkError> {
        self.file
            .write_all_at(rec, 0)
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

    #[test]
    fn records_are_read_back_whole_or_not_at_all() {
        let dir = temp_dir("record");
        let f = MarkFile::open_named(&dir, "insta_id.record", || false).unwrap();
        assert_eq!(f.read_record::<4>().unwrap(), None);
        f.write_record(&[1, 2, 3, 4]).unwrap();
        assert_eq!(f.read_record::<4>().unwrap(), Some([1, 2, 3, 4]));
        assert_eq!(f.read_record::<3>().unwrap(), None);
        assert_eq!(f.read_record::<5>().unwrap(), None);
        assert!(f.in_place().unwrap());
        std::fs::remove_file(dir.join("insta_id.record")).unwrap();
        assert!(!f.in_place().unwrap());
        MarkFile::open_named(&dir, "insta_id.record", || false).unwrap();
        assert!(!f.in_place().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
