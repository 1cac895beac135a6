//! Advisory locks taken by a tenant's code inside the gate
//! (`src/sql/gate.sql`, run by `ddl::run_as_role`). A session-level one
//! would outlive the statement in the caller's session (a DBA's, a
//! migration runner's), held for a role that never asked for it.
//! PostgreSQL shows session and transaction holds alike in pg_locks, and
//! its function-manager hook never sees built-in functions, so neither can
//! tell them apart as they are taken. The gate therefore runs the
//! statements in a subtransaction and compares the backend's advisory
//! locks before and after: when there are new ones, it rolls the
//! subtransaction back (which releases transaction-level holds), releases
//! what is still new (session-level holds, now certain to be), and
//! refuses. Code run through the gate takes no advisory lock of either
//! kind, and releases none of the caller's: a lock held before and gone
//! after (pg_advisory_unlock_all() releases insta_id's own, form 3, too)
//! is refused as well.
//!
//! The comparison is pure (`taken`); reading and releasing are thin.

use pgrx::pg_sys;
use std::ffi::CStr;

/// An advisory lock as pg_locks shows it: database, classid, objid,
/// objsubid (1: one bigint key, 2: two int keys) and whether it is shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advisory {
    pub database: u32,
    pub classid: u32,
    pub objid: u32,
    pub objsubid: u16,
    pub shared: bool,
}

impl Advisory {
    /// One row of `QUERY`: five fields separated by spaces.
    pub fn parse(row: &str) -> Option<Advisory> {
        let mut f = row.split(' ');
        let lock = Advisory {
            database: f.next()?.parse().ok()?,
            classid: f.next()?.parse().ok()?,
            objid: f.next()?.parse().ok()?,
            objsubid: f.next()?.parse().ok()?,
            shared: f.next()? == "t",
        };
        f.next().is_none().then_some(lock)
    }

    /// The key as pg_advisory_lock takes it, for messages.
    pub fn key(&self) -> String {
        if self.objsubid == 1 {
            (((self.classid as u64) << 32 | self.objid as u64) as i64).to_string()
        } else {
            format!("{}, {}", self.classid as i32, self.objid as i32)
        }
    }
}

/// The locks of `after` not in `before`.
pub fn taken(before: &[Advisory], after: &[Advisory]) -> Vec<Advisory> {
    after
        .iter()
        .filter(|l| !before.contains(l))
        .cloned()
        .collect()
}

/// The locks of `before` gone from `after`: released by the owner's code
/// (pg_advisory_unlock_all() releases every session-level one, insta_id's
/// own move and migration locks among them). They cannot be given back;
/// the gate refuses.
pub fn lost(before: &[Advisory], after: &[Advisory]) -> Vec<Advisory> {
    taken(after, before)
}

const QUERY: &CStr =
    c"SELECT l.database OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) l.classid
        OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) l.objid OPERATOR(pg_catalog.||) ' '
        OPERATOR(pg_catalog.||) l.objsubid OPERATOR(pg_catalog.||) ' '
        OPERATOR(pg_catalog.||) (l.mode OPERATOR(pg_catalog.=) 'ShareLock')
    FROM pg_catalog.pg_locks l
    WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted
      AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()";

/// The advisory locks this backend holds, insta_id's own (form 3) too.
/// # Safety
/// SPI must be connected.
pub unsafe fn advisory_locks() -> Vec<Advisory> {
    // SAFETY: SPI connected by the caller; one text column.
    unsafe {
        if pg_sys::SPI_execute(QUERY.as_ptr(), false, 0) != pg_sys::SPI_OK_SELECT as i32 {
            raise!(
                pgrx::PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                "reading the session's advisory locks failed"
            );
        }
        let table = pg_sys::SPI_tuptable;
        (0..pg_sys::SPI_processed as usize)
            .filter_map(|i| {
                let v = pg_sys::SPI_getvalue(*(*table).vals.add(i), (*table).tupdesc, 1);
                Advisory::parse(&CStr::from_ptr(v).to_string_lossy())
            })
            .collect()
    }
}

/// Releases every session-level hold of `lock`, one at a time as
/// pg_advisory_unlock does, until pg_locks no longer shows it (so that no
/// release is asked of a lock not held, which PostgreSQL warns about).
/// # Safety
/// SPI must be connected, and the lock held at session level only.
pub unsafe fn release_session(lock: &Advisory) {
    let tag = pg_sys::LOCKTAG {
        locktag_field1: lock.database,
        locktag_field2: lock.classid,
        locktag_field3: lock.objid,
        locktag_field4: lock.objsubid,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    };
    let mode = if lock.shared {
        pg_sys::ShareLock
    } else {
        pg_sys::ExclusiveLock
    };
    // SAFETY: the lock manager, as pg_advisory_unlock calls it.
    unsafe {
        while pg_sys::LockRelease(&tag, mode as pg_sys::LOCKMODE, true)
            && advisory_locks().contains(lock)
        {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(objid: u32, shared: bool) -> Advisory {
        Advisory {
            database: 5,
            classid: 0,
            objid,
            objsubid: 1,
            shared,
        }
    }

    #[test]
    fn parses_pg_locks_rows() {
        assert_eq!(Advisory::parse("5 0 4242 1 f"), Some(lock(4242, false)));
        assert_eq!(Advisory::parse("5 0 4242 1 t"), Some(lock(4242, true)));
        assert_eq!(Advisory::parse("5 0 4242 1"), None);
        assert_eq!(Advisory::parse("5 0 4242 1 f x"), None);
        assert_eq!(Advisory::parse("5 x 4242 1 f"), None);
    }

    #[test]
    fn keys_as_sql_writes_them() {
        assert_eq!(lock(4242, false).key(), "4242");
        let big = Advisory {
            database: 5,
            classid: 0xFFFF_FFFF,
            objid: 0xFFFF_FFFF,
            objsubid: 1,
            shared: false,
        };
        assert_eq!(big.key(), "-1");
        let pair = Advisory {
            database: 5,
            classid: 7,
            objid: 0xFFFF_FFFE,
            objsubid: 2,
            shared: false,
        };
        assert_eq!(pair.key(), "7, -2");
    }

    #[test]
    fn taken_is_what_is_new() {
        let before = vec![lock(1, false)];
        let after = vec![lock(1, false), lock(2, false), lock(1, true)];
        assert_eq!(taken(&before, &after), vec![lock(2, false), lock(1, true)]);
        assert!(taken(&after, &before).is_empty());
        assert!(lost(&before, &after).is_empty());
        assert_eq!(lost(&after, &before), vec![lock(2, false), lock(1, true)]);
    }
}
