//! The compiled half of the shard helpers (`src/sql/`): what PL/pgSQL
//! cannot do safely by itself. Declared in `src/sql/ddl.sql`, executable by
//! no one but the helpers' callers (not PUBLIC).
//!
//! - `_run_in_schema(nsp, run_as, statements)` runs statements that must see
//!   a shard's (or template's) objects first, the way PostgreSQL runs an
//!   index expression in REFRESH MATERIALIZED VIEW or VACUUM: as `run_as`
//!   (the one owner the gate decided, src/sql/gate.sql), in a
//!   security-restricted operation, with
//!   `search_path` = `<nsp>, pg_catalog, pg_temp`, every setting the
//!   statements change undone afterwards. So the owner's code they reach
//!   never runs with the caller's rights, and insta_id's own code never runs
//!   with the shard's schema on its path.
//! - `_query_in_schema(nsp, run_as, query)` runs one query the same way and
//!   returns its first value: a read of a table whose planning would run
//!   its owner's code (index expressions and predicates are folded).
//! - `_identifier_list(text)` and `_names_schema(text, name)`: the pure
//!   readers of `sql_text`, for settings and bodies taken from the catalogs.

#![allow(clippy::missing_safety_doc)]

use crate::functions::arg;
use crate::sql_text;
use pgrx::pg_sys::{self, Datum, FunctionCallInfo};
use pgrx::{pg_guard, PgSqlErrorCode};
use std::ffi::{CStr, CString};

/// A text argument's bytes, in the database's encoding (never converted:
/// see `sql_text`).
unsafe fn arg_bytes(fcinfo: FunctionCallInfo, n: usize) -> Vec<u8> {
    // SAFETY: a text Datum; text_to_cstring detoasts and copies (text holds no NUL).
    unsafe {
        CStr::from_ptr(pg_sys::text_to_cstring(arg(fcinfo, n).cast_mut_ptr()))
            .to_bytes()
            .to_vec()
    }
}

/// A name argument, as the NUL-terminated string it is.
unsafe fn arg_name<'a>(fcinfo: FunctionCallInfo, n: usize) -> &'a CStr {
    // SAFETY: a name Datum points at a NUL-terminated NameData.
    unsafe {
        let p: *const pg_sys::NameData = arg(fcinfo, n).cast_mut_ptr();
        CStr::from_ptr((*p).data.as_ptr())
    }
}

/// PostgreSQL's quote_identifier (keywords quoted too), as bytes.
fn quote_ident(name: &CStr) -> Vec<u8> {
    // SAFETY: quote_identifier returns its argument or a palloc'd copy.
    unsafe {
        CStr::from_ptr(pg_sys::quote_identifier(name.as_ptr()))
            .to_bytes()
            .to_vec()
    }
}

/// Where PostgreSQL cuts a long identifier in the database's encoding.
fn clip(name: &[u8]) -> usize {
    // SAFETY: pg_mbcliplen reads at most len bytes of the slice.
    unsafe {
        pg_sys::pg_mbcliplen(
            name.as_ptr().cast(),
            name.len() as i32,
            sql_text::MAX_IDENTIFIER_BYTES as i32,
        ) as usize
    }
}

/// The elements of a text[] argument, NULLs refused.
unsafe fn arg_text_array(fcinfo: FunctionCallInfo, n: usize) -> Vec<CString> {
    // SAFETY: a text[] argument; each element a text.
    unsafe {
        crate::functions::arg_array(fcinfo, n, pg_sys::TEXTOID)
            .into_iter()
            .map(|text| match text {
                None => raise!(
                    PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                    "a statement must not be NULL"
                ),
                Some(text) => {
                    CString::from(CStr::from_ptr(pg_sys::text_to_cstring(text.cast_mut_ptr())))
                }
            })
            .collect()
    }
}

/// Whether `member` may act as `role` (SET ROLE to it): the switch below is
/// never more than the caller could do itself.
fn may_set_role(member: pg_sys::Oid, role: pg_sys::Oid) -> bool {
    // SAFETY: catalog-cache lookups.
    unsafe {
        #[cfg(feature = "pg15")]
        return pg_sys::is_member_of_role(member, role);
        #[cfg(not(feature = "pg15"))]
        return pg_sys::member_can_set_role(member, role);
    }
}

v1!(pg_finfo_insta_id_run_in_schema);
/// `insta_id._run_in_schema(nsp name, run_as regrole, statements text[])`.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_run_in_schema(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with arguments (name, regrole, text[]).
    unsafe {
        run_as_role(
            arg_name(fcinfo, 0),
            pg_sys::Oid::from(arg(fcinfo, 1).value() as u32),
            &arg_text_array(fcinfo, 2),
            false,
        )
    };
    Datum::from(0)
}

v1!(pg_finfo_insta_id_query_in_schema);
/// `insta_id._query_in_schema(nsp name, run_as regrole, query text) RETURNS
/// text`: one query run as `_run_in_schema` runs statements, for a value
/// read from a table whose owner's code the planner may run (it folds an
/// index's expressions and predicate, a partition key): the first column of
/// its first row, as text; NULL without a row.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_query_in_schema(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with arguments (name, regrole, text).
    let value = unsafe {
        let query = CString::new(arg_bytes(fcinfo, 2)).expect("a text holds no NUL");
        run_as_role(
            arg_name(fcinfo, 0),
            pg_sys::Oid::from(arg(fcinfo, 1).value() as u32),
            &[query],
            true,
        )
    };
    match value {
        // SAFETY: cstring_to_text_with_len copies len bytes into a palloc'd text.
        Some(v) => Datum::from(unsafe {
            pg_sys::cstring_to_text_with_len(v.as_ptr().cast(), v.len() as i32)
        }),
        None => {
            // SAFETY: fcinfo is the call's; a NULL result.
            unsafe { (*fcinfo).isnull = true };
            Datum::from(0)
        }
    }
}

/// The isolation level's name when a transaction at `level` (XactIsoLevel)
/// reads one snapshot to its end (REPEATABLE READ, SERIALIZABLE), which the
/// gate cannot decide from: its walk after the locks would read the
/// catalogs as they were before them. READ UNCOMMITTED is READ COMMITTED.
fn one_snapshot_level(level: i32) -> Option<&'static str> {
    match level as u32 {
        pg_sys::XACT_REPEATABLE_READ => Some("REPEATABLE READ"),
        pg_sys::XACT_SERIALIZABLE => Some("SERIALIZABLE"),
        _ => None,
    }
}

/// Runs statements in schema nsp as role run_as, in a security-restricted
/// operation (see the module's header). With `want_value`, returns the first
/// column of the last statement's first row, if it returned one that is not
/// NULL (its type's output function runs as run_as too); without, nothing
/// is read.
unsafe fn run_as_role(
    nsp: &CStr,
    run_as: pg_sys::Oid,
    statements: &[CString],
    want_value: bool,
) -> Option<Vec<u8>> {
    // SAFETY: reads of the backend's user id, catalog-cache lookups.
    let (caller, sec_context) = unsafe {
        let mut user = pg_sys::InvalidOid;
        let mut context = 0;
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        (user, context)
    };
    // search_path reads "$user" as the current role's name, quoted or not.
    if nsp.to_bytes() == b"$user" {
        raise!(
            PgSqlErrorCode::ERRCODE_INVALID_SCHEMA_NAME,
            "schema \"$user\" cannot be put on search_path by name",
            "search_path reads it as the current role's name; rename the schema.",
        );
    }
    let quoted = quote_ident(nsp);
    // (for messages only)
    let shown = String::from_utf8_lossy(&quoted).into_owned();
    // SAFETY: a backend global, fixed at the transaction's first snapshot.
    let level = unsafe { pg_sys::XactIsoLevel };
    if let Some(level) = one_snapshot_level(level) {
        raise!(
            PgSqlErrorCode::ERRCODE_INVALID_TRANSACTION_STATE,
            format!("statements in schema {shown} run a table owner's code only in READ COMMITTED, not {level}"),
            "Whose code they may run is read from the catalogs after their locks; this transaction reads a snapshot older than those locks, which would miss a trigger or an index made since, and run it unchecked.",
            "Call the helper outside this transaction, or in one begun with BEGIN ISOLATION LEVEL READ COMMITTED.",
        );
    }
    if !may_set_role(caller, run_as) {
        // SAFETY: a catalog-cache lookup of a role that exists (a regrole argument).
        let role = unsafe { CStr::from_ptr(pg_sys::GetUserNameFromId(run_as, false)) };
        let role = String::from_utf8_lossy(&quote_ident(role)).into_owned();
        raise!(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("statements in schema {shown} would run as a role the caller may not become"),
            format!("The owner of a shard's objects, {role}, runs its statements; the caller must be a member of it."),
            format!("Run it as a member of role {role}, or as a superuser."),
        );
    }
    let path = CString::new([quoted.as_slice(), b", pg_catalog, pg_temp"].concat())
        .expect("a name holds no NUL");
    // SAFETY: SPI, connected as the caller before the switch.
    unsafe {
        if pg_sys::SPI_connect() != pg_sys::SPI_OK_CONNECT as i32 {
            raise!(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "SPI_connect failed");
        }
    }
    let temporary_before = unsafe { temporary_objects() };
    let mut result = None;
    // SAFETY: the sequence PostgreSQL's own maintenance commands use
    // (ExecRefreshMatView, vacuum_rel): switch the user id for a
    // security-restricted operation, open a GUC nest level, run, then undo
    // both. On an error the (sub)transaction's abort restores the user id
    // and the settings, as it does for them. (The gate runs this in a
    // subtransaction of its own, and checks what the statements leave in
    // the session: insta_id._gate_run.)
    unsafe {
        pg_sys::SetUserIdAndSecContext(
            run_as,
            sec_context
                | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
                | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
        );
        let nest_level = crate::functions::save_setting(c"search_path", &path);
        for statement in statements {
            // (a value read: read-only, so that no write, DDL or row lock
            // passes as one: the gate of a read follows no foreign key)
            let rc = pg_sys::SPI_execute(statement.as_ptr(), want_value, 0);
            if rc < 0 {
                raise!(
                    PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                    format!("SPI_execute failed ({rc}) in schema {shown}"),
                );
            }
        }
        // (copied out: SPI_finish frees what SPI_getvalue returns)
        let table = pg_sys::SPI_tuptable;
        if want_value && !table.is_null() && pg_sys::SPI_processed > 0 {
            let value = pg_sys::SPI_getvalue(*(*table).vals, (*table).tupdesc, 1);
            if !value.is_null() {
                result = Some(CStr::from_ptr(value).to_bytes().to_vec());
            }
        }
        pg_sys::AtEOXact_GUC(false, nest_level);
        pg_sys::SetUserIdAndSecContext(caller, sec_context);
    }
    // The restricted operation refuses temporary tables, not (in some
    // releases) temporary types or domains, which outlive it in the caller's
    // pg_temp, searched first for types: a domain pg_temp.text would then check
    // every later text value of the caller's session with the owner's code,
    // as the caller. None may be left (its abort drops them).
    let temporary_after = unsafe { temporary_objects() };
    // SAFETY: SPI connected above.
    unsafe { pg_sys::SPI_finish() };
    if temporary_after
        .iter()
        .any(|o| !temporary_before.contains(o))
    {
        raise!(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("statements in schema {shown} made temporary objects, which would outlive them in the caller's session"),
            "Code of the schema's owner runs in a security-restricted operation; what it makes in pg_temp would run later as the caller.",
        );
    }
    result
}

/// The objects of this session's temporary schema (their OIDs), read with
/// every name and operator qualified: nothing resolves through the path.
unsafe fn temporary_objects() -> Vec<String> {
    // The catalogs whose names PostgreSQL resolves through pg_temp (types,
    // collations; relations, which the restricted operation refuses, and
    // never routines or operators), read by their namespace column (temporary
    // objects record no dependency on their schema).
    const QUERY: &std::ffi::CStr = c"SELECT pg_catalog.array_to_string(pg_catalog.array_agg(o ORDER BY o), ',') FROM (
            SELECT 't' OPERATOR(pg_catalog.||) y.oid::pg_catalog.text FROM pg_catalog.pg_type y
            WHERE y.typnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()
            UNION ALL SELECT 'l' OPERATOR(pg_catalog.||) l.oid::pg_catalog.text FROM pg_catalog.pg_collation l
            WHERE l.collnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) x(o)";
    // Without a temporary schema, nothing to read and no query run (the two
    // reads were half of _run_in_schema's time in a migration).
    let (mut temporary, mut toast) = (pg_sys::InvalidOid, pg_sys::InvalidOid);
    // SAFETY: reads the backend's namespace state into two locals.
    unsafe { pg_sys::GetTempNamespaceState(&mut temporary, &mut toast) };
    if temporary == pg_sys::InvalidOid {
        return Vec::new();
    }
    // SAFETY: SPI is connected by the caller; one row, one column. Not
    // read-only: a new snapshot, which sees what the statements made.
    unsafe {
        if pg_sys::SPI_execute(QUERY.as_ptr(), false, 1) != pg_sys::SPI_OK_SELECT as i32 {
            raise!(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                "reading pg_temp's objects failed"
            );
        }
        let table = pg_sys::SPI_tuptable;
        let value = pg_sys::SPI_getvalue(*(*table).vals, (*table).tupdesc, 1);
        if value.is_null() {
            return Vec::new();
        }
        CStr::from_ptr(value)
            .to_string_lossy()
            .split(',')
            .map(str::to_owned)
            .collect()
    }
}

v1!(pg_finfo_insta_id_identifier_list);
/// `insta_id._identifier_list(list text) RETURNS text[]`: the names of a
/// list setting (search_path), as PostgreSQL reads them; 22023 if malformed.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_identifier_list(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with one text argument.
    let list = unsafe { arg_bytes(fcinfo, 0) };
    let Some(names) = sql_text::split_identifier_list(&list, &clip) else {
        raise!(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "invalid list syntax in a stored setting",
            format!("The setting is: {}", String::from_utf8_lossy(&list)),
        );
    };
    crate::functions::text_array(&names)
}

v1!(pg_finfo_insta_id_search_path_lines);
/// `insta_id._search_path_lines(setting text, schema name) RETURNS text[]`:
/// `{printed, with the placeholder}`, or NULL if malformed.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_search_path_lines(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with arguments (text, name).
    let (setting, schema) = unsafe { (arg_bytes(fcinfo, 0), arg_name(fcinfo, 1)) };
    match crate::placeholder::search_path_lines(&setting, schema.to_bytes(), &clip) {
        Some((printed, placeheld)) => crate::functions::text_array(&[printed, placeheld]),
        None => {
            // SAFETY: fcinfo is the caller's; a NULL result.
            unsafe { (*fcinfo).isnull = true };
            Datum::from(0)
        }
    }
}

v1!(pg_finfo_insta_id_names_schema);
/// `insta_id._names_schema(body text, schema name) RETURNS boolean`.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_names_schema(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with arguments (text, name).
    let (body, schema) = unsafe { (arg_bytes(fcinfo, 0), arg_name(fcinfo, 1)) };
    Datum::from(sql_text::names_schema(&body, schema.to_bytes(), &clip))
}

v1!(pg_finfo_insta_id_next_id_call);
/// `insta_id._next_id_call(tree text, next_id oid) RETURNS bigint[]`:
/// `{shard, sequence}`, or NULL.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_next_id_call(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with a text and an oid argument.
    let (tree, next_id) = unsafe { (arg_bytes(fcinfo, 0), arg(fcinfo, 1).value() as u32) };
    match sql_text::next_id_call(&tree, next_id) {
        Some((shard, seq)) => crate::functions::int8_array(&[i64::from(shard), i64::from(seq)]),
        None => {
            // SAFETY: fcinfo is the caller's; a NULL result.
            unsafe { (*fcinfo).isnull = true };
            Datum::from(0)
        }
    }
}

v1!(pg_finfo_insta_id_without_locations);
/// `insta_id._without_locations(tree text) RETURNS text`.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_without_locations(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with one text argument.
    let tree = unsafe { arg_bytes(fcinfo, 0) };
    crate::functions::text_datum(&sql_text::without_locations(&tree))
}

v1!(pg_finfo_insta_id_without_relids);
/// `insta_id._without_relids(tree text) RETURNS text`.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_without_relids(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with one text argument.
    let tree = unsafe { arg_bytes(fcinfo, 0) };
    crate::functions::text_datum(&sql_text::without_relids(&tree))
}

v1!(pg_finfo_insta_id_tree_relids);
/// `insta_id._tree_relids(tree text) RETURNS oid[]`.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_tree_relids(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with one text argument.
    let tree = unsafe { arg_bytes(fcinfo, 0) };
    crate::functions::oid_array(sql_text::tree_relids(&tree))
}

v1!(pg_finfo_insta_id_names_objects);
/// `insta_id._names_objects(tree text) RETURNS boolean`.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_names_objects(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with one text argument.
    let tree = unsafe { arg_bytes(fcinfo, 0) };
    Datum::from(sql_text::names_objects(&tree))
}

v1!(pg_finfo_insta_id_with_placeholder);
/// `insta_id._with_placeholder(detail text, nsp oid) RETURNS text`: the
/// schema's name as a qualified name writes it, from the catalog cache
/// (a schema dropped meanwhile: the text as it is).
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_with_placeholder(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with a text and an oid argument.
    let (detail, nsp) = unsafe { (arg_bytes(fcinfo, 0), arg(fcinfo, 1).value() as u32) };
    // SAFETY: get_namespace_name returns a palloc'd name, or NULL if none.
    let name = unsafe { pg_sys::get_namespace_name(pg_sys::Oid::from(nsp)) };
    if name.is_null() {
        return crate::functions::text_datum(&detail);
    }
    // SAFETY: a NUL-terminated string, just returned.
    let mut prefix = quote_ident(unsafe { CStr::from_ptr(name) });
    prefix.push(b'.');
    crate::functions::text_datum(&crate::placeholder::with_placeholder(&detail, &prefix))
}

v1!(pg_finfo_insta_id_requalified);
/// `insta_id._requalified(text text, from_nsp name, to_nsp name) RETURNS
/// text`: names qualified with `from_nsp` qualified with `to_nsp` instead
/// (`placeholder::requalified`).
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_requalified(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with a text and two name arguments.
    let (text, from, to) = unsafe {
        (
            arg_bytes(fcinfo, 0),
            arg_name(fcinfo, 1),
            arg_name(fcinfo, 2),
        )
    };
    let (mut prefix, mut replacement) = (quote_ident(from), quote_ident(to));
    prefix.push(b'.');
    replacement.push(b'.');
    crate::functions::text_datum(&crate::placeholder::requalified(
        &text,
        &prefix,
        &replacement,
    ))
}

v1!(pg_finfo_insta_id_tree_const_types);
/// `insta_id._tree_const_types(tree text) RETURNS oid[]`.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_tree_const_types(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with one text argument.
    let tree = unsafe { arg_bytes(fcinfo, 0) };
    crate::functions::oid_array(sql_text::tree_const_types(&tree))
}

v1!(pg_finfo_insta_id_tree_regclasses);
/// `insta_id._tree_regclasses(tree text) RETURNS oid[]`.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_tree_regclasses(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with one text argument.
    let tree = unsafe { arg_bytes(fcinfo, 0) };
    crate::functions::oid_array(sql_text::tree_regclasses(&tree))
}

v1!(pg_finfo_insta_id_in_transaction_block);
/// `insta_id._in_transaction_block() RETURNS boolean`: whether the caller
/// runs inside a transaction block (BEGIN ... COMMIT, or several statements
/// sent at once), so that locks it takes outlive its statement.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_in_transaction_block(_fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: reads the backend's transaction state; no arguments.
    Datum::from(unsafe { pg_sys::IsTransactionBlock() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_snapshot_levels_are_refused() {
        assert_eq!(
            one_snapshot_level(pg_sys::XACT_READ_UNCOMMITTED as i32),
            None
        );
        assert_eq!(one_snapshot_level(pg_sys::XACT_READ_COMMITTED as i32), None);
        assert_eq!(
            one_snapshot_level(pg_sys::XACT_REPEATABLE_READ as i32),
            Some("REPEATABLE READ")
        );
        assert_eq!(
            one_snapshot_level(pg_sys::XACT_SERIALIZABLE as i32),
            Some("SERIALIZABLE")
        );
    }
}
