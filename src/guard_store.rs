//! Where the guard's table lives.
//!
//! - Preloaded (`shared_preload_libraries = 'insta_id'`), every version: in
//!   the server's shared memory, sized by `insta_id.max_sequences` at start.
//! - Not preloaded, PostgreSQL 17+: in a segment of the DSM registry
//!   (`GetNamedDSMSegment`), created by the first session that needs it and
//!   found by name by every later one. Exact across sessions like the above;
//!   its size is fixed (`REGISTRY_SEQUENCES`).
//! - Not preloaded, 15 and 16: each session keeps its own table, exact within
//!   the session only (see the README); `insta_id.require_shared_guard`
//!   makes next_id refuse to run that way. The sessions of a server's run
//!   share a record (`mark::Sessions`): a millisecond issued in ahead of the
//!   clock is claimed there first, an ending session adds its last one, and a
//!   new session starts above it (above the mark after a restart or a step
//!   back of the clock).
//!
//! `insta_id.guard_mode()` says `shared` for the first two, `session` else.

use crate::guard::{Bucket, Seed, SeqStats, Stats, Table, WAYS};
use crate::mark::{self, Durable, MarkError, MarkFile, MarkState, Run};
use crate::mark_wal::{SeqLock, SeqMark};
use crate::settings;
use crate::BackendCell;
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Buckets of a session-local table (2048 sequences, about 400 kB).
#[cfg(not(any(feature = "pg17", feature = "pg18")))]
const SESSION_BUCKETS: usize = 256;

/// The registry segment's name carries the guard table's layout: change the
/// name whenever `Bucket` or the header changes, so that a library never maps
/// a segment laid out by another (`layout_is_pinned` fails until you do).
pub const REGISTRY_NAME: &std::ffi::CStr = c"insta_id duplicate guard, layout 5";
/// Sequences the registry segment tracks (fixed: without preloading there is
/// no server-start setting to size it). About 3.5 MiB.
pub const REGISTRY_SEQUENCES: usize = 16_384;

/// Shared memory (startup or registry) starts with this header, then the
/// databases' marks (`DB_SLOTS`), then the buckets.
#[repr(C)]
struct Header {
    /// When the guard's counts were last zeroed (timestamptz).
    stats_reset: AtomicI64,
    /// The key of the hash placing sequences in buckets, drawn at random
    /// when the table was made.
    seed: Seed,
}
const HEADER: usize = 64;
const _: () = assert!(std::mem::size_of::<Header>() <= HEADER);

/// Databases whose marks one run of the shared guard tracks at once (a
/// dropped database's slot is reused).
pub const DB_SLOTS: usize = 4096;

/// One database's mark in shared memory, found by `key` (`db_key`).
#[repr(C)]
struct DbSlot {
    key: AtomicU64,
    mark: MarkState,
    _pad: u64,
}
const DB_SLOT: usize = 32;
const _: () = assert!(std::mem::size_of::<DbSlot>() == DB_SLOT);

// Set in the postmaster by the shmem startup hook; children inherit it.
static mut SHARED: *mut u8 = std::ptr::null_mut();

/// The guard in force in this backend: its table, the high-water mark's
/// state, and their reach.
#[derive(Clone, Copy)]
pub struct Store {
    pub(crate) buckets: &'static [Bucket],
    header: &'static Header,
    /// Empty with the per-session guard (each session keeps its own mark).
    db_slots: &'static [DbSlot],
    mode: GuardMode,
}

/// This backend's store, decided on first use.
static STORE: BackendCell<Option<Store>> = BackendCell::new(None);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GuardMode {
    /// Shared memory or the DSM registry: exact across all sessions.
    Shared,
    /// Per session: exact within each session only.
    Session,
}

impl GuardMode {
    pub fn as_str(self) -> &'static str {
        match self {
            GuardMode::Shared => "shared",
            GuardMode::Session => "session",
        }
    }
}

impl Store {
    #[inline]
    pub(crate) fn table(&self) -> Table<'static> {
        Table::seeded(self.buckets, self.header.seed)
    }
}

/// The store in force: the cached decision after the first call.
#[inline]
fn store() -> Store {
    match STORE.get() {
        Some(store) => store,
        None => {
            let store = resolve();
            STORE.set(Some(store));
            store
        }
    }
}

/// Header, databases' marks and buckets laid out from `ptr`
/// (`size_of_table`).
///
/// # Safety
/// `ptr` points at initialised memory of that layout that outlives the backend.
unsafe fn laid_out(ptr: *mut u8, buckets: usize, mode: GuardMode) -> Store {
    unsafe {
        Store {
            header: &*(ptr as *const Header),
            db_slots: std::slice::from_raw_parts(ptr.add(HEADER) as *const DbSlot, DB_SLOTS),
            buckets: std::slice::from_raw_parts(
                ptr.add(HEADER + DB_SLOTS * DB_SLOT) as *const Bucket,
                buckets,
            ),
            mode,
        }
    }
}

/// Writes a fresh header and `buckets` empty buckets at `ptr`.
///
/// # Safety
/// `ptr` points at writable memory of that size nobody else uses yet.
unsafe fn initialise(ptr: *mut u8, buckets: usize) {
    unsafe {
        (ptr as *mut Header).write(Header {
            stats_reset: AtomicI64::new(pg_sys::GetCurrentTimestamp()),
            seed: random_seed(),
        });
        let slots = ptr.add(HEADER) as *mut DbSlot;
        for i in 0..DB_SLOTS {
            slots.add(i).write(DbSlot {
                key: AtomicU64::new(0),
                mark: MarkState::new(),
                _pad: 0,
            });
        }
        let first = ptr.add(HEADER + DB_SLOTS * DB_SLOT) as *mut Bucket;
        for i in 0..buckets {
            first.add(i).write(Bucket::new());
        }
    }
}

/// A fresh hash key from the operating system's strong random source. Runs
/// where the table is made (the postmaster, the registry's first session, a
/// session's own table), so cannot report an error: were the source to fail,
/// the key falls back to the clock and the process id, which a role that
/// cannot read the server's memory does not know to the microsecond.
fn random_seed() -> Seed {
    let mut bytes = [0u8; 16];
    // SAFETY: fills the 16 bytes it is given.
    if !unsafe { pg_sys::pg_strong_random(bytes.as_mut_ptr().cast(), bytes.len()) } {
        // SAFETY: plain reads of the clock and a global.
        let (now, pid) = unsafe { (pg_sys::GetCurrentTimestamp(), pg_sys::MyProcPid) };
        bytes[..8].copy_from_slice(&now.to_le_bytes());
        bytes[8..12].copy_from_slice(&pid.to_le_bytes());
    }
    Seed::from_bytes(bytes)
}

fn size_of_table(buckets: usize) -> usize {
    HEADER + DB_SLOTS * DB_SLOT + buckets * std::mem::size_of::<Bucket>()
}

/// Preloaded: the startup shared memory; else on 17+ the registry segment
/// (which may raise, and is then tried again on the next call); else a table
/// of this session's own.
#[cold]
fn resolve() -> Store {
    // SAFETY: written once in the postmaster before any backend exists.
    let ptr = unsafe { SHARED };
    if !ptr.is_null() {
        // SAFETY: the startup hook initialised this layout, which lives as
        // long as the server.
        return unsafe { laid_out(ptr, shared_buckets(), GuardMode::Shared) };
    }
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    let store = registry::attach(REGISTRY_NAME, REGISTRY_SEQUENCES.div_ceil(WAYS));
    #[cfg(not(any(feature = "pg17", feature = "pg18")))]
    let store = {
        let mem: &'static mut [u64] =
            Box::leak(vec![0u64; size_of_table(SESSION_BUCKETS).div_ceil(8)].into_boxed_slice());
        let ptr = mem.as_mut_ptr() as *mut u8;
        // SAFETY: fresh, 8-aligned memory of the right size, leaked for the
        // life of the session.
        unsafe {
            initialise(ptr, SESSION_BUCKETS);
            laid_out(ptr, SESSION_BUCKETS, GuardMode::Session)
        }
    };
    store
}

/// Where this database's mark is kept.
pub enum Backing {
    /// The extension's sequence, WAL-logged (0.9.0 and later).
    Wal(SeqMark),
    /// The data directory's file, one for the server: a database whose
    /// insta_id SQL predates 0.9.0, until `ALTER EXTENSION insta_id UPDATE`.
    File(MarkFile),
}

pub enum BackingLock<'a> {
    Wal(#[allow(dead_code)] SeqLock),
    File(#[allow(dead_code)] mark::Locked<'a>),
}

impl Durable for Backing {
    type Lock<'a> = BackingLock<'a>;

    fn lock(&self, must: bool) -> Result<Option<BackingLock<'_>>, MarkError> {
        Ok(match self {
            Backing::Wal(s) => s.lock(must)?.map(BackingLock::Wal),
            Backing::File(f) if must => Some(BackingLock::File(lock_cancellable(f)?)),
            Backing::File(f) => f.lock(false)?.map(BackingLock::File),
        })
    }
    fn read(&self) -> Result<Option<i64>, MarkError> {
        match self {
            Backing::Wal(s) => s.read(),
            Backing::File(f) => f.read_mark(),
        }
    }
    fn write(&self, mark: i64, first: bool) -> Result<i64, MarkError> {
        match self {
            Backing::Wal(s) => s.write(mark, first),
            Backing::File(f) => f.write(mark, first),
        }
    }
    fn confirm(&self, stored: i64) -> Result<(), MarkError> {
        match self {
            Backing::Wal(s) => s.confirm(stored),
            Backing::File(f) => f.confirm(stored),
        }
    }
}

fn data_dir() -> std::path::PathBuf {
    // SAFETY: DataDir is set for the life of a backend.
    let dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) };
    std::path::PathBuf::from(dir.to_string_lossy().into_owned())
}

/// The 0.8.0 mark file, for reading only: `None` when there is none.
fn legacy_mark() -> Result<Option<i64>, MarkError> {
    match MarkFile::open_existing(&data_dir(), mark::FILE_NAME)? {
        Some(file) => file.read_mark(),
        None => Ok(None),
    }
}

/// This database's backing: its sequence, or the file before the update.
fn backing() -> Backing {
    match SeqMark::find() {
        Some(seq) => Backing::Wal(seq),
        None => Backing::File(
            MarkFile::open(&data_dir(), fsync_enabled).unwrap_or_else(|e| mark_error(e)),
        ),
    }
}

/// The per-session guard's record of this database's sessions
/// (`insta_id.sessions.<database oid>`), opened once per backend.
static SESSIONS_FILE: OnceLock<MarkFile> = OnceLock::new();

fn sessions_file() -> Result<&'static MarkFile, MarkError> {
    if let Some(file) = SESSIONS_FILE.get() {
        return Ok(file);
    }
    // SAFETY: a plain read of the backend's database.
    let db = unsafe { pg_sys::MyDatabaseId };
    let name: &'static str =
        Box::leak(format!("{}.{}", mark::SESSIONS_FILE_NAME, u32::from(db)).into_boxed_str());
    let _ = SESSIONS_FILE.set(MarkFile::open_named(&data_dir(), name, fsync_enabled)?);
    Ok(SESSIONS_FILE.get().expect("just set"))
}

// What pgrx leaves opaque in storage/pg_shmem.h (the same in 15 to 18): the
// header of the run's main shared memory, and the global pointing at it
// (declared there for EXEC_BACKEND builds, defined and exported in all).
// Only the per-session guard (15 and 16) needs them.
#[cfg(not(any(feature = "pg17", feature = "pg18")))]
#[repr(C)]
struct PGShmemHeader {
    magic: i32,
    creator_pid: pg_sys::pid_t,
    totalsize: usize,
    freeoffset: usize,
    dsm_control: u32,
}
#[cfg(not(any(feature = "pg17", feature = "pg18")))]
const PG_SHMEM_MAGIC: i32 = 679_834_894;
#[cfg(not(any(feature = "pg17", feature = "pg18")))]
unsafe extern "C" {
    static UsedShmemSegAddr: *mut std::ffi::c_void;
}

/// This server's run. The postmaster's start time does not change at a crash
/// restart; the handle of the dynamic shared memory control segment, which
/// the postmaster draws at random whenever it builds shared memory (at start
/// and at every crash restart), does. A header not laid out as expected
/// gives a run that never matches: every session then starts above the
/// mark, as in 0.8.0.
#[cfg(not(any(feature = "pg17", feature = "pg18")))]
fn server_run() -> Run {
    // SAFETY: plain reads of globals the postmaster set before forking this
    // backend; the header lives as long as the run.
    unsafe {
        let header = UsedShmemSegAddr as *const PGShmemHeader;
        let shmem = match header.as_ref() {
            Some(h) if h.magic == PG_SHMEM_MAGIC => h.dsm_control as u64,
            _ => u64::MAX - pg_sys::MyProcPid as u64,
        };
        Run {
            started: pg_sys::PgStartTime,
            shmem,
        }
    }
}

/// 17+: the per-session guard does not exist there (the DSM registry).
#[cfg(any(feature = "pg17", feature = "pg18"))]
fn server_run() -> Run {
    unreachable!("the per-session guard exists on 15 and 16 only")
}

/// Takes `file`'s lock, trying again on the latch each millisecond, so that
/// a cancel or a statement timeout ends a wait behind a writer stuck in
/// fsync (a blocking flock hears neither).
fn lock_cancellable(file: &MarkFile) -> Result<mark::Locked<'_>, MarkError> {
    loop {
        if let Some(lock) = file.lock(false)? {
            return Ok(lock);
        }
        crate::latch::nap(1, pg_sys::PG_WAIT_EXTENSION);
    }
}

/// Reads the run's sessions' record under its lock, lets `decide` answer
/// from it (given the run and the clocks' gap now), and writes the record
/// `decide` returns, if any, before the lock goes. `at_exit`: the backend
/// is exiting, where interrupts are not served; the lock's holders never
/// wait while holding it, so a blocking wait is short.
fn with_sessions<R>(
    at_exit: bool,
    decide: impl FnOnce(Option<mark::Sessions>, Run, i64) -> (R, Option<mark::Sessions>),
) -> Result<R, MarkError> {
    let file = sessions_file()?;
    let _lock = if at_exit {
        file.lock(true)?.expect("a blocking lock")
    } else {
        lock_cancellable(file)?
    };
    let offset = crate::clock::wall_minus_monotonic_us();
    let (answer, write) = decide(file.read_sessions()?, server_run(), offset);
    if let Some(rec) = write {
        file.write_sessions(rec)?;
    }
    Ok(answer)
}

/// The highest millisecond this session claimed in the sessions' record.
static CLAIMED: BackendCell<i64> = BackendCell::new(i64::MIN);

/// Per-session guard, an ID about to be issued in `ms` ahead of the clock:
/// claim `ms` in the run's record first. `Err(taken)`: another session has
/// claimed up to `taken >= ms`; this one must issue above it.
#[cold]
fn claim_ahead(ms: i64) -> Result<(), i64> {
    let claimed = with_sessions(false, |rec, run, offset| {
        match mark::claim(rec, run, ms, offset) {
            Ok(rec) => (Ok(()), Some(rec)),
            Err(taken) => (Err(taken), None),
        }
    })
    .unwrap_or_else(|e| mark_error(e));
    if claimed.is_ok() {
        CLAIMED.set(ms);
    }
    claimed
}

/// PostgreSQL's `fsync` setting: with it off, the mark is written but not
/// fsync'd, like everything else of the server.
fn fsync_enabled() -> bool {
    // SAFETY: a plain read of a GUC variable.
    unsafe { pg_sys::enableFsync }
}

fn mark_error(e: MarkError) -> ! {
    match e {
        // After a failed fsync the kernel may have dropped the write and
        // marked the page clean: PANIC, as PostgreSQL does for its own files,
        // unless data_sync_retry is on (the next writer then writes again).
        MarkError::Io(file, what, err) if what.starts_with("fsync") => {
            // SAFETY: reads the data_sync_retry setting.
            let level = unsafe { pg_sys::data_sync_elevel(pgrx::PgLogLevel::ERROR as i32) };
            pgrx::pg_sys::panic::ErrorReport::new(
                PgSqlErrorCode::ERRCODE_IO_ERROR,
                format!("could not {what} insta_id's file \"{file}\" in the data directory: {err}"),
                "insta_id",
            )
            .report(if level == pg_sys::PANIC as i32 {
                pgrx::PgLogLevel::PANIC
            } else {
                pgrx::PgLogLevel::ERROR
            });
            unreachable!("ERROR does not return")
        }
        MarkError::Io(file, what, err) => raise!(
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!("could not {what} insta_id's file \"{file}\" in the data directory: {err}"),
            "next_id records there, before issuing them, the highest millisecond it may issue IDs in (insta_id.mark) and what sessions of the per-session guard issued ahead of the clock (insta_id.sessions).",
        ),
        MarkError::Damaged(d) => raise!(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("insta_id's high-water mark file \"{}\" is damaged", crate::mark::FILE_NAME),
            format!("It holds {} bytes that are not a mark written by insta_id: {:02x?}.", d.0.len(), d.0),
            "The file holds the highest millisecond this server may have issued IDs in; next_id refuses to run without it. Remove it only if the clock is known to be past every ID this server issued.",
        ),
    }
}

/// Whether this backend registered `record_at_exit` (per-session guard).
static EXIT_RECORDED: BackendCell<bool> = BackendCell::new(false);

/// This database's mark as this backend uses it: its state (in shared
/// memory, or the session's own) and where it is kept. Decided, and the
/// mark loaded, at the backend's first next_id.
static DB_MARK: BackendCell<Option<(&'static MarkState, &'static Backing)>> =
    BackendCell::new(None);

#[inline]
fn db_mark(store: &Store) -> (&'static MarkState, &'static Backing) {
    match DB_MARK.get() {
        Some(m) => m,
        None => load_db_mark(store),
    }
}

fn db_key(db: pg_sys::Oid, backing: &Backing) -> u64 {
    let seq = match backing {
        Backing::Wal(s) => u32::from(s.relid),
        Backing::File(_) => 0,
    };
    (u64::from(u32::from(db)) << 32) | u64::from(seq)
}

/// A slot's key while a reclaimer resets it: database 0, which no
/// database's key has (`db_key`).
const RECLAIMING: u64 = 1;

/// The shared slot of `key`, claimed if new. A full table first reuses the
/// slots of dropped databases.
fn shared_slot(slots: &'static [DbSlot], key: u64) -> &'static MarkState {
    let database_exists = |k: u64| {
        // SAFETY: a catalog cache probe of pg_database (shared).
        unsafe {
            pg_sys::SearchSysCacheExists(
                pg_sys::SysCacheIdentifier::DATABASEOID as i32,
                pg_sys::Datum::from((k >> 32) as u32),
                pg_sys::Datum::from(0),
                pg_sys::Datum::from(0),
                pg_sys::Datum::from(0),
            )
        }
    };
    if let Some(mark) = claim_slot(slots, key, database_exists) {
        return mark;
    }
    raise!(
        PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        format!("insta_id tracks the high-water marks of at most {DB_SLOTS} databases at once"),
        "Every database in which next_id ran since the server started keeps a slot until the database is dropped (one more after each DROP and CREATE EXTENSION insta_id in it).",
        "Restart the server to free the slots of databases that no longer use insta_id.",
    )
}

/// `key`'s slot, claimed if new; when none is free, the slots of keys whose
/// database is gone (`exists` false) are freed and the search made again.
/// None when the table is full of live databases.
fn claim_slot(slots: &[DbSlot], key: u64, exists: impl Fn(u64) -> bool) -> Option<&MarkState> {
    let start = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize % slots.len();
    for pass in 0..2 {
        for i in 0..slots.len() {
            let slot = &slots[(start + i) % slots.len()];
            match slot.key.load(Ordering::Acquire) {
                k if k == key => return Some(&slot.mark),
                0 => match slot
                    .key
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return Some(&slot.mark),
                    Err(k) if k == key => return Some(&slot.mark),
                    Err(_) => {}
                },
                _ => {}
            }
        }
        if pass == 0 {
            for slot in slots {
                let k = slot.key.load(Ordering::Acquire);
                // Nobody uses a dropped database's slot: taken out of use
                // (one reclaimer wins), its mark forgotten, then freed. In
                // that order, so that no claimer gets a slot being reset and
                // no late reclaimer resets a slot claimed again (0.9.0 reset
                // first: a reclaimer that had read the key before another
                // freed it and a database claimed it reset that database's
                // mark).
                if k != 0
                    && k != RECLAIMING
                    && !exists(k)
                    && slot
                        .key
                        .compare_exchange(k, RECLAIMING, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    slot.mark.reset();
                    slot.key.store(0, Ordering::Release);
                }
            }
        }
    }
    None
}

/// A backend's first next_id in its database: finds where the database's
/// mark is kept, and loads it if no session did in this run. Every
/// millisecond up to the mark then counts as used by every sequence, before
/// any ID is issued. With the per-session guard, every session loads:
/// starting above the run's sessions' record, or above the mark in a new run
/// or after a step back (`mark::session_floor`).
#[cold]
fn load_db_mark(store: &Store) -> (&'static MarkState, &'static Backing) {
    let backing: &'static Backing = Box::leak(Box::new(backing()));
    if let Backing::Wal(seq) = backing {
        adopt_legacy_mark(seq).unwrap_or_else(|e| mark_error(e));
    }
    let state: &'static MarkState = match store.mode {
        GuardMode::Shared => {
            // SAFETY: a plain read of the backend's database.
            let db = unsafe { pg_sys::MyDatabaseId };
            shared_slot(store.db_slots, db_key(db, backing))
        }
        GuardMode::Session => Box::leak(Box::new(MarkState::new())),
    };
    let table = store.table();
    let loaded = state.load(backing, |mark| {
        match store.mode {
            GuardMode::Shared => {
                if let Some(mark) = mark {
                    table.raise_floor(mark);
                }
            }
            GuardMode::Session => {
                let floor = with_sessions(false, |rec, run, offset| {
                    mark::session_floor(mark, rec, run, offset)
                })?;
                table.raise_floor(floor);
                // Once per backend: the mark is loaded again when it changes
                // (refreshed: the extension dropped and created again), and
                // PostgreSQL has room for 20 such callbacks in all.
                if !EXIT_RECORDED.get() {
                    EXIT_RECORDED.set(true);
                    // SAFETY: registering a plain callback for this backend's exit.
                    unsafe {
                        pg_sys::before_shmem_exit(Some(record_at_exit), pg_sys::Datum::from(0))
                    };
                }
            }
        }
        Ok(())
    });
    match loaded {
        Ok(Some(mark)) => {
            let ahead = mark - crate::clock::now_unix_ms();
            if ahead > 0 && store.mode == GuardMode::Shared {
                pgrx::log!(
                    "insta_id: the high-water mark of issued IDs in this database is {ahead} ms ahead of the clock; IDs continue above it (waiting while it is more than insta_id.max_lead ahead)"
                );
            }
        }
        Ok(None) => {}
        Err(e) => mark_error(e),
    }
    DB_MARK.set(Some((state, backing)));
    (state, backing)
}

/// While 0.8.0's file exists: carries its mark into the sequence, durably,
/// before anything trusts the sequence. After `ALTER EXTENSION insta_id
/// UPDATE`, sessions that started before it keep writing the file until
/// their next renewal (`refreshed`), so every load takes the larger of both.
fn adopt_legacy_mark(seq: &SeqMark) -> Result<(), MarkError> {
    let Some(legacy) = legacy_mark()? else {
        return Ok(());
    };
    if seq.read()?.is_some_and(|m| m >= legacy) {
        return Ok(());
    }
    let _lock = seq.lock(true)?;
    if seq.read()?.is_none_or(|m| m < legacy) {
        seq.write(legacy, true)?;
    }
    Ok(())
}

/// Before a renewal: where the database's mark is kept may have changed
/// since this backend looked (`ALTER EXTENSION insta_id UPDATE` from 0.8.0
/// brought the sequence; DROP and CREATE EXTENSION made a new one). Then the
/// backend starts over with the new one (loading it if no session has).
#[cold]
fn refreshed(
    mark: &'static MarkState,
    backing: &'static Backing,
) -> (&'static MarkState, &'static Backing) {
    let same = match (backing, SeqMark::find()) {
        (Backing::Wal(a), Some(b)) => *a == b,
        (Backing::File(_), None) => true,
        _ => false,
    };
    if same {
        return (mark, backing);
    }
    DB_MARK.set(None);
    load_db_mark(&store())
}

/// Adds `last_ms` to the run's sessions' record (per-session guard).
fn record_ended(last_ms: i64) -> Result<(), MarkError> {
    with_sessions(true, |rec, run, offset| {
        ((), Some(mark::ended(rec, run, last_ms, offset)))
    })
}

/// At a per-session-guard backend's exit: its last millisecond, so that a
/// session starting within that millisecond does not reuse it (IDs ahead of
/// the clock were claimed as they were issued). A backend that dies without
/// this (SIGKILL, a crash) takes the server into a crash restart, a new run.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn record_at_exit(_code: std::ffi::c_int, _arg: pg_sys::Datum) {
    let Some(store) = STORE.get() else { return };
    let Some(last_ms) = store.table().last_ms() else {
        return;
    };
    if let Err(MarkError::Io(file, what, err)) = record_ended(last_ms) {
        pgrx::warning!(
            "insta_id: could not {what} \"{file}\" at session exit: {err}; a session starting within this session's last millisecond could repeat one of its IDs"
        );
    }
}

pub fn mode() -> GuardMode {
    store().mode
}

/// The guard in force for this session. Take it before nextval, so that a
/// refusal (below, the registry's or the mark's errors) uses up no value.
#[inline]
pub fn guard() -> Guard {
    let store = store();
    if store.mode == GuardMode::Session && settings::require_shared_guard() {
        raise!(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "insta_id.next_id refuses to run with a per-session duplicate guard",
            "insta_id.require_shared_guard is on, and this server keeps the guard per session: insta_id is not in shared_preload_libraries and PostgreSQL is older than 17.",
            "Add insta_id to shared_preload_libraries and restart the server, or turn insta_id.require_shared_guard off.",
        );
    }
    // A write (the mark's renewal) that a standby or a read-only transaction
    // refuses: refused here, before anything, with the SQLSTATE nextval gives.
    // SAFETY: a plain read of a global, then a C call that raises.
    if unsafe { pg_sys::XactReadOnly } {
        unsafe { pg_sys::PreventCommandIfReadOnly(c"insta_id.next_id()".as_ptr()) };
    }
    let (mark, backing) = db_mark(&store);
    Guard {
        table: store.table(),
        mark,
        backing,
        per_session: store.mode == GuardMode::Session,
    }
}

/// `guard()` when taking it only reads this backend's cells: the store and
/// the database's mark already resolved, and nothing to refuse. `None` sends
/// the caller to `guard()`, which resolves, loads or refuses. Raises nothing
/// and calls nothing: next_id takes it outside pgrx's guard.
#[inline(always)]
pub fn ready() -> Option<Guard> {
    let store = STORE.get()?;
    let (mark, backing) = DB_MARK.get()?;
    let per_session = store.mode == GuardMode::Session;
    // SAFETY: a plain read of a global of this backend.
    if (per_session && settings::require_shared_guard()) || unsafe { pg_sys::XactReadOnly } {
        return None;
    }
    Some(Guard {
        table: store.table(),
        mark,
        backing,
        per_session,
    })
}

/// The table and the high-water mark of one next_id call. Plain data (no
/// destructor): next_id holds it across the call into nextval.
#[derive(Clone, Copy)]
pub struct Guard {
    pub table: Table<'static>,
    mark: &'static MarkState,
    backing: &'static Backing,
    per_session: bool,
}

impl Guard {
    /// Before an ID of `ms` leaves when `ms` is ahead of the clock reading
    /// `now`: with the per-session guard, `ms` must be claimed for this
    /// session (`Err(taken)`: issue above `taken` instead). A compare on the
    /// usual path.
    #[inline]
    pub fn claim(&self, ms: i64, now: i64) -> Result<(), i64> {
        if !self.per_session || ms <= now || ms <= CLAIMED.get() || crate::clock::scripted() {
            return Ok(());
        }
        claim_ahead(ms)
    }

    /// Whether an ID of `ms`, issued at clock reading `now`, needs neither a
    /// claim (`claim`) nor a renewal of the mark (`cover`): the usual path,
    /// which raises nothing.
    #[inline(always)]
    pub fn settled(&self, ms: i64, now: i64) -> bool {
        let claimed = !self.per_session || ms <= now || ms <= CLAIMED.get();
        (claimed && self.mark.covers(ms)) || crate::clock::scripted()
    }

    /// Returns once a durable mark covers `ms`: on the usual path, one
    /// atomic load and a compare.
    #[inline]
    pub fn cover(&self, ms: i64) {
        if self.mark.covers(ms) || crate::clock::scripted() {
            // (A scripted test clock must not move the real server's mark.)
            return;
        }
        let (mark, backing) = refreshed(self.mark, self.backing);
        if let Err(e) = mark.cover(ms, || backing) {
            mark_error(e)
        }
    }
}

/// The guard's counts for insta_id.guard_stats() and guard_stats_total.
pub struct Report {
    pub mode: GuardMode,
    pub capacity: usize,
    pub tracked: usize,
    pub totals: Stats,
    /// When the counts were last zeroed (timestamptz).
    pub stats_reset: i64,
}

/// Every sequence in the guard's table with its counts.
pub fn sequences() -> Vec<SeqStats> {
    store().table().sequences()
}

/// The counts for the server (this session, with the per-session guard).
pub fn report() -> Report {
    let store = store();
    let table = store.table();
    let (totals, tracked) = table.totals();
    Report {
        mode: store.mode,
        capacity: table.capacity(),
        tracked,
        totals,
        stats_reset: store.header.stats_reset.load(Ordering::Relaxed),
    }
}

/// Zeroes the counts (not what the guard remembers against duplicates).
pub fn reset_stats() {
    let store = store();
    store.table().reset_stats();
    // SAFETY: GetCurrentTimestamp only reads the system clock.
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    store.header.stats_reset.store(now, Ordering::Relaxed);
}

/// Counts every millisecond up to `ms` as used, durably: this database's
/// mark first, then every sequence in the guard's table (with the
/// per-session guard, this session's, and the run's sessions' record, which
/// later sessions start above; sessions already open do not see it).
/// Returns the mark.
pub fn raise_mark(ms: i64) -> i64 {
    let store = store();
    let (mark, backing) = db_mark(&store);
    let (mark, backing) = refreshed(mark, backing);
    if let Err(e) = mark.cover(ms, || backing) {
        mark_error(e)
    }
    store.table().raise_floor(ms);
    if store.mode == GuardMode::Session {
        // Later sessions of this run start above the record.
        record_ended(ms).unwrap_or_else(|e| mark_error(e));
    }
    backing
        .read()
        .unwrap_or_else(|e| mark_error(e))
        .unwrap_or(ms)
}

/// This database's durable mark (ms since 1970), for
/// insta_id.high_water_mark(). Reads only: works on a standby and with a
/// read-only data directory. Before 0.9.0's first renewal, the file's.
pub fn mark_on_disk() -> Option<i64> {
    let stored = match SeqMark::find() {
        Some(seq) => seq.read(),
        None => Ok(None),
    };
    match stored {
        Ok(Some(ms)) => Some(ms),
        Ok(None) => legacy_mark().unwrap_or_else(|e| mark_error(e)),
        Err(e) => mark_error(e),
    }
}

/// The DSM registry (PostgreSQL 17+): shared memory found by name, no
/// preloading needed. The segment stays for the life of the server.
#[cfg(any(feature = "pg17", feature = "pg18"))]
pub mod registry {
    use super::*;
    use pgrx::pg_sys::panic::CaughtError;
    use pgrx::PgTryBuilder;
    use std::ffi::{c_void, CStr};

    // The init callback gets only a pointer: it reads the count from here.
    static INIT_BUCKETS: BackendCell<usize> = BackendCell::new(0);

    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn init(ptr: *mut c_void) {
        // SAFETY: PostgreSQL hands us the new segment of the size we asked
        // for, under its registry lock, before anyone else can see it.
        unsafe { initialise(ptr as *mut u8, INIT_BUCKETS.get()) };
    }

    /// Attaches (creating on first use) the segment `name` of `buckets`
    /// buckets. A segment of that name with another size (another build of
    /// insta_id loaded in this server) is refused with 55000.
    pub fn attach(name: &CStr, buckets: usize) -> Store {
        let size = size_of_table(buckets);
        INIT_BUCKETS.set(buckets);
        let ptr = PgTryBuilder::new(|| {
            let mut found = false;
            // SAFETY: a C call with a NUL-terminated name and a callback that
            // cannot fail; it raises an ERROR rather than return NULL.
            unsafe { pg_sys::GetNamedDSMSegment(name.as_ptr(), size, Some(init), &mut found) }
        })
        // GetNamedDSMSegment reports a size mismatch as an internal error.
        .catch_when(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, |e| match &e {
            CaughtError::PostgresError(r) if r.message().contains("does not match size") => raise!(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "the duplicate guard's shared memory \"{}\" exists with another size",
                    name.to_string_lossy()
                ),
                format!(
                    "This build of insta_id expects {size} bytes; another build with the same guard layout but another size is loaded in this server ({}).",
                    r.message()
                ),
                "Restart the server so that only one build of insta_id is loaded.",
            ),
            _ => e.rethrow(),
        })
        .execute();
        // SAFETY: the segment holds the initialised layout, is pinned and
        // stays mapped for the life of this backend.
        unsafe { laid_out(ptr as *mut u8, buckets, GuardMode::Shared) }
    }
}

fn shared_buckets() -> usize {
    (settings::MAX_SEQUENCES.get() as usize).div_ceil(WAYS)
}

fn shared_size() -> usize {
    size_of_table(shared_buckets())
}

static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn request_shmem() {
    // SAFETY: hooks run in the postmaster, single-threaded.
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST_HOOK {
            prev();
        }
        pg_sys::RequestAddinShmemSpace(shared_size());
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn startup_shmem() {
    // SAFETY: hooks run in the postmaster, single-threaded; ShmemInitStruct
    // returns memory of the size we requested.
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP_HOOK {
            prev();
        }
        let mut found = false;
        let ptr = pg_sys::ShmemInitStruct(
            c"insta_id duplicate guard".as_ptr(),
            shared_size(),
            &mut found,
        ) as *mut u8;
        // After a crash the server starts over with new shared memory: the
        // mark is then read again before the first ID.
        if !found {
            initialise(ptr, shared_buckets());
        }
        SHARED = ptr;
    }
}

/// Called from _PG_init: claims shared memory when loaded at server start.
pub fn init(at_server_start: bool) {
    if !at_server_start {
        return;
    }
    // SAFETY: _PG_init runs single-threaded; these are PostgreSQL's hook globals.
    unsafe {
        PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request_shmem);
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup_shmem);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUCKET_BYTES: usize = 1792;

    fn table(n: usize) -> Vec<DbSlot> {
        (0..n)
            .map(|_| DbSlot {
                key: AtomicU64::new(0),
                mark: MarkState::new(),
                _pad: 0,
            })
            .collect()
    }

    #[test]
    fn a_full_table_frees_the_slots_of_dropped_databases_only() {
        let slots = table(2);
        let (a, b, c) = (5u64 << 32 | 9, 6u64 << 32 | 9, 7u64 << 32 | 9);
        let live = |k: u64| k != a;
        assert!(std::ptr::eq(
            claim_slot(&slots, a, live).unwrap(),
            claim_slot(&slots, a, live).unwrap()
        ));
        claim_slot(&slots, a, live).unwrap().set_durable(10);
        claim_slot(&slots, b, live).unwrap().set_durable(20);
        // a's database is gone: c takes its slot, forgotten; b's is untouched.
        assert_eq!(claim_slot(&slots, c, live).unwrap().durable(), i64::MIN);
        assert_eq!(claim_slot(&slots, b, live).unwrap().durable(), 20);
        let keys: Vec<u64> = slots
            .iter()
            .map(|s| s.key.load(Ordering::Relaxed))
            .collect();
        assert!(keys.contains(&b) && keys.contains(&c));
        // Full of live databases: none.
        assert!(claim_slot(&slots, a, |_| true).is_none());
    }

    #[test]
    fn a_slot_being_reclaimed_is_nobodys() {
        let slots = table(1);
        slots[0].key.store(RECLAIMING, Ordering::Relaxed);
        // Neither claimed nor reclaimed again while its reclaimer resets it.
        assert!(claim_slot(&slots, 5u64 << 32, |_| false).is_none());
        assert_eq!(slots[0].key.load(Ordering::Relaxed), RECLAIMING);
    }

    #[test]
    fn a_late_reclaimer_leaves_a_slot_claimed_again_alone() {
        // The reclaimer has read the key of a dropped database (a); while it
        // asks whether a exists, another reclaimer frees the slot and a new
        // database (b) claims it and loads its mark. The late reclaimer must
        // neither reset b's mark nor free b's slot (0.9.0 reset it first).
        let slots = table(1);
        let (a, b, x) = (5u64 << 32 | 1, 6u64 << 32 | 1, 7u64 << 32 | 1);
        slots[0].key.store(a, Ordering::Relaxed);
        let meanwhile = std::cell::Cell::new(true);
        let exists = |k: u64| {
            if k == a && meanwhile.replace(false) {
                slots[0].key.store(0, Ordering::Release);
                claim_slot(&slots, b, |_| true).unwrap().set_durable(77);
            }
            k != a
        };
        assert!(claim_slot(&slots, x, exists).is_none());
        assert_eq!(
            (
                slots[0].key.load(Ordering::Relaxed),
                slots[0].mark.durable()
            ),
            (b, 77)
        );
    }

    #[test]
    fn concurrent_claims_and_reclaims_never_share_or_reset_a_live_slot() {
        // Six threads, each a database created and dropped 2,000 times (a
        // new key each time, as a new database or mark has), over 3 slots:
        // while its database lives, nobody takes its slot or resets it.
        let slots: &'static [DbSlot] = Box::leak(table(3).into_boxed_slice());
        let live: &'static [AtomicU64] = Box::leak(
            (0..7)
                .map(|_| AtomicU64::new(0))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let exists = |k: u64| live[(k >> 32) as usize].load(Ordering::Acquire) == k;
        let threads: Vec<_> = (1..=6u64)
            .map(|db| {
                std::thread::spawn(move || {
                    for generation in 1..=2_000u64 {
                        let key = db << 32 | generation;
                        live[db as usize].store(key, Ordering::Release);
                        if let Some(mark) = claim_slot(slots, key, exists) {
                            let slot = slots.iter().find(|s| std::ptr::eq(&s.mark, mark)).unwrap();
                            mark.set_durable(key as i64);
                            for _ in 0..50 {
                                assert_eq!(
                                    slot.key.load(Ordering::Acquire),
                                    key,
                                    "a live database's slot taken"
                                );
                                assert_eq!(
                                    mark.durable(),
                                    key as i64,
                                    "a live database's mark reset"
                                );
                                std::hint::spin_loop();
                            }
                        }
                        live[db as usize].store(0, Ordering::Release);
                        std::thread::yield_now();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn layout_is_pinned() {
        // A new Bucket layout needs a new REGISTRY_NAME: a segment made by
        // an older library must never be read as the new one.
        assert_eq!(
            (REGISTRY_NAME, std::mem::size_of::<Bucket>(), HEADER),
            (c"insta_id duplicate guard, layout 5", BUCKET_BYTES, 64)
        );
        // The registry segment's documented size.
        assert_eq!(size_of_table(REGISTRY_SEQUENCES.div_ceil(WAYS)), 3_801_152);
    }
}
