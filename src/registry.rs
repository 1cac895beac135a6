//! The one writer of insta_id's tables (the shard registry and the
//! migration history, `src/sql/registry.sql`): `_admin_write(op, args)`.
//! A delegated shard administrator holds no INSERT, UPDATE or DELETE on
//! them (issue 54: with them, it re-pointed its shard at a schema it could
//! not read, which the DBA's drop_shard then dropped). Every helper writes
//! through this function instead, which
//!   1. asks `_admin_write_check(caller, op, args)` whether the role calling
//!      it (the current user, whoever that is at the call: the helper's
//!      caller, or a table owner's code inside the gate) may write that:
//!      the rules of adopt_shard, in SQL;
//!   2. then runs `_admin_write_apply(op, args)` as the tables' owner (the
//!      extension's), in the caller's transaction, with search_path =
//!      pg_catalog, pg_temp, and switches back.
//!
//! A SECURITY DEFINER function could not do step 1: inside it the current
//! user is its owner, and no SQL names the role that called it.
//! Not PUBLIC's (privileges.sql); `_admin_write_apply` is nobody's but the
//! extension owner's.

use crate::functions::arg;
use pgrx::pg_sys::{self, Datum, FunctionCallInfo};
use pgrx::{pg_guard, PgSqlErrorCode};
use std::ffi::CStr;

v1!(pg_finfo_insta_id_admin_write);
/// `insta_id._admin_write(op text, args jsonb) RETURNS void`.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_admin_write(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with arguments (text, jsonb).
    let (op, args) = unsafe { (arg(fcinfo, 0), arg(fcinfo, 1)) };
    // SAFETY: reads of the backend's user id.
    let (caller, sec_context) = unsafe {
        let mut user = pg_sys::InvalidOid;
        let mut context = 0;
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        (user, context)
    };
    // SAFETY: SPI, connected as the caller.
    unsafe {
        if pg_sys::SPI_connect() != pg_sys::SPI_OK_CONNECT as i32 {
            raise!(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "SPI_connect failed");
        }
        let mut types = [pg_sys::OIDOID, pg_sys::TEXTOID, pg_sys::JSONBOID];
        let mut values = [Datum::from(caller), op, args];
        execute(
            c"SELECT insta_id._admin_write_check($1::pg_catalog.regrole, $2, $3)",
            &mut types,
            &mut values,
        );
        let owner = owner_of_registry();
        pg_sys::SetUserIdAndSecContext(
            owner,
            sec_context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
        let nest_level = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"search_path".as_ptr(),
            c"pg_catalog, pg_temp".as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        execute(
            c"SELECT insta_id._admin_write_apply($2, $3)",
            &mut types,
            &mut values,
        );
        pg_sys::AtEOXact_GUC(false, nest_level);
        pg_sys::SetUserIdAndSecContext(caller, sec_context);
        pg_sys::SPI_finish();
    }
    Datum::from(0)
}

/// Runs one statement with parameters ($1 oid, $2 text, $3 jsonb).
unsafe fn execute(query: &CStr, types: &mut [pg_sys::Oid; 3], values: &mut [Datum; 3]) {
    // SAFETY: SPI connected by the caller; three non-NULL parameters.
    let rc = unsafe {
        pg_sys::SPI_execute_with_args(
            query.as_ptr(),
            3,
            types.as_mut_ptr(),
            values.as_mut_ptr(),
            std::ptr::null(),
            false,
            0,
        )
    };
    if rc < 0 {
        raise!(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("writing insta_id's tables failed ({rc})")
        );
    }
}

/// The owner of insta_id_admin.shard_registry (the extension's owner, who
/// owns all of insta_id's tables).
unsafe fn owner_of_registry() -> pg_sys::Oid {
    // SAFETY: SPI connected by the caller; one oid, read as text.
    unsafe {
        if pg_sys::SPI_execute(
            c"SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) 'insta_id_admin.shard_registry'::pg_catalog.regclass".as_ptr(),
            true,
            1,
        ) != pg_sys::SPI_OK_SELECT as i32
            || pg_sys::SPI_processed != 1
        {
            raise!(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "insta_id_admin.shard_registry has no owner");
        }
        let table = pg_sys::SPI_tuptable;
        let text = CStr::from_ptr(pg_sys::SPI_getvalue(*(*table).vals, (*table).tupdesc, 1));
        pg_sys::Oid::from(
            text.to_str()
                .ok()
                .and_then(|t| t.parse::<u32>().ok())
                .unwrap_or(0),
        )
    }
}
