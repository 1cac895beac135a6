//! The tool's sessions: how it connects, how it reports a server's error,
//! and the two quotings it needs for the few statements that cannot take
//! parameters (DDL).

use crate::conninfo::{Settings, SslMode, Tls};
use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode};
use openssl::x509::{store::X509StoreBuilder, X509};
use postgres::config::SslMode as Mode;
use postgres::Client;
use postgres_openssl::MakeTlsConnector;
use std::time::Duration;

/// The TLS of a connection as `t` says (OpenSSL, as libpq's): the server's
/// certificate checked against the root certificates for verify-ca, and
/// issued to the host too for verify-full; nothing checked for prefer and
/// require; the client's certificate when there is one.
pub fn tls(t: &Tls) -> Result<(MakeTlsConnector, Mode), String> {
    let said = |what: &str, e: openssl::error::ErrorStack| format!("TLS: {what}: {e}");
    let mut b = SslConnector::builder(SslMethod::tls()).map_err(|e| said("OpenSSL", e))?;
    match &t.rootcert {
        // The file's certificates only, as libpq: the builder's store has
        // the system's authorities too, which would let any certificate a
        // public authority signed pass verify-ca (no host checked).
        Some(ca) => {
            let file = |e: openssl::error::ErrorStack| {
                said(&format!("root certificate file \"{}\"", ca.display()), e)
            };
            let pem = std::fs::read(ca)
                .map_err(|e| format!("TLS: root certificate file \"{}\": {e}", ca.display()))?;
            let mut store = X509StoreBuilder::new().map_err(file)?;
            for cert in X509::stack_from_pem(&pem).map_err(file)? {
                store.add_cert(cert).map_err(file)?;
            }
            b.set_cert_store(store.build());
        }
        None => b.set_verify(SslVerifyMode::NONE),
    }
    if let Some((cert, key)) = &t.cert {
        b.set_certificate_chain_file(cert)
            .map_err(|e| said(&format!("certificate file \"{}\"", cert.display()), e))?;
        b.set_private_key_file(key, SslFiletype::PEM)
            .map_err(|e| said(&format!("private key file \"{}\"", key.display()), e))?;
    }
    let mut c = MakeTlsConnector::new(b.build());
    if t.mode != SslMode::VerifyFull {
        c.set_callback(|config, _| {
            config.set_verify_hostname(false);
            Ok(())
        });
    }
    let mode = match t.mode {
        SslMode::Disable => Mode::Disable,
        SslMode::Prefer => Mode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Mode::Require,
    };
    Ok((c, mode))
}

/// Connects as `s` says (TLS as its sslmode asks: `tls`). A server's
/// WARNINGs are printed as they arrive; NOTICEs are not. TCP keepalives end
/// the session on the server, and its locks with it, when this end is gone.
/// An error is said as `describe` says it.
pub fn connect(s: &Settings) -> Result<Client, String> {
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
    let (connector, mode) = tls(&s.tls)?;
    c.ssl_mode(mode);
    c.connect(connector).map_err(|e| describe(&e))
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
