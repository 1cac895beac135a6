//! insta_id: Instagram-style 64-bit IDs minted natively inside PostgreSQL.
//!
//! Modules, one concern each:
//! - `layout`: the bit layout, pure Rust (no database needed to test it);
//! - `guard`: the duplicate guard's algorithm and table, pure Rust;
//! - `guard_store`: where the guard's table lives (shared memory or session);
//! - `clock`: the wall clock in milliseconds (scriptable in test builds);
//! - `settings`: the insta_id.* GUCs;
//! - `functions`: the SQL-facing functions declared in `src/insta_id.sql`.

use pgrx::prelude::*;

/// Raises an ERROR with a SQLSTATE, a message and optionally a detail.
/// Usable in expression position (it has type `!`), unlike `ereport!`.
macro_rules! raise {
    ($code:expr, $msg:expr $(,)?) => {
        $crate::raise_error($code, $msg, None)
    };
    ($code:expr, $msg:expr, $detail:expr $(,)?) => {
        $crate::raise_error($code, $msg, Some(String::from($detail)))
    };
}

#[doc(hidden)]
pub fn raise_error(code: PgSqlErrorCode, message: impl Into<String>, detail: Option<String>) -> ! {
    let mut report = pgrx::pg_sys::panic::ErrorReport::new(code, message.into(), "insta_id");
    if let Some(detail) = detail {
        report = report.set_detail(detail);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

pub mod clock;
pub mod functions;
pub mod guard;
pub mod guard_store;
pub mod layout;
pub mod settings;

#[cfg(feature = "pg_test")]
mod tests;

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("insta_id.sql", name = "surface", bootstrap);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // SAFETY: a plain read of a PostgreSQL global during library load.
    let at_server_start = unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress };
    settings::define(at_server_start);
    guard_store::init(at_server_start);
}

/// This module is required by `cargo pgrx test` invocations.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'insta_id'"]
    }
}
