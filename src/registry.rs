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
        let mut values = [Datum::from(caller), op, args];
        execute(&CHECK, &mut values);
        let owner = owner_of_registry();
        pg_sys::SetUserIdAndSecContext(
            owner,
            sec_context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
        let nest_level = crate::functions::save_setting(c"search_path", c"pg_catalog, pg_temp");
        execute(&APPLY, &mut values);
        pg_sys::AtEOXact_GUC(false, nest_level);
        pg_sys::SetUserIdAndSecContext(caller, sec_context);
        pg_sys::SPI_finish();
    }
    Datum::from(0)
}

/// One of the two statements, prepared once a session and kept: parsed
/// and planned at each call, they cost half of what a write did (two a
/// shard in a migration). Every name in them is qualified; a kept plan is
/// planned again when what it uses changes (PostgreSQL's plan cache).
struct Statement {
    query: &'static CStr,
    plan: std::cell::Cell<pg_sys::SPIPlanPtr>,
}

// SAFETY: a backend runs one thread; the plans are never shared.
unsafe impl Sync for Statement {}

static CHECK: Statement = Statement {
    query: c"SELECT insta_id._admin_write_check($1::pg_catalog.regrole, $2, $3)",
    plan: std::cell::Cell::new(std::ptr::null_mut()),
};
static APPLY: Statement = Statement {
    query: c"SELECT insta_id._admin_write_apply($2, $3)",
    plan: std::cell::Cell::new(std::ptr::null_mut()),
};

/// Runs one statement with parameters ($1 oid, $2 text, $3 jsonb).
unsafe fn execute(statement: &Statement, values: &mut [Datum; 3]) {
    // SAFETY: SPI connected by the caller; three non-NULL parameters; a
    // plan kept (SPI_keepplan) lives in the cache's memory until freed.
    let rc = unsafe {
        if statement.plan.get().is_null() {
            let mut types = [pg_sys::OIDOID, pg_sys::TEXTOID, pg_sys::JSONBOID];
            let plan = pg_sys::SPI_prepare(statement.query.as_ptr(), 3, types.as_mut_ptr());
            if plan.is_null() || pg_sys::SPI_keepplan(plan) != 0 {
                raise!(
                    PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                    "preparing a write of insta_id's tables failed"
                );
            }
            statement.plan.set(plan);
        }
        pg_sys::SPI_execute_plan(
            statement.plan.get(),
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
/// owns all of insta_id's tables), from the catalog cache.
unsafe fn owner_of_registry() -> pg_sys::Oid {
    // SAFETY: catalog-cache lookups by name in a named schema (no
    // search_path) and by OID.
    unsafe {
        let nsp = pg_sys::get_namespace_oid(c"insta_id_admin".as_ptr(), true);
        let rel = pg_sys::get_relname_relid(c"shard_registry".as_ptr(), nsp);
        crate::locks::cached_owner(pg_sys::RelationRelationId, rel).unwrap_or_else(|| {
            raise!(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                "insta_id_admin.shard_registry has no owner"
            )
        })
    }
}
