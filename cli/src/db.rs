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
    if s.password.is_some() && !s.clear_password && !s.host.starts_with('/') {
        refuse_clear_password(s)?;
    }
    let (connector, mode) = tls(&s.tls)?;
    c.ssl_mode(mode);
    c.connect(connector).map_err(|e| describe(&e))
}

/// AuthenticationCleartextPassword: the server's `password` method.
const CLEARTEXT: i32 = 3;

/// Refuses a connection on which the password would cross the network in
/// clear: not encrypted (sslmode disable, or prefer with a server that
/// offers no TLS), and the server asking for it with its `password` method
/// (md5 and SCRAM never send it). libpq would send it; its `require_auth`
/// says which methods it may answer, and `password` in it allows this.
/// The server is asked first, as the connection would ask it, and left
/// before anything is sent (PostgreSQL logs nothing for that).
pub fn refuse_clear_password(s: &Settings) -> Result<(), String> {
    use crate::conninfo::SslMode;
    use std::io::{Read, Write};
    if !matches!(s.tls.mode, SslMode::Disable | SslMode::Prefer) {
        return Ok(());
    }
    let asked = || -> std::io::Result<Option<i32>> {
        let timeout = Duration::from_secs(s.connect_timeout.unwrap_or(10).max(1));
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&(s.host.as_str(), s.port))?
            .next()
            .ok_or_else(|| std::io::Error::other("no address"))?;
        let mut tcp = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        tcp.set_read_timeout(Some(timeout))?;
        if s.tls.mode == SslMode::Prefer {
            // SSLRequest: a server that offers TLS gets the password in it.
            tcp.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])?;
            let mut answer = [0u8; 1];
            tcp.read_exact(&mut answer)?;
            if answer[0] == b'S' {
                return Ok(None);
            }
        }
        let mut startup = 196_608i32.to_be_bytes().to_vec(); // protocol 3.0
        for (k, v) in [("user", &s.user), ("database", &s.dbname)] {
            startup.extend_from_slice(k.as_bytes());
            startup.push(0);
            startup.extend_from_slice(v.as_bytes());
            startup.push(0);
        }
        startup.push(0);
        tcp.write_all(&((startup.len() + 4) as i32).to_be_bytes())?;
        tcp.write_all(&startup)?;
        let mut head = [0u8; 9];
        tcp.read_exact(&mut head)?;
        Ok((head[0] == b'R').then(|| i32::from_be_bytes([head[5], head[6], head[7], head[8]])))
    };
    match asked() {
        Ok(Some(CLEARTEXT)) => Err(format!(
            "server {}: it asks for the password in clear (its pg_hba.conf method is password) over a connection that is not encrypted: insta-id does not send it. Use TLS (sslmode=require, or verify-full), or scram-sha-256 on the server; or allow it with require_auth=password in the connection string",
            s.label
        )),
        // Anything else (another method, an error, no answer): the
        // connection itself says it.
        _ => Ok(()),
    }
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
