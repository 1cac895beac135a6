//! The tool's sessions: how it connects, how it reports a server's error,
//! and the two quotings it needs for the few statements that cannot take
//! parameters (DDL).

use crate::conninfo::Settings;
use crate::pq::{Client, GenericClient};
pub use crate::shared::{printable, terminal};
use std::time::Duration;

mod guarded;

/// PGOPTIONS as the process got it, taken out of its environment at start
/// (`keep_pgoptions`): libpq would send it to PgBouncer's console too,
/// which refuses `options`. The tool's sessions and pg_dump get it.
static PGOPTIONS: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Takes PGOPTIONS out of the environment: first thing in main, before any
/// thread starts.
pub fn keep_pgoptions() {
    let o = std::env::var_os("PGOPTIONS").unwrap_or_default();
    std::env::remove_var("PGOPTIONS");
    let _ = PGOPTIONS.set(o.to_string_lossy().into_owned());
}

pub fn pgoptions() -> &'static str {
    PGOPTIONS.get().map_or("", String::as_str)
}

/// What every session of the tool gets from libpq: the operator's
/// keywords between the tool's fallback name and what the tool needs
/// (`last`, which wins). Text as UTF-8 whatever the server's encoding: the
/// tool's names and statements are Rust strings.
fn params<'a>(s: &'a Settings, last: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut p = vec![("fallback_application_name", "insta-id")];
    p.extend(s.params.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    p.push(("client_encoding", "UTF8"));
    p.extend_from_slice(last);
    p
}

/// Connects as `s` says, through libpq. A server's WARNINGs are printed as
/// they arrive; NOTICEs are not. TCP keepalives end the session on the
/// server, and its locks with it, when this end is gone. An error is said
/// as `describe` says it.
pub fn connect(s: &Settings) -> Result<Client, String> {
    // Nothing the tool runs resolves through a schema a database owner
    // controls, whatever the database's or role's settings: the operator's
    // options (the string's or a service's, else PGOPTIONS) then the
    // tool's, which come last and win.
    let theirs = match s.get("options") {
        "" => pgoptions(),
        o => o,
    };
    let options = format!("{theirs} {SESSION_OPTIONS}");
    open(
        s,
        &[
            ("keepalives", "1"),
            ("keepalives_idle", "10"),
            ("options", options.trim_start()),
        ],
        true,
    )
}

/// A PgBouncer admin console's session: no `options` (PgBouncer refuses
/// startup parameters it does not track), no check of the session's
/// read-only state (the console has none, whatever PGTARGETSESSIONATTRS
/// says), and a connect timeout of 10 s when the operator set none (a
/// console that does not answer must not hold a cutover up).
pub fn connect_console(s: &Settings) -> Result<Client, String> {
    let mut last = vec![("target_session_attrs", "any")];
    if s.get("connect_timeout").is_empty() {
        last.push(("connect_timeout", "10"));
    }
    open(s, &last, false)
}

/// Connects through libpq. With a password at hand over TCP, never
/// sending it in clear over a connection that is not encrypted unless
/// require_auth allows it (`guarded`).
fn open(s: &Settings, last: &[(&str, &str)], warnings: bool) -> Result<Client, String> {
    let guarded = s.password_at_hand
        && !s.clear_password
        && matches!(s.get("sslmode"), "disable" | "allow" | "prefer")
        && guarded::over_tcp(s);
    if guarded {
        return guarded::open(s, last, warnings);
    }
    Client::connect(&params(s, last), warnings).map_err(|e| describe(&e))
}

/// `s` as a connection string for a client the tool runs (pg_dump), with
/// the TLS its own session `c` to that server got: with sslmode prefer or
/// allow, pinned to require when `c` has TLS, else disable (which the tool
/// checked, `open`), so that the client's libpq takes no other way (its
/// prefer retries without TLS after an error over TLS). Each value quoted
/// as libpq reads it.
pub fn conninfo_for_client(s: &Settings, c: &Client) -> String {
    pinned_conninfo(&s.params, s.get("sslmode"), c.ssl_in_use())
}

fn pinned_conninfo(params: &[(String, String)], sslmode: &str, tls: bool) -> String {
    let pinned = match (sslmode, tls) {
        ("prefer" | "allow", true) => Some("require"),
        ("prefer" | "allow", false) => Some("disable"),
        _ => None,
    };
    let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
    params
        .iter()
        .filter(|(k, _)| !(pinned.is_some() && k == "sslmode"))
        .map(|(k, v)| format!("{k}={}", quote(v)))
        .chain(pinned.map(|m| format!("sslmode={m}")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The settings every session of the tool has, its own and those of the
/// pg_dump and psql it runs (PGOPTIONS): `literal` relies on the second.
pub const SESSION_OPTIONS: &str =
    "-c search_path=pg_catalog,pg_temp -c standard_conforming_strings=on";

/// An error as psql shows it, with its SQLSTATE when the server sent one,
/// and its detail and hint on lines of their own.
pub fn describe(e: &crate::pq::Error) -> String {
    let Some(db) = e.as_db_error() else {
        // libpq's own words: the refused connection, the missing socket,
        // the password, the certificate.
        return terminal(&e.to_string());
    };
    let mut said = format!("{}: {} ({})", db.severity(), db.message(), db.code());
    if let Some(d) = db.detail() {
        said += &format!("\nDETAIL: {d}");
    }
    if let Some(h) = db.hint() {
        said += &format!("\nHINT: {h}");
    }
    terminal(&said)
}

/// Refuses a session whose role is not a superuser, before anything is
/// made, saying what needs one (`why`); the caller names the server.
pub fn need_superuser(c: &mut Client, why: &str) -> Result<(), String> {
    let r = c
        .query_one(
            "SELECT current_user::text, coalesce((SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), false)",
            &[],
        )
        .described()?;
    if r.get::<_, bool>(1) {
        return Ok(());
    }
    Err(format!(
        "role {} is not a superuser, and {why}: connect as one (the connection string's user, or PGUSER)",
        printable(&r.get::<_, String>(0))
    ))
}

/// A server's error as a message for the operator.
pub trait Described<T> {
    fn described(self) -> Result<T, String>;
}

impl<T> Described<T> for Result<T, crate::pq::Error> {
    fn described(self) -> Result<T, String> {
        self.map_err(|e| describe(&e))
    }
}

/// An identifier, always quoted: any name is safe in it.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A string literal, for sessions with standard_conforming_strings on
/// (SESSION_OPTIONS), where a backslash is an ordinary character.
pub fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_connection_string_keeps_the_tls_the_tool_got() {
        let p = |kv: &[(&str, &str)]| -> Vec<(String, String)> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let given = p(&[("dbname", "it's \\ db"), ("host", "h")]);
        assert_eq!(
            pinned_conninfo(&given, "prefer", true),
            r"dbname='it\'s \\ db' host='h' sslmode=require"
        );
        assert_eq!(
            pinned_conninfo(&given, "allow", false),
            r"dbname='it\'s \\ db' host='h' sslmode=disable"
        );
        let full = p(&[("host", "h"), ("sslmode", "verify-full")]);
        assert_eq!(
            pinned_conninfo(&full, "verify-full", true),
            "host='h' sslmode='verify-full'"
        );
        let prefer = p(&[("host", "h"), ("sslmode", "prefer")]);
        assert_eq!(
            pinned_conninfo(&prefer, "prefer", true),
            "host='h' sslmode=require"
        );
        // (libpq reads it back as given.)
        let back = crate::pq::conninfo_parse(&pinned_conninfo(&given, "prefer", true)).unwrap();
        assert_eq!(back["dbname"], "it's \\ db");
    }

    #[test]
    fn quoting() {
        assert_eq!(ident(r#"a"b"#), r#""a""b""#);
        assert_eq!(ident("Insta 7"), r#""Insta 7""#);
        assert_eq!(literal(r"it's \'"), r"'it''s \'''");
        assert_eq!(printable("a\nb\u{1b}[2Jc"), "ab[2Jc");
        assert_eq!(terminal("a\nb\u{1b}[2Jc\r"), "a\nb[2Jc");
    }
}

/// How far a logical slot's subscriber has come (slot_reached).
#[derive(Debug, PartialEq, Eq)]
pub enum Reached {
    /// It confirmed the position: it applied and flushed all before it.
    Yes,
    /// Not before `until` said to stop.
    No,
    /// The slot is not streaming (its subscription stopped or gone).
    Idle,
}

/// Whether the subscriber of the logical slot `slot` on `publisher` has
/// confirmed `lsn`, polled every `every` until `stop` says to give up; with
/// `idle_ends`, also once the slot is seen inactive (else that is waited
/// out: an apply worker restarts after an ALTER SUBSCRIPTION).
/// First a transaction is committed with synchronous_commit on: it flushes
/// the WAL past `lsn` at once, so the walsender need not wait for the WAL
/// writer. (Local: a synchronous standby need not confirm it, which could
/// take any time.)
pub fn slot_reached(
    publisher: &mut Client,
    slot: &str,
    lsn: &str,
    every: Duration,
    idle_ends: bool,
    mut stop: impl FnMut() -> bool,
) -> Result<Reached, String> {
    publisher
        .batch_execute("BEGIN; SET LOCAL synchronous_commit = local; SELECT pg_catalog.pg_current_xact_id(); COMMIT")
        .described()?;
    loop {
        let r = publisher
            .query_opt(
                "SELECT confirmed_flush_lsn >= $1::text::pg_catalog.pg_lsn, active
                 FROM pg_catalog.pg_replication_slots WHERE slot_name = $2::text",
                &[&lsn, &slot],
            )
            .described()?;
        match r.map(|r| (r.get::<_, Option<bool>>(0), r.get::<_, bool>(1))) {
            Some((Some(true), _)) => return Ok(Reached::Yes),
            Some((_, false)) | None if idle_ends => return Ok(Reached::Idle),
            _ => {}
        }
        if stop() {
            return Ok(Reached::No);
        }
        std::thread::sleep(every);
    }
}
