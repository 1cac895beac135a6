//! The `insta_id.*` settings (GUCs).
//!
//! - `insta_id.epoch` (superuser): ms since 1970-01-01 UTC that time 0 of an
//!   ID stands for. Default: Instagram's epoch. Set it once per server or
//!   database, before the first ID, and never change it: decoders declared
//!   IMMUTABLE read it too.
//! - `insta_id.on_overflow` (superuser): `wait`, `error` or `legacy`.
//! - `insta_id.require_shared_guard` (superuser): no effect since 0.10.0
//!   (every guard is shared); kept so that a setting of it stays valid.
//! - `insta_id.track_guard_stats` (superuser): count what the guard does
//!   (insta_id.guard_stats()); on by default.
//! - `insta_id.max_lead` (superuser): how far ahead of the clock an ID's
//!   millisecond may be (after a step back, a restart, a raised mark); past
//!   it next_id waits for the clock (or raises, in error mode).
//! - `insta_id.max_clock_wait` (any role, for its own sessions): how long
//!   one next_id may wait for the clock to pass IDs already issued (a
//!   failover to a server whose clock is behind); past it, 55000. At least
//!   100 ms: waits for a millisecond full of IDs never come near it.
//! - `insta_id.max_sequences` (server start): slots of the preloaded guard.

use crate::layout::{self, INSTAGRAM_EPOCH_MS};
use crate::BackendCell;
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::prelude::*;
use pgrx::PostgresGucEnum;
use std::ffi::{CStr, CString};

#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum OnOverflow {
    /// Move to the next millisecond; IDs stay unique and time-ordered.
    #[name = c"wait"]
    Wait,
    /// Raise 54000 (program_limit_exceeded).
    #[name = c"error"]
    Error,
    /// Instagram's original: wrap the 10-bit field, duplicates and all.
    #[name = c"legacy"]
    Legacy,
}

pub static ON_OVERFLOW: GucSetting<OnOverflow> = GucSetting::<OnOverflow>::new(OnOverflow::Wait);

static EPOCH_TEXT: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"1314220021721"));

static REQUIRE_SHARED_GUARD: GucSetting<bool> = GucSetting::<bool>::new(false);

static TRACK_GUARD_STATS: GucSetting<bool> = GucSetting::<bool>::new(true);

/// Whether next_id counts into insta_id.guard_stats() (every call).
#[inline]
pub fn track_guard_stats() -> bool {
    // SAFETY: the GUC's storage, read without pgrx's per-read thread check.
    unsafe { *TRACK_GUARD_STATS.as_ptr() }
}

/// insta_id.max_lead's default and ceiling, in ms.
pub const MAX_LEAD_DEFAULT_MS: i32 = 1_000;
pub const MAX_LEAD_CEILING_MS: i32 = 3_600_000;
static MAX_LEAD: GucSetting<i32> = GucSetting::<i32>::new(MAX_LEAD_DEFAULT_MS);

/// How far ahead of the clock next_id may put an ID's millisecond (every call).
#[inline]
pub fn max_lead_ms() -> i64 {
    // SAFETY: the GUC's storage, read without pgrx's per-read thread check.
    unsafe { *MAX_LEAD.as_ptr() as i64 }
}

/// insta_id.max_clock_wait's default, in ms: ten times the default lead.
/// A wait that long means the clock is seconds behind the server that
/// issued the IDs (clocks kept by chrony or ntpd differ by milliseconds),
/// and every writer of the database waits with it: an error that names
/// the cause serves better than a stall past clients' own timeouts.
pub const MAX_CLOCK_WAIT_DEFAULT_MS: i32 = 10_000;
static MAX_CLOCK_WAIT: GucSetting<i32> = GucSetting::<i32>::new(MAX_CLOCK_WAIT_DEFAULT_MS);

/// How long one next_id may wait for the clock, in ms (its slow path).
pub fn max_clock_wait_ms() -> i64 {
    // SAFETY: the GUC's storage, read without pgrx's per-read thread check.
    unsafe { *MAX_CLOCK_WAIT.as_ptr() as i64 }
}

pub static MAX_SEQUENCES: GucSetting<i32> = GucSetting::<i32>::new(16_384);

// Parsed copy of insta_id.epoch, kept in step by the assign hook so the hot
// path never parses text.
static EPOCH_MS: BackendCell<i64> = BackendCell::new(INSTAGRAM_EPOCH_MS);

/// The epoch in force, in ms since 1970-01-01 UTC.
#[inline]
pub fn epoch_ms() -> i64 {
    EPOCH_MS.get()
}

/// The overflow policy in force.
#[inline]
pub fn on_overflow() -> OnOverflow {
    // SAFETY: the GUC's storage, read without pgrx's per-read thread check
    // (this is on every next_id call). Ordinals follow declaration order.
    match unsafe { *ON_OVERFLOW.as_ptr() } {
        1 => OnOverflow::Error,
        2 => OnOverflow::Legacy,
        _ => OnOverflow::Wait,
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn check_epoch(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to a C string (or NULL).
    let text = unsafe {
        if newval.is_null() || (*newval).is_null() {
            return false;
        }
        CStr::from_ptr(*newval)
    };
    let ok = text.to_str().ok().and_then(layout::parse_epoch).is_some();
    if !ok {
        // SAFETY: plain setters of the GUC error-reporting globals.
        unsafe {
            pg_sys::GUC_check_errcode(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE as i32);
            pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(
                c"insta_id.epoch is a whole number of milliseconds since 1970-01-01 00:00 UTC, between 0 and 253402300799999 (Instagram's is 1314220021721).".as_ptr(),
            );
        }
    }
    ok
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_epoch(
    newval: *const std::ffi::c_char,
    _extra: *mut std::ffi::c_void,
) {
    // SAFETY: the check hook accepted this string.
    let text = unsafe { CStr::from_ptr(newval) };
    let ms = text
        .to_str()
        .ok()
        .and_then(layout::parse_epoch)
        .unwrap_or(INSTAGRAM_EPOCH_MS);
    EPOCH_MS.set(ms);
}

/// Defines the settings. `at_server_start`: loaded through
/// shared_preload_libraries, the only time a PGC_POSTMASTER setting may be
/// defined (later, PostgreSQL refuses with FATAL).
pub fn define(at_server_start: bool) {
    GucRegistry::define_enum_guc(
        c"insta_id.on_overflow",
        c"What next_id does when one sequence needs more than 1024 IDs in a millisecond.",
        c"wait: move to the next millisecond (default); error: raise SQLSTATE 54000; legacy: wrap like Instagram's original function, which repeats IDs.",
        &ON_OVERFLOW,
        GucContext::Suset,
        GucFlags::default(),
    );
    // SAFETY: both hooks are #[pg_guard]ed.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"insta_id.epoch",
            c"Epoch of the ID time field, in milliseconds since 1970-01-01 00:00 UTC.",
            c"Default 1314220021721 (Instagram's, 2011-08-24 21:07:01.721 UTC). Set once before the first ID and never change it: decoding with another epoch gives other times.",
            &EPOCH_TEXT,
            GucContext::Suset,
            GucFlags::default(),
            Some(check_epoch),
            Some(assign_epoch),
            None,
        );
    }
    GucRegistry::define_bool_guc(
        c"insta_id.require_shared_guard",
        c"No effect since 0.10.0: the duplicate guard is shared by every session in every configuration.",
        c"0.9.0 and earlier kept the guard per session on PostgreSQL 15 and 16 without shared_preload_libraries, and this made next_id refuse to run that way. Kept so that a setting of it stays valid.",
        &REQUIRE_SHARED_GUARD,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"insta_id.track_guard_stats",
        c"Counts what the duplicate guard does for each sequence (insta_id.guard_stats()).",
        c"IDs issued, waits for the next millisecond and their time, milliseconds borrowed after the clock stepped back, 54000 errors. The counts are kept under the lock next_id takes anyway.",
        &TRACK_GUARD_STATS,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"insta_id.max_lead",
        c"How far ahead of the clock next_id may put an ID's time field.",
        c"IDs run ahead of the clock after it steps back, after a restart or a raised high-water mark, and while one sequence needs more than 1024 IDs a millisecond behind a clock; past this lead next_id waits for the clock (on_overflow = 'error': raises 54000). next_id never writes the high-water mark more than the lead in force plus 200 ms ahead.",
        &MAX_LEAD,
        0,
        MAX_LEAD_CEILING_MS,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"insta_id.max_clock_wait",
        c"How long one next_id may wait for the clock to pass IDs already issued.",
        c"next_id waits while the clock is more than insta_id.max_lead behind IDs this database issued: after a failover or switchover to a server whose clock is behind, or a clock stepped back. Every writer of the database waits with it; past this bound next_id raises 55000 naming the wait instead. Waits of a second or more are logged at their start and end.",
        &MAX_CLOCK_WAIT,
        100,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    if !at_server_start {
        return;
    }
    GucRegistry::define_int_guc(
        c"insta_id.max_sequences",
        c"Sequences the preloaded duplicate guard tracks at once (needs shared_preload_libraries; without it, PostgreSQL 17+ tracks 16384).",
        c"Each takes about 225 bytes of shared memory. When more sequences are in use, the least recently used one of a bucket is evicted; a sequence coming into that bucket cannot reuse what evicted ones used in the bucket's last millisecond, which can cost a wait of under a millisecond but never a duplicate.",
        &MAX_SEQUENCES,
        64,
        1 << 24,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}
