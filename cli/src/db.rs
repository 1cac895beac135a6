//! The tool's sessions: how it connects, how it reports a server's error,
//! and the two quotings it needs for the few statements that cannot take
//! parameters (DDL).

use crate::conninfo::Settings;
use crate::pq::{Client, GenericClient};
pub use crate::shared::{printable, terminal};
use std::time::Duration;

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

/// Connects, never sending a password in clear over a connection that is
/// not encrypted unless require_auth allows it (libpq would send it to a
/// server whose pg_hba.conf method is `password`). With a password at hand
/// over TCP: for sslmode prefer, TLS first, on any host; without TLS only
/// when the server refused TLS (libpq's prefer also retries without TLS
/// after an error over TLS, where the server may ask for the password in
/// clear: here that error is the answer). Before a connection without TLS,
/// each server is asked which method it wants (`refuse_clear_password`).
fn open(s: &Settings, last: &[(&str, &str)], warnings: bool) -> Result<Client, String> {
    let mut p = params(s, last);
    let mode = s.get("sslmode");
    let guarded = s.password_at_hand
        && !s.clear_password
        && matches!(mode, "disable" | "allow" | "prefer")
        && !tcp_targets(s).is_empty();
    if guarded {
        if mode == "prefer" {
            p.push(("sslmode", "require"));
            match Client::connect(&p, warnings) {
                Ok(c) => return Ok(c),
                // (Asked of the servers, not read in libpq's message, which
                // its translations word differently.)
                Err(e)
                    if !tcp_targets(s)
                        .iter()
                        .all(|(h, port)| refuses_tls(s, h, *port)) =>
                {
                    return Err(describe(&e))
                }
                Err(_) => {}
            }
            p.pop();
            p.push(("sslmode", "disable"));
        }
        refuse_clear_password(s)?;
        // And libpq 16 or later enforces it within the connection too,
        // whatever changed since the look (an operator's require_auth, which
        // already leaves `password` out, stays as given).
        if crate::pq::lib_version() >= 160_000 && s.get("require_auth").is_empty() {
            p.push(("require_auth", "!password"));
        }
    }
    Client::connect(&p, warnings).map_err(|e| describe(&e))
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

/// The TCP servers a connection may try, as libpq lists them: each host
/// (or its hostaddr when given) with its port (the last port given when
/// there are fewer); Unix sockets left out.
fn tcp_targets(s: &Settings) -> Vec<(String, u16)> {
    let hosts: Vec<&str> = s.get("host").split(',').collect();
    let addrs: Vec<&str> = s.get("hostaddr").split(',').collect();
    let ports: Vec<&str> = s.get("port").split(',').collect();
    let n = hosts.len().max(addrs.len());
    (0..n)
        .filter_map(|i| {
            let target = match addrs.get(i).copied().unwrap_or("") {
                "" => hosts.get(i).copied().unwrap_or(""),
                a => a,
            };
            if target.is_empty() || target.starts_with('/') || target.starts_with('@') {
                return None;
            }
            let port = ports.get(i).or(ports.last()).copied().unwrap_or("");
            Some((target.to_string(), port.parse().unwrap_or(5432)))
        })
        .collect()
}

/// How long a look at a server may take: the connect timeout given (as
/// libpq reads it, at least 2 s), else 10 s.
fn look_timeout(s: &Settings) -> Duration {
    Duration::from_secs(
        s.get("connect_timeout")
            .parse::<u64>()
            .ok()
            .filter(|t| *t > 0)
            .unwrap_or(10)
            .max(2),
    )
}

/// Whether the server at `host`:`port` answers an SSLRequest with `N`
/// (it offers no TLS); anything else, an error included, is not that.
fn refuses_tls(s: &Settings, host: &str, port: u16) -> bool {
    use std::io::{Read, Write};
    let timeout = look_timeout(s);
    let asked = || -> std::io::Result<bool> {
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))?
            .next()
            .ok_or_else(|| std::io::Error::other("no address"))?;
        let mut tcp = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        tcp.set_read_timeout(Some(timeout))?;
        tcp.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])?;
        let mut answer = [0u8; 1];
        tcp.read_exact(&mut answer)?;
        Ok(answer[0] == b'N')
    };
    asked().unwrap_or(false)
}

/// AuthenticationCleartextPassword: the server's `password` method.
const CLEARTEXT: i32 = 3;

/// Refuses a connection without TLS on which the server would ask for the
/// password in clear (its pg_hba.conf method `password`; md5 and SCRAM
/// never send it): every address of every TCP server the connection may
/// try is asked first, as the connection would ask it, and left before
/// anything is sent. A server that cannot be reached is libpq's to report;
/// one that is reached and does not say which method it wants within the
/// connect timeout is refused.
pub fn refuse_clear_password(s: &Settings) -> Result<(), String> {
    let timeout = look_timeout(s);
    for (host, port) in tcp_targets(s) {
        let Ok(addrs) = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port)) else {
            continue;
        };
        for addr in addrs {
            let Ok(tcp) = std::net::TcpStream::connect_timeout(&addr, timeout) else {
                continue;
            };
            match asked(tcp, s, timeout) {
                Ok(Some(CLEARTEXT)) => return Err(format!(
                    "server {}: it asks for the password in clear (its pg_hba.conf method is password) over a connection that is not encrypted: insta-id does not send it. Use TLS (sslmode=require, or verify-full), or scram-sha-256 on the server; or allow it with require_auth=password in the connection string",
                    s.label
                )),
                Ok(_) => {}
                Err(e) => return Err(format!(
                    "server {} ({addr}): it did not say which authentication it wants ({e}), which insta-id asks before it sends a password without TLS",
                    s.label
                )),
            }
        }
    }
    Ok(())
}

/// What the server at the end of `tcp` asks of a connection without TLS:
/// the authentication request's code (None: an error, not a request). A
/// server that let the session in (trust) is read up to ReadyForQuery and
/// left with a Terminate, as psql leaves it: nothing in its log.
fn asked(
    mut tcp: std::net::TcpStream,
    s: &Settings,
    timeout: Duration,
) -> std::io::Result<Option<i32>> {
    use std::io::{Read, Write};
    tcp.set_read_timeout(Some(timeout))?;
    let mut startup = 196_608i32.to_be_bytes().to_vec(); // protocol 3.0
    for (k, v) in [("user", s.get("user")), ("database", s.get("dbname"))] {
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
    if head[0] != b'R' {
        return Ok(None);
    }
    let code = i32::from_be_bytes([head[5], head[6], head[7], head[8]]);
    if code == 0 {
        // AuthenticationOk: the session starts; read to ReadyForQuery (or
        // an error: a database or a role refused, which libpq will say).
        let skip = |tcp: &mut std::net::TcpStream, len: i32| {
            std::io::copy(&mut tcp.take(len.max(0) as u64), &mut std::io::sink()).map(|_| ())
        };
        skip(
            &mut tcp,
            i32::from_be_bytes([head[1], head[2], head[3], head[4]]) - 8,
        )?;
        loop {
            let mut m = [0u8; 5];
            tcp.read_exact(&mut m)?;
            skip(&mut tcp, i32::from_be_bytes([m[1], m[2], m[3], m[4]]) - 4)?;
            match m[0] {
                b'Z' => break,
                b'E' => return Ok(Some(code)),
                _ => {}
            }
        }
        tcp.write_all(&[b'X', 0, 0, 0, 4])?;
    }
    Ok(Some(code))
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
