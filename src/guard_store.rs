//! Where the guard's table lives.
//!
//! - Preloaded (`shared_preload_libraries = 'insta_id'`), every version: in
//!   the server's shared memory, sized by `insta_id.max_sequences` at start.
//! - Not preloaded, PostgreSQL 17+: in a segment of the DSM registry
//!   (`GetNamedDSMSegment`), created by the first session that needs it and
//!   found by name by every later one. Exact across sessions like the above;
//!   its size is fixed (`REGISTRY_SEQUENCES`).
//! - Not preloaded, 15 and 16: in a dynamic shared memory segment created by
//!   the first session that needs it, pinned for the server's run, and found
//!   by every later one through the handle published in the data directory
//!   (`guard_segment`). Exact across sessions like the above, of the same
//!   fixed size as the registry's. A session that cannot attach refuses;
//!   there is no per-session fallback (0.9.0 and earlier had one, which let
//!   two sessions repeat each other's IDs).
//!
//! `insta_id.guard_mode()` says `shared` in every case.

use crate::guard::{Bucket, Seed, SeqStats, Stats, Table, WAYS};
use crate::mark::{self, Durable, MarkError, MarkFile, MarkState};
use crate::mark_wal::{SeqLock, SeqMark};
use crate::settings;
use crate::BackendCell;
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// The guard table's layout: change it (and the registry segment's name,
/// which carries it) whenever `Bucket` or the header changes, so that a
/// library never maps a table laid out by another (`layout_is_pinned` fails
/// until you do).
pub const LAYOUT: u32 = 5;
pub const REGISTRY_NAME: &std::ffi::CStr = c"insta_id duplicate guard, layout 5";
/// Sequences the guard tracks without preloading, in the registry's segment
/// or 15's and 16's (fixed: there is no server-start setting to size it).
/// About 3.5 MiB.
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
    db_slots: &'static [DbSlot],
}

/// This backend's store, decided on first use.
static STORE: BackendCell<Option<Store>> = BackendCell::new(None);

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
unsafe fn laid_out(ptr: *mut u8, buckets: usize) -> Store {
    unsafe {
        Store {
            header: &*(ptr as *const Header),
            db_slots: std::slice::from_raw_parts(ptr.add(HEADER) as *const DbSlot, DB_SLOTS),
            buckets: std::slice::from_raw_parts(
                ptr.add(HEADER + DB_SLOTS * DB_SLOT) as *const Bucket,
                buckets,
            ),
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
/// where the table is made (the postmaster, the first session of the
/// registry or of 15's and 16's segment), so cannot report an error: were the source to fail,
/// the key falls back to the clock and the process id, which a role that
/// cannot read the server's memory does not know to the microsecond.
fn random_seed() -> Seed {
    Seed::from_bytes(strong_random())
}

/// `N` bytes from the operating system's strong random source, or else
/// (see `random_seed`) the clock and the process id.
fn strong_random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    // SAFETY: fills the N bytes it is given.
    if !unsafe { pg_sys::pg_strong_random(bytes.as_mut_ptr().cast(), N) } {
        // SAFETY: plain reads of the clock and a global.
        let (now, pid) = unsafe { (pg_sys::GetCurrentTimestamp(), pg_sys::MyProcPid) };
        let fallback = [now.to_le_bytes(), i64::from(pid).to_le_bytes()].concat();
        for (b, f) in bytes.iter_mut().zip(fallback) {
            *b = f;
        }
    }
    bytes
}

fn size_of_table(buckets: usize) -> usize {
    HEADER + DB_SLOTS * DB_SLOT + buckets * std::mem::size_of::<Bucket>()
}

/// Preloaded: the startup shared memory; else on 17+ the registry segment,
/// on 15 and 16 the published one (either may raise, and is then tried
/// again on the next call).
#[cold]
fn resolve() -> Store {
    // SAFETY: written once in the postmaster before any backend exists.
    let ptr = unsafe { SHARED };
    if !ptr.is_null() {
        // SAFETY: the startup hook initialised this layout, which lives as
        // long as the server.
        return unsafe { laid_out(ptr, shared_buckets()) };
    }
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    let store = registry::attach(REGISTRY_NAME, REGISTRY_SEQUENCES.div_ceil(WAYS));
    #[cfg(not(any(feature = "pg17", feature = "pg18")))]
    let store = segment::attach(REGISTRY_SEQUENCES.div_ceil(WAYS));
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

// What pgrx leaves opaque in storage/pg_shmem.h (the same in 15 to 18): the
// header of the run's main shared memory, and the global pointing at it
// (declared there for EXEC_BACKEND builds, defined and exported in all).
// Only the published segment (15 and 16) needs them.
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
/// and at every crash restart), does. `None` when the header is not laid out
/// as expected: `segment::attach` then refuses.
#[cfg(not(any(feature = "pg17", feature = "pg18")))]
fn server_run() -> Option<crate::guard_segment::Run> {
    // SAFETY: plain reads of globals the postmaster set before forking this
    // backend; the header lives as long as the run.
    unsafe {
        let header = UsedShmemSegAddr as *const PGShmemHeader;
        match header.as_ref() {
            Some(h) if h.magic == PG_SHMEM_MAGIC => Some(crate::guard_segment::Run {
                started: pg_sys::PgStartTime,
                shmem: h.dsm_control as u64,
            }),
            _ => None,
        }
    }
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
            "next_id keeps there the highest millisecond it may issue IDs in (insta_id.mark, before 0.9.0's SQL) and, on PostgreSQL 15 and 16 without preloading, where every session finds the duplicate guard's shared memory (insta_id.guard).",
        ),
        MarkError::Damaged(d) => raise!(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("insta_id's high-water mark file \"{}\" is damaged", crate::mark::FILE_NAME),
            format!("It holds {} bytes that are not a mark written by insta_id: {:02x?}.", d.0.len(), d.0),
            "The file holds the highest millisecond this server may have issued IDs in; next_id refuses to run without it. Remove it only if the clock is known to be past every ID this server issued.",
        ),
    }
}

/// This database's mark as this backend uses it: its state (in shared
/// memory) and where it is kept. Decided, and the
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
/// any ID is issued.
#[cold]
fn load_db_mark(store: &Store) -> (&'static MarkState, &'static Backing) {
    let backing: &'static Backing = Box::leak(Box::new(backing()));
    if let Backing::Wal(seq) = backing {
        adopt_legacy_mark(seq).unwrap_or_else(|e| mark_error(e));
    }
    // SAFETY: a plain read of the backend's database.
    let db = unsafe { pg_sys::MyDatabaseId };
    let state = shared_slot(store.db_slots, db_key(db, backing));
    let table = store.table();
    let loaded = state.load(backing, |mark| {
        if let Some(mark) = mark {
            table.raise_floor(mark);
        }
        Ok(())
    });
    match loaded {
        Ok(Some(mark)) => {
            let ahead = mark - crate::clock::now_unix_ms();
            if ahead > 0 {
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

/// What insta_id.guard_mode() says, once the guard is found: every guard is
/// shared by the server's sessions (0.9.0 and earlier could say `session`).
pub fn mode() -> &'static str {
    store();
    "shared"
}

/// The guard in force for this session. Take it before nextval, so that a
/// refusal (below, the registry's or the mark's errors) uses up no value.
#[inline]
pub fn guard() -> Guard {
    // A write (the mark's renewal) that a standby or a read-only transaction
    // refuses: refused here, before anything (finding the guard may write
    // its file), with the SQLSTATE nextval gives.
    // SAFETY: a plain read of a global, then a C call that raises.
    if unsafe { pg_sys::XactReadOnly } {
        unsafe { pg_sys::PreventCommandIfReadOnly(c"insta_id.next_id()".as_ptr()) };
    }
    let store = store();
    let (mark, backing) = db_mark(&store);
    Guard {
        table: store.table(),
        mark,
        backing,
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
    // SAFETY: a plain read of a global of this backend.
    if unsafe { pg_sys::XactReadOnly } {
        return None;
    }
    Some(Guard {
        table: store.table(),
        mark,
        backing,
    })
}

/// The table and the high-water mark of one next_id call. Plain data (no
/// destructor): next_id holds it across the call into nextval.
#[derive(Clone, Copy)]
pub struct Guard {
    pub table: Table<'static>,
    mark: &'static MarkState,
    backing: &'static Backing,
}

impl Guard {
    /// Whether an ID of `ms` needs no renewal of the mark (`cover`): the
    /// usual path, which raises nothing.
    #[inline(always)]
    pub fn settled(&self, ms: i64) -> bool {
        self.mark.covers(ms) || crate::clock::scripted()
    }

    /// Returns once a durable mark covers `ms`: on the usual path, one
    /// atomic load and a compare.
    #[inline]
    pub fn cover(&self, ms: i64) {
        if self.mark.covers(ms) || crate::clock::scripted() {
            // (A scripted test clock must not move the real server's mark.)
            return;
        }
        // Each renewal (about ten a second under load) looks again for
        // sessions of an older library that began to mint since.
        #[cfg(not(any(feature = "pg17", feature = "pg18")))]
        segment::recheck();
        let (mark, backing) = refreshed(self.mark, self.backing);
        if let Err(e) = mark.cover(ms, || backing) {
            mark_error(e)
        }
    }
}

/// The guard's counts for insta_id.guard_stats() and guard_stats_total.
pub struct Report {
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

/// The counts for the server.
pub fn report() -> Report {
    let store = store();
    let table = store.table();
    let (totals, tracked) = table.totals();
    Report {
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
/// mark first, then every sequence in the guard's table. Returns the mark.
pub fn raise_mark(ms: i64) -> i64 {
    let store = store();
    let (mark, backing) = db_mark(&store);
    let (mark, backing) = refreshed(mark, backing);
    if let Err(e) = mark.cover(ms, || backing) {
        mark_error(e)
    }
    store.table().raise_floor(ms);
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

    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn init_fence(_ptr: *mut c_void) {}

    /// The registry names of the guards of earlier releases whose layouts
    /// this library cannot share: 0.3.0 (1), 0.4.0 (2), 0.5.0 to 0.8.0 (3).
    /// (0.9.0's is this one's, `REGISTRY_NAME`.)
    pub const OLDER: [&CStr; 3] = [
        c"insta_id duplicate guard, layout 1",
        c"insta_id duplicate guard, layout 2",
        c"insta_id duplicate guard, layout 3",
    ];
    /// The size of the segment holding an older name: no release's guard.
    const FENCE_SIZE: usize = 64;

    /// The segment `name` of `size` bytes, made by `init` if new; `Err` with
    /// PostgreSQL's message when it exists with another size.
    fn named(
        name: &CStr,
        size: usize,
        init: unsafe extern "C-unwind" fn(*mut c_void),
    ) -> Result<*mut c_void, String> {
        PgTryBuilder::new(|| {
            let mut found = false;
            // SAFETY: a C call with a NUL-terminated name and a callback that
            // cannot fail; it raises an ERROR rather than return NULL.
            Ok(unsafe { pg_sys::GetNamedDSMSegment(name.as_ptr(), size, Some(init), &mut found) })
        })
        // GetNamedDSMSegment reports a size mismatch as an internal error.
        // Every caller raises after an `Err`: the error was caught with the
        // registry's lock held, which only the transaction's abort releases.
        // (A translated message is not recognised: the error goes on as
        // PostgreSQL's, XX000, and refuses all the same.)
        .catch_when(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, |e| match &e {
            CaughtError::PostgresError(r) if r.message().contains("does not match size") => {
                Err(r.message().to_string())
            }
            _ => e.rethrow(),
        })
        .execute()
    }

    /// Attaches (creating on first use) the segment `name` of `buckets`
    /// buckets, once no older release's guard is in use in this server run
    /// (`OLDER`). Each older name is taken first, with a segment of a size
    /// no release's guard has: an older library loaded by a later session
    /// then fails to make its guard (its "exists with another size", 55000,
    /// which says to restart) rather than guard apart, and a guard an older
    /// library made first makes this one refuse (55000) likewise. A segment
    /// `name` of another size (another build of this layout) is refused with
    /// 55000 too.
    pub fn attach(name: &CStr, buckets: usize) -> Store {
        for older in OLDER {
            if let Err(found) = named(older, FENCE_SIZE, init_fence) {
                raise!(
                    PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                    "the duplicate guard of this server's sessions was made by another release of insta_id",
                    format!(
                        "Sessions of this server run use the guard \"{}\" of an earlier release, laid out otherwise; this library ({}) would guard apart from them ({found}).",
                        older.to_string_lossy(),
                        env!("CARGO_PKG_VERSION")
                    ),
                    "Restart the server, so that every session loads the library now installed.",
                )
            }
        }
        let size = size_of_table(buckets);
        INIT_BUCKETS.set(buckets);
        let ptr = named(name, size, init).unwrap_or_else(|found| {
            raise!(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "the duplicate guard's shared memory \"{}\" exists with another size",
                    name.to_string_lossy()
                ),
                format!(
                    "This build of insta_id expects {size} bytes; another build with the same guard layout but another size is loaded in this server ({found})."
                ),
                "Restart the server so that only one build of insta_id is loaded.",
            )
        });
        // SAFETY: the segment holds the initialised layout, is pinned and
        // stays mapped for the life of this backend.
        unsafe { laid_out(ptr as *mut u8, buckets) }
    }
}

/// PostgreSQL 15 and 16 without preloading: the run's guard segment, found
/// through the handle published in the data directory (`guard_segment`).
#[cfg(not(any(feature = "pg17", feature = "pg18")))]
pub mod segment {
    use super::*;
    use crate::guard_segment::{self as published, Found, Published, Stamp, STAMP};

    /// Attaches this run's segment of `buckets` buckets, making and
    /// publishing it if the run has none. Under the file's lock, so that one
    /// backend makes it and every other one finds it. Raises (and is tried
    /// again on the next call) when the file cannot be used, the run's guard
    /// is another release's, or the segment cannot be made.
    pub fn attach(buckets: usize) -> Store {
        let size = STAMP + size_of_table(buckets);
        let Some(run) = server_run() else {
            refuse("this server's shared memory header is not laid out as insta_id expects (PGShmemHeader)")
        };
        refuse_per_session_sessions(run);
        let ptr = published_segment(run, buckets, size);
        ATTACHED_RUN.set(Some(run));
        // SAFETY: the segment holds the initialised layout after its stamp,
        // is pinned, and stays mapped for the life of this backend.
        unsafe { laid_out(ptr.add(STAMP), buckets) }
    }

    /// The run's segment, found or made under the lock of the file that is
    /// in place once the lock is held: a file replaced meanwhile (removed by
    /// hand, then made again by another backend) would give two backends two
    /// locks.
    fn published_segment(run: published::Run, buckets: usize, size: usize) -> *mut u8 {
        loop {
            let file = MarkFile::open_named(&data_dir(), published::FILE_NAME, || false)
                .unwrap_or_else(|e| mark_error(e));
            let _lock = lock_cancellable(&file).unwrap_or_else(|e| mark_error(e));
            if !file.in_place().unwrap_or_else(|e| mark_error(e)) {
                continue;
            }
            let rec = file
                .read_record::<{ published::RECORD_LEN }>()
                .unwrap_or_else(|e| mark_error(e))
                .and_then(|bytes| published::decode(&bytes));
            return match published::decide(rec, run, LAYOUT, size as u64) {
                Found::Attach(p) => match attached(p) {
                    Some(ptr) => ptr,
                    // The run's record, but its segment is gone (a handle
                    // now naming another segment, or none): nobody maps it.
                    None => create(&file, run, buckets, size),
                },
                Found::Create => create(&file, run, buckets, size),
                Found::Foreign(p) => raise!(
                    PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                    "the duplicate guard of this server's sessions was made by another release of insta_id",
                    format!(
                        "Sessions of this server run use a guard of layout {} and {} bytes; this library ({}) uses layout {LAYOUT} and {size} bytes, and would guard apart from them.",
                        p.layout,
                        p.size,
                        env!("CARGO_PKG_VERSION")
                    ),
                    "Restart the server, so that every session loads the library now installed.",
                ),
            };
        }
    }

    /// The run whose segment this backend attached, once it has.
    static ATTACHED_RUN: BackendCell<Option<published::Run>> = BackendCell::new(None);

    /// Before a renewal of the mark: `refuse_per_session_sessions` again,
    /// where this backend uses the published segment.
    pub fn recheck() {
        if let Some(run) = ATTACHED_RUN.get() {
            refuse_per_session_sessions(run);
        }
    }

    /// Refuses when sessions of 0.9.0's library or earlier (a package
    /// upgraded under the running server) minted in this database in this
    /// run, guarding per session: this library's guard would not see them.
    /// Checked when the segment is attached and at each renewal of the mark
    /// (`recheck`): one that begins to mint in between is seen at the next.
    fn refuse_per_session_sessions(run: published::Run) {
        static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let name: &'static str = NAME.get_or_init(|| {
            // SAFETY: a plain read of the backend's database.
            let db = u32::from(unsafe { pg_sys::MyDatabaseId });
            format!("{}.{db}", published::PER_SESSION_FILE)
        });
        let rec = MarkFile::open_existing(&data_dir(), name)
            .and_then(|f| match f {
                Some(f) => f.read_record::<{ published::PER_SESSION_LEN }>(),
                None => Ok(None),
            })
            .unwrap_or_else(|e| mark_error(e));
        if rec.and_then(|r| published::per_session_run(&r)) == Some(run) {
            raise!(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "sessions of an earlier release of insta_id mint IDs in this database with a guard of their own",
                format!(
                    "In this server run, sessions that loaded the library of insta_id 0.9.0 used its per-session guard in this database (\"{name}\"); this library ({}) would guard apart from them.",
                    env!("CARGO_PKG_VERSION")
                ),
                "Restart the server, so that every session loads the library now installed.",
            )
        }
    }

    /// The published segment mapped for the life of this backend, if it is
    /// still the one the record describes.
    fn attached(p: Published) -> Option<*mut u8> {
        // A handle this backend maps already (reused by a segment of its
        // own, a parallel query's, say) is checked where it is mapped:
        // dsm_attach refuses to map a segment twice.
        // SAFETY: a lookup in this backend's list of mappings.
        let mapped = unsafe { pg_sys::dsm_find_mapping(p.handle) };
        if !mapped.is_null() {
            // SAFETY: a mapped segment: its address, length and stamp.
            return unsafe {
                let ptr = pg_sys::dsm_segment_address(mapped) as *mut u8;
                let len = pg_sys::dsm_segment_map_length(mapped);
                (len >= STAMP && published::stamped(&*(ptr as *const Stamp), len, p)).then(|| {
                    pg_sys::dsm_pin_mapping(mapped);
                    ptr
                })
            };
        }
        // SAFETY: dsm_attach returns NULL for a handle no live segment has.
        let seg = unsafe { pg_sys::dsm_attach(p.handle) };
        if seg.is_null() {
            return None;
        }
        // SAFETY: a mapped segment: its address and length, then a read of
        // the stamp (plain bytes) within it.
        unsafe {
            let ptr = pg_sys::dsm_segment_address(seg) as *mut u8;
            let mapped = pg_sys::dsm_segment_map_length(seg);
            if mapped < STAMP || !published::stamped(&*(ptr as *const Stamp), mapped, p) {
                pg_sys::dsm_detach(seg);
                return None;
            }
            pg_sys::dsm_pin_mapping(seg);
            Some(ptr)
        }
    }

    /// Makes the run's segment, publishes it, then pins it. An error before
    /// the pin leaves nothing behind: the transaction's resource owner
    /// detaches the segment, and the file then names a segment that is gone.
    fn create(file: &MarkFile, run: published::Run, buckets: usize, size: usize) -> *mut u8 {
        // SAFETY: dsm_create raises rather than return NULL without
        // DSM_CREATE_NULL_IF_MAXSEGMENTS; the new segment is ours alone
        // until its handle is published, under the lock we hold.
        unsafe {
            let seg = pg_sys::dsm_create(size, 0);
            let ptr = pg_sys::dsm_segment_address(seg) as *mut u8;
            let p = Published {
                run,
                handle: pg_sys::dsm_segment_handle(seg),
                layout: LAYOUT,
                size: size as u64,
                token: u64::from_le_bytes(strong_random()),
            };
            initialise(ptr.add(STAMP), buckets);
            (ptr as *mut Stamp).write(Stamp::of(p));
            file.write_record(&published::encode(p))
                .unwrap_or_else(|e| mark_error(e));
            pg_sys::dsm_pin_segment(seg);
            pg_sys::dsm_pin_mapping(seg);
            ptr
        }
    }

    fn refuse(why: &str) -> ! {
        raise!(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "insta_id cannot find this server's duplicate guard",
            format!("Without shared_preload_libraries, PostgreSQL 15 and 16 sessions share the guard through a dynamic shared memory segment; {why}."),
            "Add insta_id to shared_preload_libraries and restart the server.",
        )
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
