//! insta_id: Instagram-style 64-bit IDs minted natively inside PostgreSQL.
//!
//! Modules, one concern each:
//! - `layout`: the bit layout, pure Rust (no database needed to test it);
//! - `guard`: the duplicate guard's algorithm and table, pure Rust;
//! - `guard_store`: where the guard's table lives (shared memory, the DSM
//!   registry, or the session);
//! - `mark`: the durable high-water mark of issued milliseconds, which
//!   carries the guard across restarts, failovers, restores and upgrades
//!   (its decisions, and the 0.8.0 file);
//! - `mark_wal`: where 0.9.0 keeps it: a WAL-logged sequence per database;
//! - `clock`: the wall clock in milliseconds (scriptable in test builds);
//! - `settings`: the insta_id.* GUCs;
//! - `functions`: the SQL-facing functions declared in `src/sql/ids.sql` and
//!   `src/sql/guard.sql`;
//! - `pg_extern_bench`: #[pg_extern] twins of two of them, for `make bench`;
//! - `sql_text`: reading SQL text from the catalogs (list settings, bodies),
//!   pure Rust;
//! - `ddl`: the compiled half of the shard helpers (statements run as a
//!   schema's owner, the readers of `sql_text` for SQL);
//! - `src/sql/*.sql`: the SQL, one file per concern (the order is below).

use pgrx::prelude::*;

/// Raises an ERROR with a SQLSTATE, a message, optionally a detail and a hint.
/// Usable in expression position (it has type `!`), unlike `ereport!`.
macro_rules! raise {
    ($code:expr, $msg:expr $(,)?) => {
        $crate::raise_error($code, $msg, None, None)
    };
    ($code:expr, $msg:expr, $detail:expr $(,)?) => {
        $crate::raise_error($code, $msg, Some(String::from($detail)), None)
    };
    ($code:expr, $msg:expr, $detail:expr, $hint:expr $(,)?) => {
        $crate::raise_error(
            $code,
            $msg,
            Some(String::from($detail)),
            Some(String::from($hint)),
        )
    };
}

#[doc(hidden)]
pub fn raise_error(
    code: PgSqlErrorCode,
    message: impl Into<String>,
    detail: Option<String>,
    hint: Option<String>,
) -> ! {
    let mut report = pgrx::pg_sys::panic::ErrorReport::new(code, message.into(), "insta_id");
    if let Some(detail) = detail {
        report = report.set_detail(detail);
    }
    if let Some(hint) = hint {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Declares the version-1 calling convention record PostgreSQL looks up.
macro_rules! v1 {
    ($finfo:ident) => {
        #[unsafe(no_mangle)]
        pub extern "C" fn $finfo() -> &'static pgrx::pg_sys::Pg_finfo_record {
            static V1: pgrx::pg_sys::Pg_finfo_record =
                pgrx::pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }
    };
}

/// A value private to this backend. PostgreSQL runs each session in its own
/// single-threaded process, so a plain static cell is enough; it is also
/// cheaper than a thread-local, which from a shared library costs a call.
pub(crate) struct BackendCell<T>(std::cell::Cell<T>);

// SAFETY: only ever touched from the backend's one thread.
unsafe impl<T> Sync for BackendCell<T> {}

impl<T: Copy> BackendCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        BackendCell(std::cell::Cell::new(value))
    }
    #[inline(always)]
    pub(crate) fn get(&self) -> T {
        self.0.get()
    }
    #[inline(always)]
    pub(crate) fn set(&self, value: T) {
        self.0.set(value)
    }
}

pub mod clock;
pub mod commits;
pub mod ddl;
pub mod functions;
pub mod gate_walk;
pub mod guard;
pub mod guard_segment;
pub mod guard_store;
pub mod latch;
pub mod layout;
pub mod locks;
pub mod mark;
pub mod mark_wal;
mod pg_extern_bench;
pub mod placeholder;
pub mod registry;
pub mod settings;
pub mod shortcode;
pub mod sql_text;

#[cfg(feature = "pg_test")]
mod tests;

::pgrx::pg_module_magic!(name, version);

// Once a version is released its SQL is frozen (sql/SHA256SUMS,
// CONTRIBUTING.md). The SQL, one file per concern under src/sql/, each opening with what it
// owns and the search_path and privilege rules of its functions; loaded in
// this order (a LANGUAGE sql function's body is checked at creation, so what
// it reads comes first); privileges.sql last, so its default deny covers all.
extension_sql_file!("sql/ids.sql", name = "ids", bootstrap);
extension_sql_file!("sql/guard.sql", name = "guard", requires = ["ids"]);
extension_sql_file!("sql/ddl.sql", name = "ddl", requires = ["guard"]);
extension_sql_file!("sql/registry.sql", name = "registry", requires = ["ddl"]);
extension_sql_file!("sql/locks.sql", name = "locks", requires = ["registry"]);
extension_sql_file!("sql/gate.sql", name = "gate", requires = ["locks"]);
extension_sql_file!(
    "sql/migrations.sql",
    name = "migrations",
    requires = ["gate"]
);
extension_sql_file!(
    "sql/id_columns.sql",
    name = "id_columns",
    requires = ["migrations"]
);
extension_sql_file!(
    "sql/template_plan.sql",
    name = "template_plan",
    requires = ["id_columns"]
);
extension_sql_file!(
    "sql/template_copy.sql",
    name = "template_copy",
    requires = ["template_plan"]
);
extension_sql_file!(
    "sql/drift.sql",
    name = "drift",
    requires = ["template_copy"]
);
extension_sql_file!("sql/moves.sql", name = "moves", requires = ["drift"]);
extension_sql_file!("sql/time.sql", name = "time", requires = ["moves"]);
extension_sql_file!(
    "sql/partitions.sql",
    name = "partitions",
    requires = ["time"]
);
extension_sql_file!("sql/privileges.sql", name = "privileges", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // SAFETY: a plain read of a PostgreSQL global during library load.
    let at_server_start = unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress };
    settings::define(at_server_start);
    functions::init();
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
