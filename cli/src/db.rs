//! The tool's sessions: how it connects, how it reports a server's error,
//! and the two quotings it needs for the few statements that cannot take
//! parameters (DDL).

use crate::conninfo::Settings;
use postgres::{Client, NoTls};
use std::time::Duration;

/// Connects as `s` says, without TLS (conninfo refuses the modes that need
/// it). A server's WARNINGs are printed as they arrive (a move's cutover
/// says with them that it tries again); NOTICEs are not. TCP keepalives end
/// the session on the server, and its locks with it, when this end is gone.
pub fn connect(s: &Settings) -> Result<Client, postgres::Error> {
    let mut c = postgres::Config::new();
    c.host(&s.host)
        .port(s.port)
        .dbname(&s.dbname)
        .user(&s.user)
        .application_name(s.application_name.as_deref().unwrap_or("insta-id"))
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(10))
        .notice_callback(|n| {
            if n.severity() == "WARNING" {
                println!("   WARNING:  {}", printable(n.message()));
            }
        });
    if let Some(p) = &s.password {
        c.password(p);
    }
    if let Some(t) = s.connect_timeout {
        c.connect_timeout(Duration::from_secs(t));
    }
    // Nothing the tool runs resolves through a schema a database owner
    // controls, whatever the database's or role's settings: options the
    // client gives come last and win.
    c.options(&match &s.options {
        Some(o) => format!("{o} {SESSION_OPTIONS}"),
        None => SESSION_OPTIONS.to_string(),
    });
    c.connect(NoTls)
}

/// The settings every session of the tool has, its own and those of the
/// pg_dump and psql it runs (PGOPTIONS): `literal` relies on the second.
pub const SESSION_OPTIONS: &str =
    "-c search_path=pg_catalog,pg_temp -c standard_conforming_strings=on";

/// An error as psql shows it, with its SQLSTATE when the server sent one,
/// and its detail and hint on lines of their own.
pub fn describe(e: &postgres::Error) -> String {
    let Some(db) = e.as_db_error() else {
        // The kind ("error connecting to server") and each cause under it
        // (the refused connection, the missing socket, the password).
        let mut said = e.to_string();
        let mut cause = std::error::Error::source(e);
        while let Some(c) = cause {
            said += &format!(": {c}");
            cause = c.source();
        }
        return terminal(&said);
    };
    let mut said = format!("{}: {} ({})", db.severity(), db.message(), db.code().code());
    if let Some(d) = db.detail() {
        said += &format!("\nDETAIL: {d}");
    }
    if let Some(h) = db.hint() {
        said += &format!("\nHINT: {h}");
    }
    terminal(&said)
}

/// A server's error as a message for the operator.
pub trait Described<T> {
    fn described(self) -> Result<T, String>;
}

impl<T> Described<T> for Result<T, postgres::Error> {
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

/// Text a shard's owner may have chosen (names), as the operator's terminal
/// and logs should get it: without control characters.
pub fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).collect()
}

/// A message of several lines that may quote such names (a server's error,
/// pg_dump's): its lines kept, every other control character dropped.
pub fn terminal(text: &str) -> String {
    text.chars()
        .filter(|c| *c == '\n' || !c.is_control())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(ident(r#"a"b"#), r#""a""b""#);
        assert_eq!(ident("Insta 7"), r#""Insta 7""#);
        assert_eq!(literal(r"it's \'"), r"'it''s \'''");
        assert_eq!(printable("a\nb\u{1b}[2Jc"), "ab[2Jc");
        assert_eq!(terminal("a\nb\u{1b}[2Jc\r"), "a\nb[2Jc");
    }
}
