//! The high-water mark in the database's WAL (0.9.0): the extension's
//! sequence `insta_id_mark.high_water` holds the mark's millisecond. Its
//! schema is nobody's but the extension owner's: a role that could name the
//! sequence could queue a lock on it (CREATE RULE asks for one before any
//! privilege check) that every writer of the mark would wait behind.
//!
//! A sequence is written with a WAL record of its own, outside the writer's
//! transaction (a `setval` is never rolled back), and replayed by every
//! standby, by point-in-time recovery and by crash recovery without the
//! library; `pg_dump` carries it as extension configuration
//! (`pg_extension_config_dump`) and `pg_upgrade` as sequence data. So the
//! mark goes wherever the database's data goes.
//!
//! What a sequence does not give by itself is durability before the ID
//! leaves: its record is flushed at the writer's commit, and a transaction
//! that aborts, or commits asynchronously, never waits for it. So the writer
//! flushes the record itself and, whenever synchronous standbys are
//! configured, waits until they have flushed it, before any ID the mark
//! covers is returned: whatever the writing session's `synchronous_commit`,
//! since every session of the database trusts the mark it wrote. The wait
//! polls the standbys' confirmed position rather than joining the commit
//! queue (`SyncRepWaitForLSN`), whose cancel only warns: here a cancel or a
//! statement timeout is an ordinary error, and no ID is returned.
//!
//! Writers serialise on a `ShareUpdateExclusiveLock` of the sequence
//! (self-conflicting; never held by `nextval`, `setval` or readers, which
//! take lighter locks): an ordinary lock wait, which `statement_timeout`, a
//! cancel and a terminate end. The lock is released as soon as the mark is
//! durable, and by the transaction's abort on an error.
//!
//! The sequence is read and written as its owner (the role that created the
//! extension), for the one call into PostgreSQL's sequence functions, under
//! `SECURITY_RESTRICTED_OPERATION`: those functions run no user code.

use crate::mark::{Durable, MarkError};
use pgrx::pg_sys::{self, Oid};
use pgrx::{IntoDatum, PgSqlErrorCode};

/// This database's mark: the OID of `insta_id_mark.high_water` and its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqMark {
    pub relid: Oid,
    owner: Oid,
}

const LOCK: pg_sys::LOCKMODE = pg_sys::ShareUpdateExclusiveLock as pg_sys::LOCKMODE;

impl SeqMark {
    /// `insta_id_mark.high_water` when it is the extension's own sequence; `None`
    /// in a database whose insta_id SQL predates 0.9.0 (the library then
    /// keeps the mark in the data directory's file until the update).
    pub fn find() -> Option<SeqMark> {
        // SAFETY: catalog lookups by name and OID, in a transaction.
        unsafe {
            let nsp = pg_sys::get_namespace_oid(c"insta_id_mark".as_ptr(), true);
            if nsp == pg_sys::InvalidOid {
                return None;
            }
            let relid = pg_sys::get_relname_relid(c"high_water".as_ptr(), nsp);
            if relid == pg_sys::InvalidOid
                || pg_sys::get_rel_relkind(relid) != pg_sys::RELKIND_SEQUENCE as std::ffi::c_char
            {
                return None;
            }
            let ext = pg_sys::get_extension_oid(c"insta_id".as_ptr(), true);
            if ext == pg_sys::InvalidOid
                || pg_sys::getExtensionOfObject(pg_sys::RelationRelationId, relid) != ext
            {
                return None;
            }
            let rel = pg_sys::RelationIdGetRelation(relid);
            if rel.is_null() {
                return None;
            }
            let owner = (*(*rel).rd_rel).relowner;
            let permanent = (*(*rel).rd_rel).relpersistence
                == pg_sys::RELPERSISTENCE_PERMANENT as std::ffi::c_char;
            pg_sys::RelationClose(rel);
            // A sequence whose writes are not WAL-logged, or that its owner
            // may not read and set (a REVOKE), would be read as "no mark yet".
            let mode = (pg_sys::ACL_SELECT | pg_sys::ACL_UPDATE) as pg_sys::AclMode;
            if !permanent
                || pg_sys::pg_class_aclcheck(relid, owner, mode) != pg_sys::AclResult::ACLCHECK_OK
            {
                raise!(
                    PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                    "insta_id's high-water mark \"insta_id_mark.high_water\" is not usable",
                    "It must be a logged sequence that its owner may read and set.",
                    "Recreate the extension's objects with ALTER EXTENSION insta_id UPDATE from a fresh install, or restore the owner's privileges on the sequence.",
                );
            }
            Some(SeqMark { relid, owner })
        }
    }

    /// Runs `f` as the sequence's owner, restricted.
    fn as_owner<R>(&self, f: impl FnOnce() -> R) -> R {
        let (mut user, mut context) = (pg_sys::InvalidOid, 0);
        // SAFETY: saving and setting the backend's user for one call; an
        // error inside is cleaned up by the (sub)transaction's abort, which
        // restores the user it started with.
        unsafe {
            pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
            pg_sys::SetUserIdAndSecContext(
                self.owner,
                context
                    | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
                    | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
            );
        }
        let r = f();
        // SAFETY: as above.
        unsafe { pg_sys::SetUserIdAndSecContext(user, context) };
        r
    }
}

/// The writers' lock, held until the mark is durable.
pub struct SeqLock(Oid);

impl Drop for SeqLock {
    fn drop(&mut self) {
        // On an error the transaction's abort releases it; no call into
        // PostgreSQL while an error unwinds.
        if !std::thread::panicking() {
            // SAFETY: releases the lock `lock` took in this transaction.
            unsafe { pg_sys::UnlockRelationOid(self.0, LOCK) };
        }
    }
}

impl Durable for SeqMark {
    type Lock<'a> = SeqLock;

    fn lock(&self, must: bool) -> Result<Option<SeqLock>, MarkError> {
        // SAFETY: heavyweight lock calls in a transaction; waiting checks for
        // interrupts (and deadlocks) as every lock wait does.
        unsafe {
            if must {
                pg_sys::LockRelationOid(self.relid, LOCK);
            } else if !pg_sys::ConditionalLockRelationOid(self.relid, LOCK) {
                return Ok(None);
            }
        }
        Ok(Some(SeqLock(self.relid)))
    }

    /// Works on a standby too (a sequence's row is readable there).
    fn read(&self) -> Result<Option<i64>, MarkError> {
        Ok(self.as_owner(|| {
            // SAFETY: a sequence function called with the OID it expects.
            unsafe {
                pgrx::direct_function_call::<i64>(
                    pg_sys::pg_sequence_last_value,
                    &[self.relid.into_datum()],
                )
            }
        }))
    }

    fn write(&self, mark: i64, _first: bool) -> Result<i64, MarkError> {
        self.as_owner(|| {
            // SAFETY: as in `read`; setval WAL-logs the new value at once.
            unsafe {
                pgrx::direct_function_call::<i64>(
                    pg_sys::setval_oid,
                    &[self.relid.into_datum(), mark.into_datum()],
                )
            }
        });
        // SAFETY: the end of the record setval just inserted.
        make_durable(unsafe { pg_sys::XactLastRecEnd });
        Ok(mark)
    }

    /// A writer that failed between its setval and the standbys' answer left
    /// a value that may not be durable: flush and wait up to everything
    /// inserted so far, which includes it.
    fn confirm(&self, _stored: i64) -> Result<(), MarkError> {
        // SAFETY: reads the WAL insert position and the segment size.
        let (pos, segment) = unsafe { (pg_sys::GetXLogInsertRecPtr(), pg_sys::wal_segment_size) };
        make_durable(inserted_end(
            pos,
            pg_sys::XLOG_BLCKSZ as u64,
            segment as u64,
        ));
        Ok(())
    }
}

/// The end of the WAL inserted so far, given the insert position, which is
/// where the next record will start: past the header of a page nothing has
/// been written to yet. Flushing there would ask for bytes that do not exist
/// yet ("xlog flush request ... is not satisfied"), so such a position
/// becomes the page's start, the end of the last record. (PostgreSQL 17 has
/// GetXLogInsertEndRecPtr for this; 15 and 16 do not.)
fn inserted_end(pos: u64, page: u64, segment: u64) -> u64 {
    const SHORT_HEADER: u64 = 24; // SizeOfXLogShortPHD
    const LONG_HEADER: u64 = 40; // SizeOfXLogLongPHD, a segment's first page
    let header = if pos % segment < page {
        LONG_HEADER
    } else {
        SHORT_HEADER
    };
    if pos % page == header {
        pos - header
    } else {
        pos
    }
}

/// Flushes the WAL up to `lsn` (a failed fsync PANICs there, as for every
/// WAL write), then waits until the synchronous standbys, if any are
/// configured, have flushed it too.
fn make_durable(lsn: pg_sys::XLogRecPtr) {
    // SAFETY: a plain call of the WAL machinery, outside any critical section.
    unsafe { pg_sys::XLogFlush(lsn) };
    while !replicated(lsn) {
        // Not in the commit queue, so nobody sets the latch: poll every
        // millisecond (a standby confirms within a round trip). A cancel, a
        // statement timeout, a terminate: an error, no ID.
        crate::latch::nap(1, pg_sys::WaitEventIPC::WAIT_EVENT_SYNC_REP);
    }
}

/// Whether `lsn` needs no more waiting: no synchronous standby is
/// configured (in this session's settings, or any more in the server's
/// shared state, which a reload that empties synchronous_standby_names
/// clears), or they have flushed it.
fn replicated(lsn: pg_sys::XLogRecPtr) -> bool {
    // SAFETY: plain reads of settings and of the walsenders' shared state,
    // whose positions only grow (a stale read errs towards "not yet").
    unsafe {
        let names = pg_sys::SyncRepStandbyNames;
        if pg_sys::max_wal_senders == 0
            || names.is_null()
            || *names == 0
            || pg_sys::WalSndCtl.is_null()
        {
            return true;
        }
        let ctl = pg_sys::WalSndCtl;
        let status = std::ptr::read_volatile(&(*ctl).sync_standbys_status);
        if !sync_standbys_defined(status, server_version_num()) {
            return true;
        }
        std::ptr::read_volatile(&(*ctl).lsn[pg_sys::SYNC_REP_WAIT_FLUSH as usize]) >= lsn
    }
}

/// The first minor release of each major whose WalSndCtlData has the bits
/// `sync_standbys_status` (INIT, DEFINED) where earlier minors have the
/// bool `sync_standbys_defined` in the same byte: PostgreSQL's fix of the
/// startup race of synchronous_standby_names (April 2025), first released
/// in 15.13, 16.9 and 17.5; 18 has it from its first release. This library
/// is built against one minor's headers and loads into any minor of its
/// major, so the byte is read as the running server's minor wrote it.
const SYNC_STANDBYS_STATUS_SINCE: [i32; 3] = [150_013, 160_009, 170_005];

/// Whether the checkpointer has published that synchronous standbys are
/// defined, from the byte `status` of a server of `server_version_num`.
/// Before the bits: the bool (1 is defined). With them: defined unless
/// initialised without DEFINED (not yet initialised: PostgreSQL itself then
/// falls back to the session's setting, which is set, since the caller
/// checked it).
fn sync_standbys_defined(status: u8, server_version_num: i32) -> bool {
    let major = server_version_num / 10_000;
    let has_bits = SYNC_STANDBYS_STATUS_SINCE
        .iter()
        .find(|since| *since / 10_000 == major)
        .is_none_or(|since| server_version_num >= *since);
    if !has_bits {
        return status != 0;
    }
    let init = pg_sys::SYNC_STANDBY_INIT as u8;
    let defined = pg_sys::SYNC_STANDBY_DEFINED as u8;
    status & (init | defined) != init
}

/// The running server's version (server_version_num), read once: the
/// minor of the server binary, which may be older than the headers'.
fn server_version_num() -> i32 {
    static VERSION: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        // SAFETY: a read-only GUC every server has; the result is a C
        // string owned by the GUC machinery.
        let text = unsafe {
            let p = pg_sys::GetConfigOption(c"server_version_num".as_ptr(), false, false);
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        };
        text.parse().unwrap_or(pg_sys::PG_VERSION_NUM as i32)
    })
}

#[cfg(test)]
mod tests {
    use super::{inserted_end, sync_standbys_defined};

    #[test]
    fn the_sync_standbys_byte_is_read_as_the_running_minor_wrote_it() {
        // 15.12, 16.8, 17.4: a bool, 1 when defined.
        for old in [150_012, 160_008, 170_004] {
            assert!(sync_standbys_defined(1, old), "{old}");
            assert!(!sync_standbys_defined(0, old), "{old}");
        }
        // 15.13, 16.9, 17.5, 18.0 and later: INIT (1) | DEFINED (2).
        for new in [150_013, 150_020, 160_009, 170_005, 180_000, 180_006] {
            assert!(
                !sync_standbys_defined(1, new),
                "{new}: initialised, none defined"
            );
            assert!(sync_standbys_defined(3, new), "{new}: defined");
            assert!(
                sync_standbys_defined(0, new),
                "{new}: not yet initialised: the session's setting"
            );
        }
    }

    const PAGE: u64 = 8192;
    const SEGMENT: u64 = 16 << 20;

    #[test]
    fn a_position_past_an_empty_pages_header_ends_at_the_page() {
        // A page inside a segment: the short header.
        assert_eq!(inserted_end(0x10DB_C018, PAGE, SEGMENT), 0x10DB_C000);
        // A segment's first page: the long header.
        assert_eq!(inserted_end(0x1100_0028, PAGE, SEGMENT), 0x1100_0000);
        // The long header's size on a page inside a segment is a record's
        // end (a continuation of 16 bytes), kept as it is.
        assert_eq!(inserted_end(0x10DB_C028, PAGE, SEGMENT), 0x10DB_C028);
    }

    #[test]
    fn a_position_after_a_record_is_its_end() {
        for pos in [0x10DB_C030, 0x10DB_DFF8, 0x1100_0030, 0x1100_0018] {
            assert_eq!(inserted_end(pos, PAGE, SEGMENT), pos);
        }
    }
}
