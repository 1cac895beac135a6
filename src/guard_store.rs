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
//!   makes next_id refuse to run that way.
//!
//! `insta_id.guard_mode()` says `shared` for the first two, `session` else.

use crate::guard::{Bucket, Table, WAYS};
use crate::settings;
use crate::BackendCell;
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

/// Buckets of a session-local table (2048 sequences, about 300 kB).
#[cfg(not(any(feature = "pg17", feature = "pg18")))]
const SESSION_BUCKETS: usize = 256;

/// The registry segment's name carries the guard table's layout: change the
/// name whenever `Bucket` changes, so that a library never maps a segment
/// laid out by another (`layout_is_pinned` fails until you do).
pub const REGISTRY_NAME: &std::ffi::CStr = c"insta_id duplicate guard, layout 1";
/// Sequences the registry segment tracks (fixed: without preloading there is
/// no server-start setting to size it). About 2.3 MiB.
pub const REGISTRY_SEQUENCES: usize = 16_384;

// Set in the postmaster by the shmem startup hook; children inherit it.
static mut SHARED: (*const Bucket, usize) = (std::ptr::null(), 0);

/// This backend's table and its reach, decided on first use.
static STORE: BackendCell<Option<(&'static [Bucket], GuardMode)>> = BackendCell::new(None);

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

/// The table in force and its reach: the cached decision after the first call.
#[inline]
fn store() -> (&'static [Bucket], GuardMode) {
    match STORE.get() {
        Some(store) => store,
        None => {
            let store = resolve();
            STORE.set(Some(store));
            store
        }
    }
}

/// Preloaded: the startup shared memory; else on 17+ the registry segment
/// (which may raise, and is then tried again on the next call); else a table
/// of this session's own.
#[cold]
fn resolve() -> (&'static [Bucket], GuardMode) {
    // SAFETY: written once in the postmaster before any backend exists.
    let (ptr, len) = unsafe { SHARED };
    if !ptr.is_null() {
        // SAFETY: ptr/len describe the initialised shared array, which lives
        // as long as the server.
        return (
            unsafe { std::slice::from_raw_parts(ptr, len) },
            GuardMode::Shared,
        );
    }
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    let store = (
        registry::attach(REGISTRY_NAME, REGISTRY_SEQUENCES.div_ceil(WAYS)),
        GuardMode::Shared,
    );
    #[cfg(not(any(feature = "pg17", feature = "pg18")))]
    let store = (
        &*Box::leak(
            (0..SESSION_BUCKETS)
                .map(|_| Bucket::new())
                .collect::<Box<[Bucket]>>(),
        ),
        GuardMode::Session,
    );
    store
}

pub fn mode() -> GuardMode {
    store().1
}

/// The guard table in force for this session. Call it before nextval, so
/// that a refusal (below, or the registry's errors) uses up no value.
#[inline]
pub fn table() -> Table<'static> {
    let (buckets, mode) = store();
    if mode == GuardMode::Session && settings::require_shared_guard() {
        raise!(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "insta_id.next_id refuses to run with a per-session duplicate guard",
            "insta_id.require_shared_guard is on, and this server keeps the guard per session: insta_id is not in shared_preload_libraries and PostgreSQL is older than 17.",
            "Add insta_id to shared_preload_libraries and restart the server, or turn insta_id.require_shared_guard off.",
        );
    }
    Table::new(buckets)
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
        let ptr = ptr as *mut Bucket;
        // SAFETY: PostgreSQL hands us the new segment of the size we asked
        // for, under its registry lock, before anyone else can see it.
        for i in 0..INIT_BUCKETS.get() {
            unsafe { ptr.add(i).write(Bucket::new()) };
        }
    }

    /// Attaches (creating on first use) the segment `name` of `buckets`
    /// buckets. A segment of that name with another size (another build of
    /// insta_id loaded in this server) is refused with 55000.
    pub fn attach(name: &CStr, buckets: usize) -> &'static [Bucket] {
        let size = buckets * std::mem::size_of::<Bucket>();
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
        // SAFETY: the segment holds `buckets` initialised buckets, is pinned
        // and stays mapped for the life of this backend.
        unsafe { std::slice::from_raw_parts(ptr as *const Bucket, buckets) }
    }
}

fn shared_buckets() -> usize {
    (settings::MAX_SEQUENCES.get() as usize).div_ceil(WAYS)
}

fn shared_size() -> usize {
    shared_buckets() * std::mem::size_of::<Bucket>()
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
        ) as *mut Bucket;
        let len = shared_buckets();
        if !found {
            for i in 0..len {
                ptr.add(i).write(Bucket::new());
            }
        }
        SHARED = (ptr, len);
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

    #[test]
    fn layout_is_pinned() {
        // A new Bucket layout needs a new REGISTRY_NAME: a segment made by
        // an older library must never be read as the new one.
        assert_eq!(
            (REGISTRY_NAME, std::mem::size_of::<Bucket>()),
            (c"insta_id duplicate guard, layout 1", 1168)
        );
        // The registry segment's documented size.
        assert_eq!(REGISTRY_SEQUENCES.div_ceil(WAYS) * 1168, 2_392_064);
    }
}
