//! The high-water mark in the database's WAL (0.9.0): the extension's
//! sequence `insta_id.high_water` holds the mark's millisecond.
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
//! flushes the record itself and, when the session asks for synchronous
//! replication, waits for the synchronous standbys exactly as a commit does,
//! before any ID the mark covers is returned. A wait that ends without the
//! standbys' confirmation (a cancel) raises an error instead of an ID.
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

/// This database's mark: the OID of `insta_id.high_water` and its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqMark {
    pub relid: Oid,
    owner: Oid,
}

const LOCK: pg_sys::LOCKMODE = pg_sys::ShareUpdateExclusiveLock as pg_sys::LOCKMODE;

impl SeqMark {
    /// `insta_id.high_water` when it is the extension's own sequence; `None`
    /// in a database whose insta_id SQL predates 0.9.0 (the library then
    /// keeps the mark in the data directory's file until the update).
    pub fn find() -> Option<SeqMark> {
        // SAFETY: catalog lookups by name and OID, in a transaction.
        unsafe {
            let nsp = pg_sys::get_namespace_oid(c"insta_id".as_ptr(), true);
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
            pg_sys::RelationClose(rel);
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
        // SAFETY: reads the WAL insert position.
        make_durable(unsafe { pg_sys::GetXLogInsertRecPtr() });
        Ok(())
    }
}

/// Flushes the WAL up to `lsn` (a failed fsync PANICs there, as for every
/// WAL write), then waits for synchronous standbys as a commit would.
fn make_durable(lsn: pg_sys::XLogRecPtr) {
    // SAFETY: plain calls of the WAL and replication machinery, outside any
    // critical section.
    unsafe {
        pg_sys::XLogFlush(lsn);
        pg_sys::SyncRepWaitForLSN(lsn, false);
        // A terminate during the wait leaves ProcDiePending set: die now,
        // before the ID could leave.
        pg_sys::check_for_interrupts!();
    }
    if !replicated(lsn) {
        raise!(
            PgSqlErrorCode::ERRCODE_QUERY_CANCELED,
            "canceled the wait for synchronous replication of insta_id's high-water mark",
            "The synchronous standbys had not confirmed the mark that covers the next ID, so no ID was returned; the mark is written locally.",
        );
    }
}

/// Whether the synchronous standbys this session waits for (by its
/// `synchronous_commit`, like a commit) confirmed `lsn`. SyncRepWaitForLSN
/// returns without a confirmation only after a cancel (with a WARNING) or
/// when no synchronous standby is configured.
fn replicated(lsn: pg_sys::XLogRecPtr) -> bool {
    use pg_sys::SyncCommitLevel::*;
    // SAFETY: plain reads of settings and of the walsenders' shared state,
    // whose LSNs only grow (a stale read errs towards "not yet").
    unsafe {
        let mode = match pg_sys::synchronous_commit as u32 {
            x if x == SYNCHRONOUS_COMMIT_REMOTE_WRITE => pg_sys::SYNC_REP_WAIT_WRITE,
            x if x == SYNCHRONOUS_COMMIT_REMOTE_FLUSH => pg_sys::SYNC_REP_WAIT_FLUSH,
            x if x == SYNCHRONOUS_COMMIT_REMOTE_APPLY => pg_sys::SYNC_REP_WAIT_APPLY,
            _ => return true,
        };
        let names = pg_sys::SyncRepStandbyNames;
        if pg_sys::max_wal_senders == 0
            || names.is_null()
            || *names == 0
            || pg_sys::WalSndCtl.is_null()
        {
            return true;
        }
        let confirmed = std::ptr::read_volatile(&(*pg_sys::WalSndCtl).lsn[mode as usize]);
        confirmed >= lsn
    }
}
