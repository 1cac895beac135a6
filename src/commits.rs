//! A migration's commits, waited for once (`insta_id.migrate`,
//! src/sql/migrations.sql). The runner commits each schema with
//! `synchronous_commit = off`: a WAL flush a schema was a third of a
//! migration's time. Before it returns it waits, once, for what each of
//! those COMMITs would have waited for. A last transaction of its own cannot
//! do that: PostgreSQL commits a transaction that wrote no WAL but its
//! commit record without waiting (RecordTransactionCommit), whatever
//! `synchronous_commit` says.

use pgrx::pg_guard;
use pgrx::pg_sys::{self, Datum, FunctionCallInfo};

v1!(pg_finfo_insta_id_wait_for_commits);
/// `insta_id._wait_for_commits() RETURNS void`: this session's last commit
/// record, and so all WAL before it, flushed to disk, then confirmed by the
/// synchronous standbys as `synchronous_commit` asks, the calls a COMMIT
/// makes. Nothing to wait for when `synchronous_commit` is off. A cancel
/// during the standbys' wait warns and returns, as it does for a COMMIT:
/// the commits are durable here by then.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_wait_for_commits(_fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: reads of this backend's own globals, then the WAL and
    // synchronous replication calls of RecordTransactionCommit, with
    // interrupts held as there (SyncRepWaitForLSN asserts it; its wait
    // still ends on a cancel, which it reads itself), outside a
    // transaction's commit (no critical section held).
    unsafe {
        let lsn = pg_sys::XactLastCommitEnd;
        if lsn != 0
            && pg_sys::synchronous_commit > pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_OFF as i32
        {
            pg_sys::InterruptHoldoffCount += 1;
            pg_sys::XLogFlush(lsn);
            pg_sys::SyncRepWaitForLSN(lsn, true);
            pg_sys::InterruptHoldoffCount -= 1;
        }
    }
    pgrx::check_for_interrupts!();
    Datum::from(0)
}
