//! insta_id's own locks (`src/sql/locks.sql`): PostgreSQL's advisory lock
//! method with a lock tag no SQL caller can name. `pg_advisory_lock` and its
//! kin, which PUBLIC may call, build tags of form 1 (one bigint key) or 2
//! (two int keys) in the tag's last field; these are form 3, so a role with
//! no grants can neither take nor hold one of insta_id's locks to stall it
//! (issue 40). Being advisory locks otherwise, they show in `pg_locks` as
//! `locktype = 'advisory'`, `objsubid = 3`, wait under `lock_timeout` and
//! cancels, and a session's are released by `pg_advisory_unlock_all()` and
//! at its end, as `lock_shard_for_move` has always documented. Declared
//! executable by no one but the helpers' callers (not PUBLIC).

use crate::functions::arg;
use pgrx::pg_sys::{self, Datum, FunctionCallInfo};
use pgrx::{pg_guard, PgSqlErrorCode};

/// The tag's last field: a form of advisory key that SQL never makes.
pub const LOCK_FORM: u16 = 3;

/// The tag of insta_id's lock (key, object) in this database.
fn tag(key: i32, object: i32) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        // SAFETY: MyDatabaseId is set once the backend is connected.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: key as u32,
        locktag_field3: object as u32,
        locktag_field4: LOCK_FORM,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// The modes the advisory functions use: shared, or exclusive.
fn mode(shared: bool) -> pg_sys::LOCKMODE {
    (if shared {
        pg_sys::ShareLock
    } else {
        pg_sys::ExclusiveLock
    }) as pg_sys::LOCKMODE
}

/// Refuses (42501), before waiting, a lock by OID on an object the caller
/// does not own (nor is a member of its owner): a delegated administrator
/// given the helpers could otherwise queue ACCESS EXCLUSIVE on any relation
/// (pg_authid: every login waits). Superusers may lock anything; the gate
/// and drop_shard lock what they then act on.
fn check_may_lock(classid: pg_sys::Oid, objid: pg_sys::Oid) {
    // SAFETY: catalog-cache lookups of the current user and the object.
    let owns = unsafe {
        let user = pg_sys::GetUserId();
        #[cfg(feature = "pg15")]
        {
            pg_sys::superuser()
                || match classid {
                    pg_sys::RelationRelationId => pg_sys::pg_class_ownercheck(objid, user),
                    // (a schema: its owner, or a role that may create in it,
                    // as a migration's caller on a shard's schema may)
                    pg_sys::NamespaceRelationId => {
                        pg_sys::pg_namespace_ownercheck(objid, user)
                            || pg_sys::pg_namespace_aclcheck(objid, user, pg_sys::ACL_CREATE as _)
                                == pg_sys::AclResult::ACLCHECK_OK
                    }
                    pg_sys::TypeRelationId => pg_sys::pg_type_ownercheck(objid, user),
                    pg_sys::ProcedureRelationId => pg_sys::pg_proc_ownercheck(objid, user),
                    _ => false,
                }
        }
        #[cfg(not(feature = "pg15"))]
        {
            pg_sys::object_ownercheck(classid, objid, user)
                || (classid == pg_sys::NamespaceRelationId
                    && pg_sys::object_aclcheck(classid, objid, user, pg_sys::ACL_CREATE as _)
                        == pg_sys::AclResult::ACLCHECK_OK)
        }
    };
    if !owns {
        let object = pg_sys::ObjectAddress {
            classId: classid,
            objectId: objid,
            objectSubId: 0,
        };
        // SAFETY: describes an object that exists (checked by the caller);
        // a palloc'd string.
        let what = unsafe {
            std::ffi::CStr::from_ptr(pg_sys::getObjectDescription(&object, false))
                .to_string_lossy()
                .into_owned()
        };
        raise!(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("must be owner of {what} for insta_id to lock it"),
            "A helper locks only what its caller owns or may act as the owner of (a superuser, anything).",
        );
    }
}

/// Whether the object exists (a relation's, a schema's, ... by its catalog).
fn exists(cache: pg_sys::SysCacheIdentifier::Type, objid: pg_sys::Oid) -> bool {
    // SAFETY: a catalog-cache probe.
    unsafe {
        pg_sys::SearchSysCacheExists(
            cache as i32,
            Datum::from(objid),
            Datum::from(0),
            Datum::from(0),
            Datum::from(0),
        )
    }
}

v1!(pg_finfo_insta_id_lock);
/// `insta_id._lock(key int, object int, shared boolean, session boolean,
/// wait boolean) RETURNS boolean`: takes the lock, for the transaction or
/// the session; without `wait`, false when another process holds it.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_lock(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with arguments (int, int, bool, bool, bool).
    let (key, object, shared, session, wait) = unsafe {
        (
            arg(fcinfo, 0).value() as i32,
            arg(fcinfo, 1).value() as i32,
            arg(fcinfo, 2).value() != 0,
            arg(fcinfo, 3).value() != 0,
            arg(fcinfo, 4).value() != 0,
        )
    };
    // A session's hold outlives every transaction: the mover's alone (a
    // superuser), never a delegated administrator's, who could hold the
    // migration runner's or a move's lock for as long as it stays connected.
    // SAFETY: a read of the current user's role flags.
    if session && !unsafe { pg_sys::superuser() } {
        raise!(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            "insta_id's session-level locks are taken by superusers only",
            "lock_shard_for_move is the online move's, which runs as a superuser.",
        );
    }
    let tag = tag(key, object);
    // SAFETY: the lock manager, as pg_advisory_lock and its kin call it.
    let got = unsafe { pg_sys::LockAcquire(&tag, mode(shared), session, !wait) };
    Datum::from(got != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL)
}

v1!(pg_finfo_insta_id_unlock);
/// `insta_id._unlock(key int, object int) RETURNS boolean`: releases a
/// session's exclusive hold of the lock; false (and a WARNING from
/// PostgreSQL) when it held none.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_unlock(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with arguments (int, int).
    let (key, object) = unsafe { (arg(fcinfo, 0).value() as i32, arg(fcinfo, 1).value() as i32) };
    let tag = tag(key, object);
    // SAFETY: the lock manager, as pg_advisory_unlock calls it.
    Datum::from(unsafe { pg_sys::LockRelease(&tag, mode(false), true) })
}

v1!(pg_finfo_insta_id_lock_schema);
/// `insta_id._lock_schema(nsp oid) RETURNS boolean`: the schema's own lock,
/// ACCESS EXCLUSIVE until the transaction ends, and whether the schema still
/// exists once it is held. Every CREATE of an object in a schema holds that
/// lock in ACCESS SHARE mode until its transaction ends, so after this no
/// object arrives in the schema unseen (drop_shard's check, then its DROP).
/// Taken at once where no one holds it (the gate's call a shard, no
/// subtransaction), else waited for under the caller's lock_timeout, as
/// migrate and drop_shard set it (0: without bound, as asked; the gate sets
/// 2 s then): 55P03 naming the schema and who holds it, or a cancel.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_lock_schema(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with one oid argument.
    let nsp = pg_sys::Oid::from(unsafe { arg(fcinfo, 0) }.value() as u32);
    if !exists(pg_sys::SysCacheIdentifier::NAMESPACEOID, nsp) {
        return Datum::from(false);
    }
    check_may_lock(pg_sys::NamespaceRelationId, nsp);
    // SAFETY: in the transaction of the function's call; the mode DROP
    // SCHEMA takes.
    unsafe {
        hold_object(
            pg_sys::NamespaceRelationId,
            nsp,
            pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE,
            Unset::AsIs,
        );
    }
    Datum::from(exists(pg_sys::SysCacheIdentifier::NAMESPACEOID, nsp))
}

v1!(pg_finfo_insta_id_lock_object);
/// `insta_id._lock_object(classid oid, objid oid) RETURNS void`: an object
/// of a shard locked ACCESS EXCLUSIVE until the transaction ends, as DROP
/// would lock it (a relation by its relation lock), before drop_shard reads
/// what depends on it: what would come to depend on it meanwhile (a view on
/// a table, a function taking a type, where PostgreSQL locks what it
/// records a dependency on) waits and is then seen.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_lock_object(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with arguments (oid, oid).
    let (classid, objid) = unsafe {
        (
            pg_sys::Oid::from(arg(fcinfo, 0).value() as u32),
            pg_sys::Oid::from(arg(fcinfo, 1).value() as u32),
        )
    };
    let mode = pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE;
    check_may_lock(classid, objid);
    // SAFETY: the lock manager, as performDeletion's AcquireDeletionLock.
    unsafe {
        if classid == pg_sys::RelationRelationId {
            pg_sys::LockRelationOid(objid, mode);
        } else {
            pg_sys::LockDatabaseObject(classid, objid, 0, mode);
        }
    }
    Datum::from(0)
}

/// The kinds of object whose owner the gate counts (as `_object_owner`,
/// src/sql/gate.sql, reads them): a catalog with an OID cache and an owner
/// column. Any other kind has no owner to count.
fn owned_kind(classid: pg_sys::Oid) -> bool {
    // (catalogs whose OIDs pgrx does not bind: fixed in PostgreSQL's
    // catalog headers, pg_conversion.h, pg_ts_config.h, pg_ts_dict.h,
    // pg_statistic_ext.h)
    const CONVERSION: pg_sys::Oid = pg_sys::Oid::from_u32(2607);
    const TS_CONFIG: pg_sys::Oid = pg_sys::Oid::from_u32(3602);
    const TS_DICTIONARY: pg_sys::Oid = pg_sys::Oid::from_u32(3600);
    const STATISTIC_EXT: pg_sys::Oid = pg_sys::Oid::from_u32(3381);
    [
        pg_sys::RelationRelationId,
        pg_sys::ProcedureRelationId,
        pg_sys::TypeRelationId,
        pg_sys::CollationRelationId,
        CONVERSION,
        pg_sys::OperatorRelationId,
        pg_sys::OperatorClassRelationId,
        pg_sys::OperatorFamilyRelationId,
        TS_CONFIG,
        TS_DICTIONARY,
        STATISTIC_EXT,
    ]
    .contains(&classid)
}

/// The owner of an object by its catalog cache, or None when it is gone.
///
/// # Safety
/// `classid` is a kind `owned_kind` accepts.
pub(crate) unsafe fn cached_owner(classid: pg_sys::Oid, objid: pg_sys::Oid) -> Option<pg_sys::Oid> {
    // SAFETY: a catalog-cache lookup by OID of a kind listed in
    // PostgreSQL's object properties, released before returning; the
    // owner is an oid, copied out first.
    unsafe {
        let cache = pg_sys::get_object_catcache_oid(classid);
        let tuple = pg_sys::SearchSysCache1(cache, Datum::from(objid));
        if tuple.is_null() {
            return None;
        }
        let mut isnull = false;
        let owner = pg_sys::SysCacheGetAttr(
            cache,
            tuple,
            pg_sys::get_object_attnum_owner(classid),
            &mut isnull,
        );
        pg_sys::ReleaseSysCache(tuple);
        (!isnull).then(|| pg_sys::Oid::from(owner.value() as u32))
    }
}

/// Locks object (classid, objid) in mode until the transaction ends, and
/// takes in what committed before the lock, as LockDatabaseObject does: at
/// once when no one holds it, else waited for as `wait_reported` says.
///
/// # Safety
/// In a transaction, with the catalogs readable.
unsafe fn hold_object(
    classid: pg_sys::Oid,
    objid: pg_sys::Oid,
    mode: pg_sys::LOCKMODE,
    unset: Unset,
) {
    let tag = pg_sys::LOCKTAG {
        // SAFETY: MyDatabaseId is set once the backend is connected.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: classid.to_u32(),
        locktag_field3: objid.to_u32(),
        locktag_field4: 0,
        locktag_type: pg_sys::LockTagType::LOCKTAG_OBJECT as u8,
        locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
    };
    // SAFETY: the lock manager with a tag built as SET_LOCKTAG_OBJECT
    // builds it.
    unsafe {
        if pg_sys::LockAcquire(&tag, mode, false, true)
            == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
        {
            wait_reported(classid, objid, unset, || {
                pg_sys::LockAcquire(&tag, mode, false, false);
            });
        }
        pg_sys::AcceptInvalidationMessages();
    }
}

/// Relation rel locked ROW EXCLUSIVE until the transaction ends, as
/// LockRelationOid takes it (the invalidations committed before the lock
/// taken in): at once when no one holds a lock it conflicts with, else
/// waited for as `wait_reported` says.
///
/// # Safety
/// In a transaction, with the catalogs readable.
unsafe fn hold_relation(rel: pg_sys::Oid) {
    let mode = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
    // SAFETY: the lock manager, as LOCK TABLE uses it.
    unsafe {
        if !pg_sys::ConditionalLockRelationOid(rel, mode) {
            wait_reported(pg_sys::RelationRelationId, rel, Unset::Bounded, || {
                pg_sys::LockRelationOid(rel, mode)
            });
        }
    }
}

/// What a wait does when the caller has no lock_timeout (0).
#[derive(Clone, Copy, PartialEq)]
enum Unset {
    /// Waits 2 s, as _gate_lock's waits: never without bound (the gate's
    /// locks, which a role without grants may hold).
    Bounded,
    /// Waits without bound, as the caller asked (migrate's and
    /// drop_shard's lock_timeout argument).
    AsIs,
}

/// Waits for the lock on (classid, objid) that `lock` takes, under
/// lock_timeout (without one: as `unset` says). On timeout, 55P03 naming
/// the object and the processes that held it when the wait began (SPI,
/// which cannot run once the wait has failed).
///
/// # Safety
/// In a transaction, with the catalogs readable; `lock` waits for a lock
/// and raises only its timeout or a cancel.
unsafe fn wait_reported(
    classid: pg_sys::Oid,
    objid: pg_sys::Oid,
    unset: Unset,
    lock: impl FnOnce() + std::panic::UnwindSafe,
) {
    // SAFETY: SPI for the report, connected and finished in wait_report;
    // the settings API as save_setting documents.
    unsafe {
        let nest_level = (pg_sys::LockTimeout == 0 && unset == Unset::Bounded)
            .then(|| crate::functions::save_setting(c"lock_timeout", c"2s"));
        let (what, holders, timeout) = wait_report(classid, objid);
        let detail = holders.map_or_else(
            || "Its holder has let it go since.".to_owned(),
            |h| format!("{h}."),
        );
        pgrx::PgTryBuilder::new(lock)
            .catch_when(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, |_| {
                raise!(
                    PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
                    format!("could not lock {what} within lock_timeout ({timeout})"),
                    detail.as_str(),
                    "End or wait for that transaction (pg_stat_activity; pg_terminate_backend), or raise lock_timeout; nothing was changed."
                )
            })
            .execute();
        if let Some(level) = nest_level {
            pg_sys::AtEOXact_GUC(false, level);
        }
    }
}

/// What a wait for object (classid, objid) reports: the object, who holds
/// it (None: no one any longer), and lock_timeout.
///
/// # Safety
/// In a transaction, with the catalogs readable.
unsafe fn wait_report(
    classid: pg_sys::Oid,
    objid: pg_sys::Oid,
) -> (String, Option<String>, String) {
    const QUERY: &std::ffi::CStr =
        c"SELECT pg_catalog.pg_describe_object($1, $2, 0), insta_id._lock_holders($1, $2),
                                            pg_catalog.current_setting('lock_timeout')";
    // SAFETY: SPI connected and finished here; three text columns, copied
    // out before SPI_finish frees them.
    unsafe {
        if pg_sys::SPI_connect() != pg_sys::SPI_OK_CONNECT as i32 {
            raise!(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "SPI_connect failed");
        }
        let mut types = [pg_sys::OIDOID, pg_sys::OIDOID];
        let mut values = [Datum::from(classid), Datum::from(objid)];
        if pg_sys::SPI_execute_with_args(
            QUERY.as_ptr(),
            2,
            types.as_mut_ptr(),
            values.as_mut_ptr(),
            std::ptr::null(),
            true,
            1,
        ) != pg_sys::SPI_OK_SELECT as i32
            || pg_sys::SPI_processed != 1
        {
            raise!(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                "reading who holds a lock failed"
            );
        }
        let table = pg_sys::SPI_tuptable;
        let column = |n: i32| {
            let value = pg_sys::SPI_getvalue(*(*table).vals, (*table).tupdesc, n);
            (!value.is_null()).then(|| {
                std::ffi::CStr::from_ptr(value)
                    .to_string_lossy()
                    .into_owned()
            })
        };
        let report = (
            column(1).unwrap_or_else(|| "an object".to_owned()),
            column(2),
            column(3).unwrap_or_default(),
        );
        pg_sys::SPI_finish();
        report
    }
}

/// The owner of an object whose code the gate counts (`_gate_owners`,
/// src/gate_walk/scans.rs), read once the object is held, so that it stays
/// the owner until the statements have run. A relation is held by the
/// gate's own lock already (`_lock_relations`, which ALTER TABLE ... OWNER
/// TO waits for); any other object is locked ACCESS SHARE until the
/// transaction ends, which ALTER FUNCTION (OPERATOR, ...) ... OWNER TO
/// waits for (it takes ACCESS EXCLUSIVE on the object), and its owner read
/// again from the catalog cache after the lock, which has the backend take
/// in what committed before it. None: gone, or a kind without an owner.
/// Locked only when the caller is a superuser, or the owner is one or a
/// role whose rights the caller has: an object of any other role is one
/// the gate refuses to run as (the caller may not act as its owner), and
/// no caller holds up another role's ALTER or DROP through the gate.
///
/// # Safety
/// In a transaction, with the catalogs readable.
pub(crate) unsafe fn held_owner(classid: pg_sys::Oid, objid: pg_sys::Oid) -> Option<pg_sys::Oid> {
    // SAFETY: catalog-cache reads of a kind owned_kind accepts; the lock
    // manager (hold_object takes in the invalidations committed before
    // the lock); role checks of the current user.
    owned_kind(classid)
        .then(|| unsafe { cached_owner(classid, objid) })
        .flatten()
        .and_then(|first| unsafe {
            let may = pg_sys::superuser()
                || pg_sys::superuser_arg(first)
                || pg_sys::has_privs_of_role(pg_sys::GetUserId(), first);
            if !may || classid == pg_sys::RelationRelationId {
                return Some(first);
            }
            hold_object(
                classid,
                objid,
                pg_sys::AccessShareLock as pg_sys::LOCKMODE,
                Unset::Bounded,
            );
            cached_owner(classid, objid)
        })
}

/// The owner of (classid, objid) as the catalog cache has it, None for a
/// kind without an owner or an object gone (`_object_owner`'s answer).
///
/// # Safety
/// In a transaction, with the catalogs readable.
pub(crate) unsafe fn object_owner(classid: pg_sys::Oid, objid: pg_sys::Oid) -> Option<pg_sys::Oid> {
    // SAFETY: a catalog-cache read of a kind owned_kind accepts.
    owned_kind(classid)
        .then(|| unsafe { cached_owner(classid, objid) })
        .flatten()
}

v1!(pg_finfo_insta_id_lock_relations);
/// `insta_id._lock_relations(rels oid[]) RETURNS void`: each relation of
/// rels, in their order, locked ROW EXCLUSIVE until the transaction ends;
/// one gone skipped. The gate's lock (src/sql/gate.sql): writers share it,
/// while CREATE TRIGGER, CREATE INDEX and ALTER TABLE wait for it, so the
/// code the gate found on a relation is the code its statement runs. Taken
/// by OID, by its owner or a superuser (`check_may_lock`), each at once
/// where no one holds it (one call for a schema's relations, no
/// subtransaction), else waited for under lock_timeout (55P03 naming the
/// relation and who holds it), ended by a cancel.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_lock_relations(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with one oid[] argument.
    let rels = unsafe { crate::functions::arg_array(fcinfo, 0, pg_sys::OIDOID) };
    for rel in rels.into_iter().flatten() {
        let rel = pg_sys::Oid::from(rel.value() as u32);
        if exists(pg_sys::SysCacheIdentifier::RELOID, rel) {
            check_may_lock(pg_sys::RelationRelationId, rel);
            // SAFETY: in the transaction of the function's call.
            unsafe { hold_relation(rel) };
        }
    }
    Datum::from(0)
}

/// One advisory lock held, as `_session_state` lists it: `lock <database>
/// <classid> <objid> <objsubid> <shared>`, the fields as pg_locks shows
/// them (a boolean as `t` or `f`).
fn hold_text(tag: &pg_sys::LOCKTAG, shared: bool) -> String {
    format!(
        "lock {} {} {} {} {}",
        tag.locktag_field1,
        tag.locktag_field2,
        tag.locktag_field3,
        tag.locktag_field4 as i16,
        if shared { 't' } else { 'f' }
    )
}

/// A link of a backend's list of the locks it holds (`PGPROC.myProcLocks`):
/// a shared-memory queue before PostgreSQL 16, a dlist since; both are
/// (prev, next) pointers, the list's head a link of the same type.
#[cfg(feature = "pg15")]
type ProcLink = pg_sys::SHM_QUEUE;
#[cfg(not(feature = "pg15"))]
type ProcLink = pg_sys::dlist_node;

/// The head of this backend's list of its locks in lock-table partition
/// `partition`.
///
/// # Safety
/// MyProc is set (a connected backend).
unsafe fn own_lock_list(partition: usize) -> *mut ProcLink {
    // SAFETY: MyProc is this backend's, in shared memory for its life.
    unsafe {
        #[cfg(feature = "pg15")]
        {
            &raw mut (*pg_sys::MyProc).myProcLocks[partition]
        }
        #[cfg(not(feature = "pg15"))]
        {
            &raw mut (*pg_sys::MyProc).myProcLocks[partition].head
        }
    }
}

v1!(pg_finfo_insta_id_advisory_holds);
/// `insta_id._advisory_holds() RETURNS text[]`: the advisory locks this
/// session holds, one text a lock and mode (`hold_text`), in no order.
/// What pg_locks gives, without reading every lock of the server: the gate
/// reads it before and after each run of an owner's code, twice a shard in
/// a migration, where pg_locks cost a fifth of the time (its scan of the
/// lock table grows with max_locks_per_transaction x max_connections). The
/// backend's own list of the locks it holds or awaits is read instead, a
/// partition at a time under that partition's lock, shared, as
/// GetLockStatusData reads the lock table (every change to a PROCLOCK
/// takes that lock exclusive). Advisory locks never take the fast path, so
/// they are all on that list. Every mode held is listed, as pg_locks lists
/// them (SQL takes two; C code may take others).
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_advisory_holds(_fcinfo: FunctionCallInfo) -> Datum {
    let mut held: Vec<(pg_sys::LOCKTAG, pg_sys::LOCKMASK)> = Vec::with_capacity(64);
    let mut partition = 0;
    while partition < pg_sys::NUM_LOCK_PARTITIONS as usize {
        let start = held.len();
        // SAFETY: the partition's LWLock (LockHashPartitionLockByIndex)
        // guards the PROCLOCKs on this backend's list for it and the LOCKs
        // they point to. Nothing allocates while it is held: the vector is
        // filled within its capacity, and a partition that does not fit is
        // read again once the vector has grown, the lock released.
        let fits = unsafe {
            let lwlock = &raw mut (*pg_sys::MainLWLockArray
                .add(pg_sys::LOCK_MANAGER_LWLOCK_OFFSET as usize + partition))
            .lock;
            let head = own_lock_list(partition);
            let mut fits = true;
            pg_sys::LWLockAcquire(lwlock, pg_sys::LWLockMode::LW_SHARED);
            let mut link = (*head).next;
            while !link.is_null() && link != head {
                let proclock = link
                    .byte_sub(std::mem::offset_of!(pg_sys::PROCLOCK, procLink))
                    .cast::<pg_sys::PROCLOCK>();
                let tag = (*(*proclock).tag.myLock).tag;
                if tag.locktag_type == pg_sys::LockTagType::LOCKTAG_ADVISORY as u8
                    && (*proclock).holdMask != 0
                {
                    if held.len() == held.capacity() {
                        fits = false;
                        break;
                    }
                    held.push((tag, (*proclock).holdMask));
                }
                link = (*link).next;
            }
            pg_sys::LWLockRelease(lwlock);
            fits
        };
        if fits {
            partition += 1;
        } else {
            held.truncate(start);
            // (twice the capacity: this partition's may fill it alone)
            held.reserve(2 * held.capacity() - held.len());
        }
    }
    crate::functions::text_array(held.iter().flat_map(|(tag, mask)| {
        (1..pg_sys::MAX_LOCKMODES)
            .filter(move |&m| (*mask as u32) & (1 << m) != 0)
            .map(move |m| hold_text(tag, m == pg_sys::ShareLock))
    }))
}
