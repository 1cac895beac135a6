//! Where the guard's table lives.
//!
//! With `shared_preload_libraries = 'insta_id'` the table is in shared memory
//! and every session of the server sees it: exact across sessions. Without
//! it (managed hosting often forbids preloading) each session keeps its own
//! table: exact within the session; see the README for what that means
//! across sessions. `insta_id.guard_mode()` says which one is in force.

use crate::guard::{Bucket, Table, WAYS};
use crate::settings;
use crate::BackendCell;
use pgrx::pg_sys;

/// Buckets of a session-local table (2048 sequences, about 300 kB).
const SESSION_BUCKETS: usize = 256;

// Set in the postmaster by the shmem startup hook; children inherit it.
static mut SHARED: (*const Bucket, usize) = (std::ptr::null(), 0);

static SESSION: BackendCell<Option<&'static [Bucket]>> = BackendCell::new(None);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GuardMode {
    /// Shared memory: exact across all sessions of the server.
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

#[inline]
fn shared() -> Option<&'static [Bucket]> {
    // SAFETY: written once in the postmaster before any backend exists.
    let (ptr, len) = unsafe { SHARED };
    if ptr.is_null() {
        None
    } else {
        // SAFETY: ptr/len describe the initialised shared array, which lives
        // as long as the server.
        Some(unsafe { std::slice::from_raw_parts(ptr, len) })
    }
}

pub fn mode() -> GuardMode {
    if shared().is_some() {
        GuardMode::Shared
    } else {
        GuardMode::Session
    }
}

/// The guard table in force for this session.
#[inline]
pub fn table() -> Table<'static> {
    match shared() {
        Some(buckets) => Table::new(buckets),
        None => Table::new(match SESSION.get() {
            Some(buckets) => buckets,
            None => {
                let buckets = Box::leak((0..SESSION_BUCKETS).map(|_| Bucket::new()).collect());
                SESSION.set(Some(buckets));
                buckets
            }
        }),
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
        #[cfg(any(feature = "pg13", feature = "pg14"))]
        pg_sys::RequestAddinShmemSpace(shared_size());
        #[cfg(not(any(feature = "pg13", feature = "pg14")))]
        {
            PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
            pg_sys::shmem_request_hook = Some(request_shmem);
        }
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup_shmem);
    }
}
