//! The durable high-water mark: what the guard remembers across restarts.
//!
//! The guard keeps each sequence's last millisecond in memory, which a
//! restart empties. A server whose clock is behind after the restart (set
//! back while it was down, a VM restored from a snapshot, NTP correcting a
//! clock that ran fast) would then re-enter milliseconds it already used and
//! repeat IDs. So no ID of millisecond `m` leaves next_id before a mark
//! `>= m` is on disk, and at start every millisecond up to the mark counts as
//! used: IDs continue above it until the clock passes it.
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
//! This module holds the decisions and the file format as pure Rust; the file
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

/// How far ahead of the server's clock `raise_high_water_mark` may put the
/// mark. Carrying a moved shard's last millisecond needs the clock difference
/// of two servers (seconds); a mark further ahead is a typo that would hold
/// every sequence of the server ahead of its clock until the clock got there.
pub const MAX_RAISE_AHEAD_MS: i64 = 3_600_000;

/// Whether the mark may be raised to `ms` on a server whose clock reads `now`.
#[inline]
pub fn may_raise_to(ms: i64, now: i64) -> bool {
    ms <= now.saturating_add(MAX_RAISE_AHEAD_MS)
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

    /// First use after a (re)start: read the file and hand its mark to
    /// `raise_floor` (the guard's table) before anyone issues an ID. Returns
    /// the mark read, if this call did the loading.
    pub fn load(
        &self,
        file: &MarkFile,
        raise_floor: impl FnOnce(i64),
    ) -> Result<Option<i64>, MarkError> {
        if self.is_loaded() {
            return Ok(None);
        }
        let _lock = file.lock(true)?.expect("a blocking lock");
        if self.is_loaded() {
            return Ok(None);
        }
        let mark = file.read()?;
        if let Some(mark) = mark {
            raise_floor(mark);
            self.durable.fetch_max(mark, Ordering::AcqRel);
        }
        self.loaded.store(1, Ordering::Release);
        Ok(mark)
    }

    /// Makes sure `ms` is covered by a mark on disk before an ID of it is
    /// returned; renews ahead when the mark runs low. `file` is only asked
    /// for then: the usual call is one atomic load and a compare.
    #[inline]
    pub fn cover<'f>(&self, ms: i64, file: impl FnOnce() -> &'f MarkFile) -> Result<(), MarkError> {
        match need(ms, self.durable()) {
            Need::Covered => Ok(()),
            Need::Ahead(want) => self.reserve(file(), ms, want, false),
            Need::Now(want) => self.reserve(file(), ms, want, true),
        }
    }

    #[cold]
    fn reserve(&self, file: &MarkFile, ms: i64, want: i64, must: bool) -> Result<(), MarkError> {
        // Renewing ahead is optional: when another session holds the lock it
        // is renewing already.
        let Some(_lock) = file.lock(must)? else {
            return Ok(());
        };
        let mark = match file.read()? {
            Some(on_disk) if need(ms, on_disk) == Need::Covered => on_disk,
            Some(on_disk) => file.write(want.max(on_disk), false)?,
            None => file.write(want, true)?,
        };
        self.durable.fetch_max(mark, Ordering::AcqRel);
        Ok(())
    }
}

impl Default for MarkState {
    fn default() -> Self {
        Self::new()
    }
}

/// Why the mark could not be read or written.
#[derive(Debug)]
pub enum MarkError {
    Io(&'static str, std::io::Error),
    Damaged(Damaged),
}

/// The mark file, opened once per backend.
pub struct MarkFile {
    file: File,
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
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join(FILE_NAME))
            .map_err(|e| MarkError::Io("open", e))?;
        Ok(MarkFile {
            file,
            dir: dir.to_path_buf(),
            fsync,
        })
    }

    /// `must`: wait for the lock; else `None` when another process holds it.
    fn lock(&self, must: bool) -> Result<Option<Locked<'_>>, MarkError> {
        if must {
            self.file.lock().map_err(|e| MarkError::Io("lock", e))?;
        } else {
            match self.file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
                Err(std::fs::TryLockError::Error(e)) => return Err(MarkError::Io("lock", e)),
            }
        }
        Ok(Some(Locked(&self.file)))
    }

    pub fn read(&self) -> Result<Option<i64>, MarkError> {
        let mut buf = [0u8; RECORD_LEN + 1];
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
                Err(e) => return Err(MarkError::Io("read", e)),
            }
        }
        decode(&buf[..len]).map_err(MarkError::Damaged)
    }

    /// Writes `mark` and returns it. `first`: the file was empty (new), so
    /// its directory entry must be made durable too.
    fn write(&self, mark: i64, first: bool) -> Result<i64, MarkError> {
        self.file
            .write_all_at(&encode(mark), 0)
            .map_err(|e| MarkError::Io("write", e))?;
        if (self.fsync)() {
            self.file
                .sync_data()
                .map_err(|e| MarkError::Io("fsync", e))?;
            if first {
                File::open(&self.dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| MarkError::Io("fsync the directory of", e))?;
            }
        }
        Ok(mark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(state.load(&file, |_| panic!("no mark yet")).unwrap(), None);
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
        assert_eq!(state.load(&file, |m| floor = Some(m)).unwrap(), Some(7_000));
        assert_eq!((floor, state.durable()), (Some(7_000), 7_000));
        assert_eq!(state.load(&file, |_| panic!("loaded twice")).unwrap(), None);
        std::fs::write(dir.join(FILE_NAME), b"garbage").unwrap();
        let fresh = MarkState::new();
        assert!(matches!(
            fresh.load(&file, |_| ()),
            Err(MarkError::Damaged(_))
        ));
        assert!(!fresh.is_loaded());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_raise_may_go_up_to_an_hour_ahead_of_the_clock() {
        assert!(may_raise_to(1_000, 5_000)); // behind the clock: a no-op, allowed
        assert!(may_raise_to(5_000 + MAX_RAISE_AHEAD_MS, 5_000));
        assert!(!may_raise_to(5_001 + MAX_RAISE_AHEAD_MS, 5_000));
        assert!(!may_raise_to(i64::MAX, 5_000));
    }
}
