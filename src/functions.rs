//! The SQL-facing functions, as plain version-1 fmgr functions.
//!
//! Their SQL declarations (volatility, strictness, parallel safety) are in
//! `src/sql/ids.sql` and `src/sql/guard.sql`; every one is STRICT, so no argument here is NULL.
//! They are written against fmgr directly, not through #[pg_extern], because
//! next_id sits in column DEFAULTs on the insert path: every nanosecond of
//! wrapper shows up in INSERT throughput.

// The `unsafe extern` functions are fmgr entry points: their one contract is
// PostgreSQL's (a valid fcinfo with the declared arguments).
#![allow(clippy::missing_safety_doc)]

use crate::clock;
use crate::guard::{Admit, Overflow, Policy, SeqKey, Stats};
use crate::guard_store::{self, Guard};
use crate::layout::{self, LayoutError};
use crate::settings::{self, OnOverflow};
use crate::shortcode::{self, ShortcodeError};
use crate::BackendCell;
use pgrx::pg_sys::{self, Datum, FunctionCallInfo};
use pgrx::{pg_guard, PgSqlErrorCode};

#[inline(always)]
pub(crate) unsafe fn arg(fcinfo: FunctionCallInfo, n: usize) -> Datum {
    // SAFETY: the caller passes a valid fcinfo with at least n+1 arguments.
    unsafe { (*fcinfo).args.as_slice(n + 1)[n].value }
}

#[inline(always)]
unsafe fn arg_i64(fcinfo: FunctionCallInfo, n: usize) -> i64 {
    unsafe { arg(fcinfo, n).value() as i64 }
}

#[inline(always)]
unsafe fn arg_i32(fcinfo: FunctionCallInfo, n: usize) -> i32 {
    unsafe { arg(fcinfo, n).value() as i32 }
}

/// Raises the error for a value that cannot be (part of) an ID.
fn layout_error(err: LayoutError, epoch_ms: i64) -> ! {
    match err {
        LayoutError::ShardOutOfRange(shard) => raise!(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("shard id {shard} is out of range"),
            format!("A shard id must be between 0 and {}.", layout::MAX_SHARD),
        ),
        LayoutError::BeforeEpoch(_) => raise!(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            "time is before the insta_id epoch",
            format!(
                "The epoch is {epoch_ms} ms since 1970-01-01 UTC (insta_id.epoch); IDs cannot encode earlier times."
            ),
        ),
        LayoutError::PastTimeField(ms) => raise!(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            "time is past the end of the 41-bit ID time field",
            format!(
                "The time is {ms} ms after the epoch; the field holds at most {} ms (until {} ms since 1970-01-01 UTC).",
                layout::MAX_MS,
                epoch_ms + layout::MAX_MS
            ),
        ),
        LayoutError::NegativeSequenceValue(v) => raise!(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("sequence value {v} is negative"),
            "insta_id.next_id needs a sequence that hands out values >= 0 (an ascending sequence with MINVALUE 0 or more).",
        ),
    }
}

#[inline]
fn ok_or_raise<T>(r: Result<T, LayoutError>, epoch_ms: i64) -> T {
    match r {
        Ok(v) => v,
        Err(e) => layout_error(e, epoch_ms),
    }
}

// PostgreSQL's nextval() itself, with its privilege, read-only/standby and
// sequence-option checks, and its currval()/lastval() bookkeeping.
unsafe extern "C-unwind" {
    fn nextval_internal(relid: pg_sys::Oid, check_permissions: bool) -> i64;
}

/// Refuses an OID that is not a sequence with the errors users know.
/// nextval_internal also checks the relkind, but reports a missing OID as an
/// internal error; this turns that into undefined_table.
fn check_is_sequence(relid: pg_sys::Oid) {
    // SAFETY: syscache lookups by OID; no Rust values with destructors live across them.
    let relkind = unsafe { pg_sys::get_rel_relkind(relid) } as u8;
    if relkind == 0 {
        raise!(
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            format!("relation with OID {} does not exist", relid.to_u32()),
        );
    }
    if relkind != pg_sys::RELKIND_SEQUENCE {
        raise!(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            format!("\"{}\" is not a sequence", relation_name(relid)),
            "insta_id.next_id takes the sequence of the table, for example 'myschema.mytable_id_seq'::regclass.",
        );
    }
    if has_fence_shape(relid) {
        check_fence(relid);
    }
}

/// A row of pg_sequence (catalog/pg_sequence.h, the same in 15 to 18),
/// which pgrx does not bind.
#[repr(C)]
struct PgSequenceRow {
    seqrelid: pg_sys::Oid,
    seqtypid: pg_sys::Oid,
    seqstart: i64,
    seqincrement: i64,
    seqmax: i64,
    seqmin: i64,
    seqcache: i64,
    seqcycle: bool,
}

/// Whether the sequence has the shape a move's fence gives it (two values,
/// NO CYCLE: `_fence_sequences`, src/sql/moves.sql), which next_id must
/// not mint from; the fence's record decides (`check_fence`).
fn has_fence_shape(relid: pg_sys::Oid) -> bool {
    // SAFETY: a syscache lookup by OID, released before returning; the
    // tuple of pg_sequence is a FormData_pg_sequence.
    unsafe {
        let tuple = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::SEQRELID as _,
            Datum::from(relid),
        );
        if tuple.is_null() {
            return false;
        }
        let form = pg_sys::heap_tuple_get_struct::<PgSequenceRow>(tuple);
        let row = &*form;
        debug_assert_eq!(row.seqrelid, relid);
        let shape = !row.seqcycle && row.seqmax.wrapping_sub(row.seqmin) == 1;
        pg_sys::ReleaseSysCache(tuple);
        shape
    }
}

/// Raises 55006, naming the server holding the shard, when the sequence is
/// fenced: insta_id._check_sequence_fence, a SECURITY DEFINER function
/// called through fmgr. Only for a caller that may use the sequence (as
/// nextval would check: the others get nextval's 42501, and learn nothing
/// of the fence). Found in the syscache, without the EXECUTE and schema
/// USAGE checks a call from SQL makes: whoever may call next_id on the
/// sequence may be told why it refuses. Before the extension's SQL is
/// updated to 0.10.0 there is no such function and no fence.
#[cold]
fn check_fence(relid: pg_sys::Oid) {
    // SAFETY: ACL and syscache lookups by OID and by name; the oidvector is
    // palloc'd; the call raises or returns a boolean.
    unsafe {
        let may_use = pg_sys::pg_class_aclcheck(
            relid,
            pg_sys::GetUserId(),
            (pg_sys::ACL_USAGE | pg_sys::ACL_UPDATE) as pg_sys::AclMode,
        ) == pg_sys::AclResult::ACLCHECK_OK;
        let nsp = pg_sys::get_namespace_oid(c"insta_id".as_ptr(), true);
        if !may_use || nsp == pg_sys::InvalidOid {
            return;
        }
        let arg_types = pg_sys::buildoidvector([pg_sys::OIDOID].as_ptr(), 1);
        let fn_oid = pg_sys::GetSysCacheOid(
            pg_sys::SysCacheIdentifier::PROCNAMEARGSNSP as _,
            pg_sys::Anum_pg_proc_oid as _,
            Datum::from(c"_check_sequence_fence".as_ptr()),
            Datum::from(arg_types),
            Datum::from(nsp),
            Datum::from(0),
        );
        if fn_oid != pg_sys::InvalidOid {
            pg_sys::OidFunctionCall1Coll(fn_oid, pg_sys::InvalidOid, Datum::from(relid));
        }
    }
}

fn relation_name(relid: pg_sys::Oid) -> String {
    // SAFETY: get_rel_name returns a palloc'd C string or NULL.
    unsafe {
        let p = pg_sys::get_rel_name(relid);
        if p.is_null() {
            relid.to_u32().to_string()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// OIDs that passed check_is_sequence, direct-mapped by their low bits: a
/// statement spreading calls over many sequences still checks each once.
const CHECKED_SLOTS: usize = 1024;

/// Slot i starts at i + 1, an OID that maps to another slot, so no OID
/// counts as checked before it was (a start of 0 let InvalidOid through to
/// nextval: XX000, found by tests/pg_regress 08_boundaries).
static CHECKED: [BackendCell<u32>; CHECKED_SLOTS] = {
    let mut slots = [const { BackendCell::new(0) }; CHECKED_SLOTS];
    let mut i = 0;
    while i < CHECKED_SLOTS {
        slots[i] = BackendCell::new(i as u32 + 1);
        i += 1;
    }
    slots
};

/// Forgets an OID when its relation changes or goes: DROP SEQUENCE sends
/// every backend a relcache invalidation of it, and a reset of the whole
/// cache comes as InvalidOid. Without this a dropped sequence's OID went on
/// to nextval, whose lookup fails with an internal error (XX000 "could not
/// open relation with OID"), instead of 42P01.
unsafe extern "C-unwind" fn forget_checked(_arg: Datum, relid: pg_sys::Oid) {
    let oid = relid.to_u32();
    for (i, slot) in CHECKED.iter().enumerate() {
        if oid == 0 || slot.get() == oid {
            slot.set(i as u32 + 1);
        }
    }
}

/// Registers `forget_checked` (from _PG_init: once per backend, or in the
/// postmaster, whose backends inherit it).
pub(crate) fn init() {
    // SAFETY: a callback with the signature PostgreSQL expects, touching
    // only this backend's cells.
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(forget_checked), Datum::from(0)) };
}

/// Whether `relid` passed check_is_sequence since its last invalidation.
#[inline(always)]
fn is_checked_sequence(relid: pg_sys::Oid) -> bool {
    let oid = relid.to_u32();
    CHECKED[oid as usize % CHECKED_SLOTS].get() == oid
}

fn check_is_sequence_cached(relid: pg_sys::Oid) {
    if !is_checked_sequence(relid) {
        check_is_sequence(relid);
        CHECKED[relid.to_u32() as usize % CHECKED_SLOTS].set(relid.to_u32());
    }
}

/// Waits until the clock passes `ms`, staying cancellable: sleeps on the
/// latch (like pg_sleep) while more than a millisecond is left, then spins.
/// Returns the clock reading and the microseconds waited (monotonic clock).
#[cold]
fn wait_past(ms: i64) -> (i64, u64) {
    let start = std::time::Instant::now();
    loop {
        let now = clock::now_unix_ms();
        if now > ms {
            return (now, start.elapsed().as_micros() as u64);
        }
        #[cfg(feature = "pg_test")]
        if clock::test_clock::is_frozen() {
            raise!(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                "a test froze the scripted clock where next_id has to wait for it"
            );
        }
        let left = ms - now;
        if left > 1 && !clock::scripted() {
            // Wake a millisecond early: latch timeouts are coarse.
            crate::latch::nap((left - 1).min(1000), pg_sys::PG_WAIT_EXTENSION);
        } else {
            std::hint::spin_loop();
            pgrx::check_for_interrupts!();
        }
    }
}

/// A wait for the clock this long or longer is logged at its start and end
/// (every writer of the database waits with it: the DBA looks for why).
const LOG_WAIT_MS: i64 = 1_000;

/// `wait_past(ms)` for sequence `relid`, after `waited_us` of this call's
/// waits: refused (55000) past insta_id.max_clock_wait (its minimum, 100
/// ms, far above the waits of a millisecond full of IDs), logged when long
/// (its end only when it completes: a cancel ends it first).
#[cold]
fn wait_for_clock(relid: pg_sys::Oid, ms: i64, waited_us: u64) -> (i64, u64) {
    // (Read again: the caller's reading was taken before the guard's lock,
    // and a stall since would make the wait look longer than it is.)
    let left = ms - clock::now_unix_ms();
    let total = (waited_us / 1000) as i64 + left;
    let bound = settings::max_clock_wait_ms();
    if total > bound {
        raise!(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "next_id would wait {total} ms for the clock, longer than insta_id.max_clock_wait ({bound} ms)"
            ),
            format!(
                "Sequence \"{}\" needs millisecond {ms} since 1970-01-01 UTC: this server's clock is behind IDs this database already issued, by more than insta_id.max_lead.",
                relation_name(relid)
            ),
            "A failover or switchover to a server whose clock is behind, or a clock stepped back: keep the servers' clocks disciplined (chrony or ntpd; docs/ha.md), or raise insta_id.max_clock_wait to wait for it.",
        );
    }
    // (The name looked up once, before the wait.)
    let logged = (left >= LOG_WAIT_MS).then(|| relation_name(relid));
    if let Some(name) = &logged {
        pgrx::log!(
            "insta_id: next_id of sequence \"{name}\" waits {left} ms for the clock to pass IDs already issued (millisecond {ms} since 1970-01-01 UTC)"
        );
    }
    let (now, waited) = wait_past(ms);
    if let Some(name) = &logged {
        let waited_ms = waited / 1000;
        pgrx::log!("insta_id: next_id of sequence \"{name}\" waited {waited_ms} ms for the clock");
    }
    (now, waited)
}

/// Where the usual path of a call left off when it could not finish: the
/// slow path (`mint`) takes over from there.
#[derive(Clone, Copy)]
enum Taken {
    /// Nothing done after nextval.
    Nothing,
    /// The guard's first answer at clock reading `now` (already counted).
    Admitted(Admit, i64),
}

/// The usual path after nextval: the clock read, the guard admits the
/// millisecond, the mark already covers it. Raises nothing and calls nothing
/// that can (it runs outside pgrx's guard); anything else is `Err`, with what
/// was done, for `mint`.
#[inline(always)]
fn mint_fast(guard: &Guard, shard: i32, relid: pg_sys::Oid, seq_value: i64) -> Result<i64, Taken> {
    let epoch = settings::epoch_ms();
    let Ok(residue) = layout::seq_field(seq_value) else {
        return Err(Taken::Nothing);
    };
    let Some(policy) = policy() else {
        return Err(Taken::Nothing);
    };
    let now = clock::now_unix_ms();
    if layout::check_ms(now - epoch).is_err() {
        return Err(Taken::Nothing);
    }
    let counted = settings::track_guard_stats().then_some(0);
    let admit = guard.table.admit_counted(
        seq_key(relid),
        residue as u16,
        now,
        policy,
        counted,
        clock::now_unix_ms,
    );
    match admit {
        Admit::Issue(ms) if guard.settled(ms) => match layout::check_ms(ms - epoch) {
            Ok(since_epoch) => Ok(layout::pack(since_epoch, shard, residue)),
            Err(_) => Err(Taken::Admitted(admit, now)),
        },
        _ => Err(Taken::Admitted(admit, now)),
    }
}

/// The guard's policy from the settings; `None` with on_overflow = 'legacy',
/// which bypasses the guard.
#[inline(always)]
fn policy() -> Option<Policy> {
    let overflow = match settings::on_overflow() {
        OnOverflow::Wait => Overflow::Wait,
        OnOverflow::Error => Overflow::Error,
        OnOverflow::Legacy => return None,
    };
    Some(Policy {
        overflow,
        max_lead_ms: settings::max_lead_ms(),
    })
}

#[inline(always)]
fn seq_key(relid: pg_sys::Oid) -> SeqKey {
    SeqKey {
        // SAFETY: MyDatabaseId is set for the life of a backend.
        database: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        relation: relid.to_u32(),
    }
}

/// The ID for `shard` and the sequence value `seq_value` of `relid`, from
/// where `mint_fast` left off: the errors, the waits and the mark's
/// renewals.
#[cold]
fn mint(guard: Guard, shard: i32, relid: pg_sys::Oid, seq_value: i64, taken: Taken) -> i64 {
    let epoch = settings::epoch_ms();
    let residue = ok_or_raise(layout::seq_field(seq_value), epoch);
    let Some(policy) = policy() else {
        let ms = ok_or_raise(layout::check_ms(clock::now_unix_ms() - epoch), epoch);
        return layout::pack(ms, shard, residue);
    };
    let key = seq_key(relid);
    let (mut now, mut first) = match taken {
        Taken::Admitted(admit, now) => (now, Some(admit)),
        Taken::Nothing => (clock::now_unix_ms(), None),
    };
    // Refuse a clock outside the time field before the guard remembers it.
    ok_or_raise(layout::check_ms(now - epoch), epoch);
    let track = settings::track_guard_stats();
    let mut waited_us = 0;
    let mut waited_in_all_us = 0;
    let ms = loop {
        // The guard works in ms since 1970; the epoch only matters for packing.
        let admit = first.take().unwrap_or_else(|| {
            let counted = track.then_some(waited_us);
            guard.table.admit_counted(
                key,
                residue as u16,
                now,
                policy,
                counted,
                clock::now_unix_ms,
            )
        });
        match admit {
            Admit::Issue(ms) => break ms,
            Admit::WaitPast(ms) => {
                (now, waited_us) = wait_for_clock(relid, ms, waited_in_all_us);
                waited_in_all_us += waited_us;
            }
            Admit::Full(ms) => raise!(
                PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "sequence \"{}\" needs more than 1024 IDs in one millisecond",
                    relation_name(relid)
                ),
                format!(
                    "Sequence value {seq_value} would repeat an ID of millisecond {ms} since 1970-01-01 UTC. insta_id.on_overflow = 'error'; 'wait' would wait for the next millisecond."
                ),
            ),
            Admit::Ahead(ms) => raise!(
                PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "sequence \"{}\" would issue an ID {} ms ahead of the clock",
                    relation_name(relid),
                    ms - clock::now_unix_ms()
                ),
                format!(
                    "Its next free millisecond is {ms} since 1970-01-01 UTC; insta_id.max_lead allows {} ms. insta_id.on_overflow = 'error'; 'wait' would wait for the clock.",
                    policy.max_lead_ms
                ),
                "The clock is behind IDs already issued: it stepped back, or the server restarted or had its high-water mark raised while IDs ran ahead.",
            ),
        }
    };
    let since_epoch = ok_or_raise(layout::check_ms(ms - epoch), epoch);
    // Durable before it leaves: a restart with the clock behind cannot
    // issue this millisecond again.
    guard.cover(ms);
    layout::pack(since_epoch, shard, residue)
}

/// Runs `f`, a rare path of a function outside pgrx's guard (next_id,
/// id_parts), under that guard (what #[pg_guard] puts around a function): a
/// Rust panic in it (`raise!`) becomes a PostgreSQL error, and an error
/// PostgreSQL raises in a call it makes through pgrx's bindings unwinds its
/// Rust frames before going on.
///
/// # Safety
/// The error it reports is a longjmp to PostgreSQL's handler: every frame
/// between the caller's and that handler must be plain (see `next_id`).
#[cold]
#[inline(never)]
unsafe fn guarded<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: the caller's contract.
    unsafe { pg_sys::panic::pgrx_extern_c_guard(f) }
}

/// Before nextval, the checks the usual path skips: the shard's range, the
/// relation (first call in this backend, or after an invalidation), and the
/// guard (resolved, or refused). Raises what it finds.
#[cold]
fn prepare(shard: i32, relid: pg_sys::Oid) -> Guard {
    ok_or_raise(layout::check_shard(shard as i64), settings::epoch_ms());
    check_is_sequence_cached(relid);
    guard_store::guard()
}

/// next_id's body: the ID for `shard` from sequence `relid`.
///
/// Outside pgrx's guard. Between PostgreSQL and nextval, these frames hold
/// only plain values (`Guard` is references and flags), so an error raised
/// in nextval (a longjmp) passes them as it passes C frames; the Rust that
/// can raise runs in `guarded`. The usual path is checks against this
/// backend's cells, nextval, and `mint_fast`: none of it raises, and none of
/// it panics but on a broken invariant (an index out of its table), where
/// the entry point below aborts the backend.
///
/// # Safety
/// Every frame between the caller's and PostgreSQL's error handler (its
/// sigsetjmp) must be plain: nothing to drop, no cleanup to run. An fmgr
/// entry point's frame is; a #[pg_extern] wrapper's is not (put
/// `pg_guard_ffi_boundary` around the call there).
#[inline(always)]
pub(crate) unsafe fn next_id(shard: i32, relid: pg_sys::Oid) -> i64 {
    // Before nextval, so that a refusal uses up no value.
    let checked = layout::check_shard(shard as i64).is_ok() && is_checked_sequence(relid);
    let guard = match guard_store::ready() {
        Some(guard) if checked => guard,
        // SAFETY: this function's own contract.
        _ => unsafe { guarded(|| prepare(shard, relid)) },
    };
    // SAFETY: PostgreSQL's own function; see above for its errors.
    let value = unsafe { nextval_internal(relid, true) };
    match mint_fast(&guard, shard, relid, value) {
        Ok(id) => id,
        // SAFETY: as above.
        Err(taken) => unsafe { guarded(|| mint(guard, shard, relid, value, taken)) },
    }
}

v1!(pg_finfo_insta_id_next_id);
/// `insta_id.next_id(schema_shard int, seq regclass) RETURNS bigint`
///
/// Not #[pg_guard]: see `next_id`. "C", not "C-unwind": a Rust panic that
/// escaped `guarded` would abort the backend (PostgreSQL restarts the
/// server) rather than unwind into PostgreSQL's frames, past its cleanup.
/// Errors PostgreSQL raises are longjmps, which pass either ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn insta_id_next_id(fcinfo: FunctionCallInfo) -> Datum {
    let (shard, relid) = unsafe {
        (
            arg_i32(fcinfo, 0),
            pg_sys::Oid::from(arg(fcinfo, 1).value() as u32),
        )
    };
    // SAFETY: called by fmgr, from PostgreSQL's frames only.
    Datum::from(unsafe { next_id(shard, relid) })
}

/// The epoch argument of the explicit-epoch overloads, as ms since 1970.
fn epoch_arg(ts: i64) -> i64 {
    // The range first: infinity and -infinity are out of it, not fractional.
    let Some(ms) = layout::check_epoch(clock::timestamptz_to_unix_ms(ts)) else {
        raise!(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "epoch must be between 1970-01-01 00:00 UTC and 9999-12-31 23:59:59.999 UTC",
        );
    };
    if ts.rem_euclid(1000) != 0 {
        raise!(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "epoch must be a whole millisecond",
        );
    }
    ms
}

/// The function's result descriptor, blessed and cached in fn_extra
/// (allocated in fn_mcxt): built on the first call of a call site only.
#[cold]
unsafe fn result_desc(fcinfo: FunctionCallInfo, natts: usize) -> pg_sys::TupleDesc {
    // SAFETY: standard fmgr idiom on a valid fcinfo.
    unsafe {
        let flinfo = (*fcinfo).flinfo;
        let mut tupdesc = (*flinfo).fn_extra as pg_sys::TupleDesc;
        if tupdesc.is_null() {
            let mut desc: pg_sys::TupleDesc = std::ptr::null_mut();
            if pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut desc)
                != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE
            {
                raise!(
                    PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                    "function returning a record called where a record is not expected",
                );
            }
            // The values formed per row must fill the declared columns
            // exactly: a library and SQL of different releases may not.
            if (*desc).natts as usize != natts {
                raise!(
                    PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
                    format!(
                        "the function's result has {} columns where this build of insta_id returns {natts}",
                        (*desc).natts
                    ),
                    "Its SQL declaration and this library are of different releases.",
                    "Run ALTER EXTENSION insta_id UPDATE so that the SQL matches the library.",
                );
            }
            let old = pg_sys::MemoryContextSwitchTo((*flinfo).fn_mcxt);
            tupdesc = pg_sys::BlessTupleDesc(pg_sys::CreateTupleDescCopy(desc));
            pg_sys::MemoryContextSwitchTo(old);
            (*flinfo).fn_extra = tupdesc.cast();
        }
        tupdesc
    }
}

/// Returns `values` as the function's composite result.
unsafe fn composite_result(
    fcinfo: FunctionCallInfo,
    values: &mut [Datum],
    nulls: &mut [bool],
) -> Datum {
    // SAFETY: values and nulls match the declared OUT parameters.
    unsafe {
        let desc = result_desc(fcinfo, values.len());
        let tuple = pg_sys::heap_form_tuple(desc, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::HeapTupleHeaderGetDatum((*tuple).t_data)
    }
}

// PostgreSQL's tuple forming, text making and detoasting, declared here
// instead of taken from pgrx's bindings (a sigsetjmp boundary and a thread
// check around every call, a tenth of id_parts' time, and an error turned
// into a Rust panic that a function without pgrx's guard could not catch):
// id_parts forms a tuple per row, shortcode a text, from_shortcode reads one.
// What they can raise (out of memory, a damaged TOAST value) is a longjmp,
// which passes these functions' plain frames.
unsafe extern "C-unwind" {
    fn pg_detoast_datum_packed(datum: *mut pg_sys::varlena) -> *mut pg_sys::varlena;
    fn cstring_to_text_with_len(s: *const std::ffi::c_char, len: i32) -> *mut pg_sys::varlena;
    fn heap_form_tuple(
        desc: pg_sys::TupleDesc,
        values: *const Datum,
        isnull: *const bool,
    ) -> pg_sys::HeapTuple;
    #[link_name = "HeapTupleHeaderGetDatum"]
    fn heap_tuple_header_get_datum(tuple: pg_sys::HeapTupleHeader) -> Datum;
}

/// `id` decoded as the record (created_at, shard_id, seq_id, ms_since_epoch).
///
/// # Safety
/// As `next_id`: only plain frames between this and PostgreSQL's error
/// handler (an fmgr entry point without #[pg_guard]).
#[inline(always)]
unsafe fn id_parts_record(fcinfo: FunctionCallInfo, id: i64, epoch_ms: i64) -> Datum {
    let parts = layout::decompose(id);
    let created_at = clock::unix_ms_to_timestamptz(epoch_ms + parts.ms);
    let values = [
        Datum::from(created_at),
        Datum::from(parts.shard),
        Datum::from(parts.seq),
        Datum::from(parts.ms),
    ];
    // SAFETY: a valid fcinfo; values match the declared OUT parameters.
    unsafe {
        let mut desc = (*(*fcinfo).flinfo).fn_extra as pg_sys::TupleDesc;
        if desc.is_null() {
            desc = guarded(|| result_desc(fcinfo, values.len()));
        }
        let tuple = heap_form_tuple(desc, values.as_ptr(), [false; 4].as_ptr());
        heap_tuple_header_get_datum((*tuple).t_data)
    }
}

v1!(pg_finfo_insta_id_id_parts);
/// `insta_id.id_parts(id bigint)`: decode with the epoch in force.
///
/// Not #[pg_guard], like next_id: what can raise on the first call of a call
/// site (building the result's descriptor) runs under `guarded`; after it,
/// only heap_form_tuple can (out of memory), a longjmp past plain frames.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn insta_id_id_parts(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: called by fmgr, from PostgreSQL's frames only.
    unsafe { id_parts_record(fcinfo, arg_i64(fcinfo, 0), settings::epoch_ms()) }
}

v1!(pg_finfo_insta_id_id_parts_epoch);
/// `insta_id.id_parts(id bigint, epoch timestamptz)`: decode with an explicit epoch.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn insta_id_id_parts_epoch(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: called by fmgr, from PostgreSQL's frames only.
    unsafe {
        let (id, epoch) = (arg_i64(fcinfo, 0), arg_i64(fcinfo, 1));
        let epoch = guarded(|| epoch_arg(epoch));
        id_parts_record(fcinfo, id, epoch)
    }
}

// The scalar decoders are shifts and a conversion of the time field: nothing
// on their path raises or panics, so they run without pgrx's guard.

v1!(pg_finfo_insta_id_created_at);
/// `insta_id.created_at(id bigint) RETURNS timestamptz`
#[unsafe(no_mangle)]
pub unsafe extern "C" fn insta_id_created_at(fcinfo: FunctionCallInfo) -> Datum {
    let ms = layout::decompose(unsafe { arg_i64(fcinfo, 0) }).ms;
    Datum::from(clock::unix_ms_to_timestamptz(settings::epoch_ms() + ms))
}

v1!(pg_finfo_insta_id_shard_id);
/// `insta_id.shard_id(id bigint) RETURNS int`
#[unsafe(no_mangle)]
pub unsafe extern "C" fn insta_id_shard_id(fcinfo: FunctionCallInfo) -> Datum {
    Datum::from(layout::decompose(unsafe { arg_i64(fcinfo, 0) }).shard)
}

v1!(pg_finfo_insta_id_shortcode);
/// `insta_id.shortcode(id bigint) RETURNS text`: Instagram's base-64 form.
/// Only the palloc of the result can raise (out of memory), a longjmp past
/// plain frames (see `cstring_to_text_with_len` below).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn insta_id_shortcode(fcinfo: FunctionCallInfo) -> Datum {
    let (bytes, at) = shortcode::encode(unsafe { arg_i64(fcinfo, 0) });
    // SAFETY: copies these ASCII bytes into a palloc'd text.
    Datum::from(unsafe {
        cstring_to_text_with_len(bytes[at..].as_ptr().cast(), (bytes.len() - at) as i32)
    })
}

v1!(pg_finfo_insta_id_from_shortcode);
/// `insta_id.from_shortcode(code text) RETURNS bigint`; 22P02 for a text
/// that is not a shortcode (under `guarded`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn insta_id_from_shortcode(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a text Datum, detoasted if it must be (a short one is used in
    // place); its bytes live as long as this call.
    let code = unsafe {
        let t = pg_detoast_datum_packed(arg(fcinfo, 0).cast_mut_ptr());
        std::slice::from_raw_parts(
            pgrx::varlena::vardata_any(t).cast::<u8>(),
            pgrx::varlena::varsize_any_exhdr(t),
        )
    };
    match shortcode::decode(code) {
        Ok(id) => Datum::from(id),
        // SAFETY: called by fmgr, from PostgreSQL's frames only.
        Err(e) => unsafe { guarded(|| -> Datum { shortcode_error(e, code) }) },
    }
}

#[cold]
fn shortcode_error(e: ShortcodeError, code: &[u8]) -> ! {
    // At most 40 bytes of it, ASCII as is and the rest escaped: whatever the
    // database's encoding, and however long the text.
    let mut shown: String = code
        .iter()
        .take(40)
        .map(|&b| match b {
            0x20..=0x7e => (b as char).to_string(),
            _ => format!("\\x{b:02x}"),
        })
        .collect();
    if code.len() > 40 {
        shown.push_str("...");
    }
    let detail = match e {
        ShortcodeError::Empty => "A shortcode has at least one character.".to_string(),
        ShortcodeError::BadByte(at, b) => format!(
            "Byte {} (0x{b:02x}) is not in the alphabet A-Z a-z 0-9 - _.",
            at + 1
        ),
        ShortcodeError::TooLarge => {
            "Its value does not fit in 64 bits: the largest shortcode is P__________.".to_string()
        }
    };
    raise!(
        PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
        format!("invalid shortcode: \"{shown}\""),
        detail,
    )
}

v1!(pg_finfo_insta_id_seq_id);
/// `insta_id.seq_id(id bigint) RETURNS int`
#[unsafe(no_mangle)]
pub unsafe extern "C" fn insta_id_seq_id(fcinfo: FunctionCallInfo) -> Datum {
    Datum::from(layout::decompose(unsafe { arg_i64(fcinfo, 0) }).seq)
}

/// Which bound, and for which shards, min_id/max_id compute.
#[derive(Clone, Copy)]
enum Bound {
    Min,
    Max,
}

/// Shared body of the min_id/max_id overloads. Arguments: ts, then an
/// optional shard (int), then an optional epoch (timestamptz).
unsafe fn bound(fcinfo: FunctionCallInfo, which: Bound, has_shard: bool, has_epoch: bool) -> Datum {
    let ts = unsafe { arg_i64(fcinfo, 0) };
    let shard = has_shard.then(|| unsafe { arg_i32(fcinfo, 1) } as i64);
    let epoch = if has_epoch {
        epoch_arg(unsafe { arg_i64(fcinfo, if has_shard { 2 } else { 1 }) })
    } else {
        settings::epoch_ms()
    };
    let ms = clock::timestamptz_to_unix_ms(ts) - epoch;
    let id = match (which, shard) {
        (Bound::Min, None) => layout::min_id(ms),
        (Bound::Max, None) => layout::max_id(ms),
        (Bound::Min, Some(s)) => layout::min_id_in_shard(ms, s),
        (Bound::Max, Some(s)) => layout::max_id_in_shard(ms, s),
    };
    Datum::from(ok_or_raise(id, epoch))
}

macro_rules! bound_fn {
    ($finfo:ident, $name:ident, $which:expr, $shard:expr, $epoch:expr) => {
        v1!($finfo);
        #[unsafe(no_mangle)]
        #[pg_guard]
        pub unsafe extern "C-unwind" fn $name(fcinfo: FunctionCallInfo) -> Datum {
            unsafe { bound(fcinfo, $which, $shard, $epoch) }
        }
    };
}

bound_fn!(
    pg_finfo_insta_id_min_id,
    insta_id_min_id,
    Bound::Min,
    false,
    false
);
bound_fn!(
    pg_finfo_insta_id_max_id,
    insta_id_max_id,
    Bound::Max,
    false,
    false
);
bound_fn!(
    pg_finfo_insta_id_min_id_shard,
    insta_id_min_id_shard,
    Bound::Min,
    true,
    false
);
bound_fn!(
    pg_finfo_insta_id_max_id_shard,
    insta_id_max_id_shard,
    Bound::Max,
    true,
    false
);
bound_fn!(
    pg_finfo_insta_id_min_id_epoch,
    insta_id_min_id_epoch,
    Bound::Min,
    false,
    true
);
bound_fn!(
    pg_finfo_insta_id_max_id_epoch,
    insta_id_max_id_epoch,
    Bound::Max,
    false,
    true
);
bound_fn!(
    pg_finfo_insta_id_min_id_shard_epoch,
    insta_id_min_id_shard_epoch,
    Bound::Min,
    true,
    true
);
bound_fn!(
    pg_finfo_insta_id_max_id_shard_epoch,
    insta_id_max_id_shard_epoch,
    Bound::Max,
    true,
    true
);

v1!(pg_finfo_insta_id_epoch);
/// `insta_id.epoch() RETURNS timestamptz`: the epoch in force.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_epoch(_fcinfo: FunctionCallInfo) -> Datum {
    Datum::from(clock::unix_ms_to_timestamptz(settings::epoch_ms()))
}

v1!(pg_finfo_insta_id_guard_mode);
/// `insta_id.guard_mode() RETURNS text`: 'shared' (0.9.0 and earlier could
/// say 'session').
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_guard_mode(_fcinfo: FunctionCallInfo) -> Datum {
    text(guard_store::mode())
}

v1!(pg_finfo_insta_id_high_water_mark);
/// `insta_id.high_water_mark() RETURNS timestamptz`: the mark on disk, or
/// NULL before the server's first ID.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_high_water_mark(fcinfo: FunctionCallInfo) -> Datum {
    match guard_store::mark_on_disk() {
        Some(ms) => Datum::from(clock::unix_ms_to_timestamptz(ms)),
        None => {
            // SAFETY: a valid fcinfo; a NULL result is flagged there.
            unsafe { (*fcinfo).isnull = true };
            Datum::from(0)
        }
    }
}

v1!(pg_finfo_insta_id_raise_high_water_mark);
/// `insta_id.raise_high_water_mark(at timestamptz, slack interval) RETURNS
/// timestamptz`: no ID of this server is made in a millisecond up to `at`
/// from now on (a shard moved in from a server whose clock is ahead), if
/// `at` is at most insta_id.max_lead + slack ahead of the clock. Returns the
/// mark on disk.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_raise_high_water_mark(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with arguments (timestamptz, interval); an
    // interval is passed by reference. 0.9.0's SQL declares one argument
    // (the library is updated before the SQL): the default slack then.
    let (ms, slack) = unsafe {
        let slack = if (*fcinfo).nargs >= 2 {
            interval_ms(&*(arg(fcinfo, 1).cast_mut_ptr::<pg_sys::Interval>()))
        } else {
            crate::mark::DEFAULT_RAISE_SLACK_MS
        };
        (clock::timestamptz_to_unix_ms(arg_i64(fcinfo, 0)), slack)
    };
    let epoch = settings::epoch_ms();
    ok_or_raise(layout::check_ms(ms - epoch), epoch);
    let max_lead = settings::max_lead_ms();
    match crate::mark::may_raise_to(ms, clock::now_unix_ms(), max_lead, slack) {
        Ok(()) => {}
        Err(crate::mark::RaiseRefused::Slack) => raise!(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "slack must be between 0 and 1 hour",
        ),
        Err(crate::mark::RaiseRefused::TooFarAhead { bound_ms }) => raise!(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "the high-water mark may be raised to at most {bound_ms} ms ahead of this server's clock (insta_id.max_lead {max_lead} ms + slack {slack} ms)"
            ),
            "Until the clock comes within insta_id.max_lead of the mark, every next_id of this server waits (or fails, with insta_id.on_overflow = error): a mark an hour ahead is an hour of stalled inserts.",
            "If the mark is meant (a shard from a server whose clock is that far ahead), pass slack => interval '...' (at most 1 hour).",
        ),
    }
    Datum::from(clock::unix_ms_to_timestamptz(guard_store::raise_mark(ms)))
}

/// An interval in ms, a month counted as 30 days (as PostgreSQL compares
/// intervals), saturating.
fn interval_ms(i: &pg_sys::Interval) -> i64 {
    (i.time / 1000)
        .saturating_add(i64::from(i.day).saturating_mul(86_400_000))
        .saturating_add(i64::from(i.month).saturating_mul(30 * 86_400_000))
}

/// A double precision Datum (passed by value on 64-bit platforms).
fn float8(x: f64) -> Datum {
    Datum::from(x.to_bits())
}

fn text(s: &str) -> Datum {
    let s = std::ffi::CString::new(s).expect("no NUL in the text");
    // SAFETY: cstring_to_text copies into a palloc'd text.
    Datum::from(unsafe { pg_sys::cstring_to_text(s.as_ptr()) })
}

/// Sets `name` to `value` in a new nesting level of the settings, as a
/// function's SET clause does, and returns that level: AtEOXact_GUC(false,
/// level) puts back what was there (so does the end of the transaction,
/// after an error).
///
/// # Safety
/// In a transaction; `name` a setting any role may set.
pub(crate) unsafe fn save_setting(name: &std::ffi::CStr, value: &std::ffi::CStr) -> i32 {
    // SAFETY: PostgreSQL's settings API, as fmgr_security_definer uses it.
    unsafe {
        let level = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        level
    }
}

/// The elements of array argument n of a built-in element type, each None
/// for a NULL.
///
/// # Safety
/// Argument n is a non-NULL array of `elemtype`.
pub(crate) unsafe fn arg_array(
    fcinfo: FunctionCallInfo,
    n: usize,
    elemtype: pg_sys::Oid,
) -> Vec<Option<Datum>> {
    // SAFETY: deconstruct_array_builtin handles the built-in types.
    unsafe {
        let array =
            pg_sys::pg_detoast_datum(arg(fcinfo, n).cast_mut_ptr()) as *mut pg_sys::ArrayType;
        let mut elems: *mut Datum = std::ptr::null_mut();
        let mut nulls: *mut bool = std::ptr::null_mut();
        let mut count: i32 = 0;
        pg_sys::deconstruct_array_builtin(array, elemtype, &mut elems, &mut nulls, &mut count);
        (0..count as usize)
            .map(|i| (!*nulls.add(i)).then(|| *elems.add(i)))
            .collect()
    }
}

/// Returns rows, none NULL, from a set-returning function by the
/// materialize-mode protocol (InitMaterializedSRF checks that the caller
/// accepts a set, and raises otherwise).
///
/// # Safety
/// `fcinfo` is the call of a function declared to return a set of rows of
/// N columns, of the types the Datums hold.
pub(crate) unsafe fn materialize_rows<const N: usize>(
    fcinfo: FunctionCallInfo,
    rows: impl IntoIterator<Item = [Datum; N]>,
) -> Datum {
    // SAFETY: as the caller promises; tuplestore_putvalues copies each row.
    unsafe {
        pg_sys::InitMaterializedSRF(fcinfo, 0);
        let rsinfo = (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo;
        let mut nulls = [false; N];
        for mut values in rows {
            pg_sys::tuplestore_putvalues(
                (*rsinfo).setResult,
                (*rsinfo).setDesc,
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
            );
        }
    }
    Datum::from(0)
}

/// An oid[] Datum of the given OIDs.
pub(crate) fn oid_array(oids: impl IntoIterator<Item = u32>) -> Datum {
    let mut datums: Vec<Datum> = oids
        .into_iter()
        .map(|o| Datum::from(pg_sys::Oid::from(o)))
        .collect();
    // SAFETY: construct_array_builtin copies the OIDs into an array.
    Datum::from(unsafe {
        pg_sys::construct_array_builtin(datums.as_mut_ptr(), datums.len() as i32, pg_sys::OIDOID)
    })
}

/// A bigint[] Datum of the given integers.
pub(crate) fn int8_array(values: &[i64]) -> Datum {
    let mut datums: Vec<Datum> = values.iter().map(|v| Datum::from(*v)).collect();
    // SAFETY: construct_array_builtin copies the (by-value) integers into an array.
    Datum::from(unsafe {
        pg_sys::construct_array_builtin(datums.as_mut_ptr(), datums.len() as i32, pg_sys::INT8OID)
    })
}

/// A text Datum of the given bytes, copied into a palloc'd text.
pub(crate) fn text_datum(bytes: &[u8]) -> Datum {
    // SAFETY: cstring_to_text_with_len copies len bytes.
    Datum::from(unsafe {
        pg_sys::cstring_to_text_with_len(bytes.as_ptr().cast(), bytes.len() as i32)
    })
}

/// A text[] Datum of the given byte strings, each copied into a palloc'd
/// text and the texts into an array.
pub(crate) fn text_array<T: AsRef<[u8]>>(items: impl IntoIterator<Item = T>) -> Datum {
    let mut datums: Vec<Datum> = items
        .into_iter()
        .map(|item| text_datum(item.as_ref()))
        .collect();
    // SAFETY: construct_array_builtin copies the texts into an array.
    Datum::from(unsafe {
        pg_sys::construct_array_builtin(datums.as_mut_ptr(), datums.len() as i32, pg_sys::TEXTOID)
    })
}

/// The counts' columns shared by both stats functions: issued, waits,
/// wait_time (ms), borrowed_ms, refused.
fn stats_columns(s: &Stats) -> [Datum; 5] {
    [
        Datum::from(s.issued as i64),
        Datum::from(s.waits as i64),
        float8(s.wait_us as f64 / 1000.0),
        Datum::from(s.borrowed_ms as i64),
        Datum::from(s.refused as i64),
    ]
}

v1!(pg_finfo_insta_id_guard_stats_sequences);
/// `insta_id._guard_stats()`: one row per sequence in the guard's table
/// (database, sequence_oid, last_ms_at, issued, waits, wait_time,
/// borrowed_ms, refused), for insta_id.guard_stats().
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_guard_stats_sequences(fcinfo: FunctionCallInfo) -> Datum {
    // Another database's sequences only for pg_read_all_stats (as
    // pg_stat_activity shows other sessions' queries).
    // SAFETY: plain catalog-cache lookups and reads of backend globals.
    let (all, mine) = unsafe {
        (
            pg_sys::has_privs_of_role(
                pg_sys::GetUserId(),
                pg_sys::Oid::from(pg_sys::ROLE_PG_READ_ALL_STATS),
            ),
            pg_sys::MyDatabaseId.to_u32(),
        )
    };
    let rows = guard_store::sequences()
        .into_iter()
        .filter(|r| all || r.key.database == mine);
    let rows = rows.map(|r| {
        let [issued, waits, wait_time, borrowed, refused] = stats_columns(&r.stats);
        [
            Datum::from(r.key.database),
            Datum::from(r.key.relation),
            Datum::from(clock::unix_ms_to_timestamptz(r.last_ms)),
            issued,
            waits,
            wait_time,
            borrowed,
            refused,
        ]
    });
    // SAFETY: called as a set-returning function.
    unsafe { materialize_rows(fcinfo, rows) }
}

v1!(pg_finfo_insta_id_guard_stats_total);
/// `insta_id.guard_stats_total()`: the guard as a whole (guard_mode,
/// capacity, sequences, issued, waits, wait_time, borrowed_ms, refused,
/// evictions, stats_reset), for SQL.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_guard_stats_total(fcinfo: FunctionCallInfo) -> Datum {
    let r = guard_store::report();
    let [issued, waits, wait_time, borrowed, refused] = stats_columns(&r.totals);
    let mut values = [
        text(guard_store::mode()),
        Datum::from(r.capacity as i64),
        Datum::from(r.tracked as i64),
        issued,
        waits,
        wait_time,
        borrowed,
        refused,
        Datum::from(r.totals.evictions as i64),
        Datum::from(r.stats_reset),
    ];
    unsafe { composite_result(fcinfo, &mut values, &mut [false; 10]) }
}

v1!(pg_finfo_insta_id_guard_stats_reset);
/// `insta_id.guard_stats_reset()`: zeroes the guard's counts.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_guard_stats_reset(_fcinfo: FunctionCallInfo) -> Datum {
    guard_store::reset_stats();
    Datum::from(0)
}
