//! A connection with a password at hand over TCP, which never sends it in
//! clear over a connection that is not encrypted (unless require_auth
//! allows it): libpq would send it to a server whose pg_hba.conf method is
//! `password`. Each address libpq would try is tried in libpq's order, one
//! at a time, so that what is decided about TLS and the password is
//! decided for the address about to be used and no other: with `prefer`,
//! TLS on that address when its server offers it, else the server asked
//! which method it wants before anything is sent. libpq connects each time
//! (its TLS, its password file, its authentication, its
//! target_session_attrs); only the order of the list is walked here.

use super::{describe, params, Settings};
use crate::pq::Client;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// One entry of libpq's host list, as it reads the lists of `host`,
/// `hostaddr` and `port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Entry {
    /// A Unix socket (a directory, or an abstract name): no password
    /// crosses a network.
    Socket { host: String, port: String },
    /// Over TCP: the name (for TLS and the password file; may be empty
    /// when a hostaddr is given) and the numeric address, if given.
    Tcp {
        host: String,
        hostaddr: String,
        port: String,
    },
}

/// libpq's host list: as many entries as hosts (or hostaddrs), each with
/// its port (the one port given applies to each).
pub(super) fn entries(host: &str, hostaddr: &str, port: &str) -> Vec<Entry> {
    let split = |s: &str| -> Vec<String> {
        if s.is_empty() {
            Vec::new()
        } else {
            s.split(',').map(|p| p.trim().to_string()).collect()
        }
    };
    let (hosts, addrs, ports) = (split(host), split(hostaddr), split(port));
    let n = hosts.len().max(addrs.len()).max(1);
    (0..n)
        .map(|i| {
            let h = hosts.get(i).cloned().unwrap_or_default();
            let a = addrs.get(i).cloned().unwrap_or_default();
            let p = match ports.len() {
                1 => ports[0].clone(),
                _ => ports.get(i).cloned().unwrap_or_default(),
            };
            let p = if p.is_empty() { "5432".to_string() } else { p };
            if a.is_empty() && (h.is_empty() || h.starts_with('/') || h.starts_with('@')) {
                Entry::Socket { host: h, port: p }
            } else {
                Entry::Tcp {
                    host: h,
                    hostaddr: a,
                    port: p,
                }
            }
        })
        .collect()
}

/// Whether `s` connects over TCP anywhere.
pub(super) fn over_tcp(s: &Settings) -> bool {
    entries(s.get("host"), s.get("hostaddr"), s.get("port"))
        .iter()
        .any(|e| matches!(e, Entry::Tcp { .. }))
}

/// The order of `items`, shuffled as libpq's load_balance_hosts=random
/// shuffles hosts and each host's addresses.
fn shuffle<T>(items: &mut [T]) {
    use std::hash::{BuildHasher, Hasher};
    for i in (1..items.len()).rev() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(i);
        items.swap(i, (h.finish() % (i as u64 + 1)) as usize);
    }
}

/// How long a look at a server may take: the connect timeout given (as
/// libpq reads it, at least 2 s), else 10 s; as libpq's, per address.
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

/// What a server answers an SSLRequest: `S` (it offers TLS) or `N`.
fn tls_answer(addr: &SocketAddr, timeout: Duration) -> std::io::Result<u8> {
    use std::io::{Read, Write};
    let mut tcp = TcpStream::connect_timeout(addr, timeout)?;
    tcp.set_read_timeout(Some(timeout))?;
    tcp.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])?;
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer)?;
    Ok(answer[0])
}

/// AuthenticationCleartextPassword: the server's `password` method (also
/// what ldap, radius and pam ask).
const CLEARTEXT: i32 = 3;

/// What the server at `addr` asks of a connection without TLS: the
/// authentication request's code (None: an error, not a request). A server
/// that let the session in (trust) is read up to ReadyForQuery and left
/// with a Terminate, as psql leaves it: nothing in its log.
fn asked(addr: &SocketAddr, s: &Settings, timeout: Duration) -> std::io::Result<Option<i32>> {
    use std::io::{Read, Write};
    let mut tcp = TcpStream::connect_timeout(addr, timeout)?;
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
        let skip = |tcp: &mut TcpStream, len: i32| {
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

/// The keywords that name where a connection goes and how: set here for
/// each attempt.
const PER_ATTEMPT: [&str; 6] = [
    "host",
    "hostaddr",
    "port",
    "sslmode",
    "target_session_attrs",
    "load_balance_hosts",
];

/// Connects as `s` says, through libpq, one address at a time in libpq's
/// order (prefer-standby: standbys first, then any), for sslmode disable,
/// allow or prefer:
/// - prefer: TLS when the address's server offers it, and an error over
///   TLS is that address's answer (libpq's prefer would retry without TLS,
///   where the server may ask for the password in clear);
/// - without TLS, the server is asked first which method it wants: the
///   `password` method is refused on that address, and the next is tried
///   (allow then takes TLS on it, as libpq's allow would after a failure);
/// - an address that does not answer within the connect timeout is passed,
///   as libpq passes it, once.
///
/// Every address's error is said, in order, as libpq says several.
pub(super) fn open(s: &Settings, last: &[(&str, &str)], warnings: bool) -> Result<Client, String> {
    let base: Vec<(&str, &str)> = params(s, last)
        .into_iter()
        .filter(|(k, _)| !PER_ATTEMPT.contains(k))
        .collect();
    let mode = s.get("sslmode");
    let timeout = look_timeout(s);
    let random = s.get("load_balance_hosts") == "random";
    // libpq 16 and later enforce it within the connection too, whatever
    // changed since the look (an operator's require_auth, which already
    // leaves `password` out, stays as given).
    let no_clear = crate::pq::lib_version() >= 160_000 && s.get("require_auth").is_empty();
    let passes = match last
        .iter()
        .rev()
        .find(|(k, _)| *k == "target_session_attrs")
        .map_or(s.get("target_session_attrs"), |(_, v)| *v)
    {
        "prefer-standby" => vec!["standby", "any"],
        "" => vec!["any"],
        t => vec![t],
    };
    let mut list = entries(s.get("host"), s.get("hostaddr"), s.get("port"));
    if random {
        shuffle(&mut list);
    }
    let mut said: Vec<String> = Vec::new();
    let attempt =
        |host: &str, addr: Option<&str>, port: &str, ssl: &str, tsa: &str, plain: bool| {
            let mut p = base.clone();
            if !host.is_empty() {
                p.push(("host", host));
            }
            if let Some(a) = addr {
                p.push(("hostaddr", a));
            }
            p.extend([
                ("port", port),
                ("sslmode", ssl),
                ("target_session_attrs", tsa),
            ]);
            if plain && no_clear {
                p.push(("require_auth", "!password"));
            }
            Client::connect(&p, warnings).map_err(|e| describe(&e))
        };
    for tsa in passes {
        for e in &list {
            let (host, hostaddr, port) = match e {
                Entry::Socket { host, port } => {
                    match attempt(host, None, port, mode, tsa, false) {
                        Ok(c) => return Ok(c),
                        Err(e) => said.push(e),
                    }
                    continue;
                }
                Entry::Tcp {
                    host,
                    hostaddr,
                    port,
                } => (host, hostaddr, port),
            };
            let named = if host.is_empty() { hostaddr } else { host };
            // (libpq looks up the hostaddr when given, else the name)
            let target = if hostaddr.is_empty() { host } else { hostaddr };
            let looked = (target.as_str(), port.parse::<u16>().unwrap_or(5432)).to_socket_addrs();
            let mut addrs: Vec<SocketAddr> = match looked {
                Ok(a) => a.collect(),
                Err(e) => {
                    said.push(format!(
                        "could not translate host name \"{named}\" to address: {e}"
                    ));
                    continue;
                }
            };
            if random {
                shuffle(&mut addrs);
            }
            for addr in addrs {
                let at = addr.ip().to_string();
                let failed = |why: String| {
                    format!("connection to server at \"{named}\" ({at}), port {port} failed: {why}")
                };
                let tls = match mode {
                    "prefer" => match tls_answer(&addr, timeout) {
                        Ok(b) => b != b'N',
                        Err(e) => {
                            said.push(failed(e.to_string()));
                            continue;
                        }
                    },
                    _ => false,
                };
                let ssl = if tls {
                    "require"
                } else {
                    match asked(&addr, s, timeout) {
                        Ok(Some(CLEARTEXT)) if mode == "allow" => "require",
                        Ok(Some(CLEARTEXT)) => {
                            said.push(failed(format!(
                                "it asks for the password in clear (its pg_hba.conf method is password) over a connection that is not encrypted: insta-id does not send it (server {}). Use TLS (sslmode=require, or verify-full), or scram-sha-256 on the server; or allow it with require_auth=password in the connection string",
                                s.label
                            )));
                            continue;
                        }
                        Ok(_) => "disable",
                        Err(e) => {
                            said.push(failed(format!(
                                "it did not say which authentication it wants ({e}), which insta-id asks before it sends a password without TLS (server {})",
                                s.label
                            )));
                            continue;
                        }
                    }
                };
                match attempt(host, Some(&at), port, ssl, tsa, ssl == "disable") {
                    Ok(c) => return Ok(c),
                    Err(e) => said.push(e),
                }
            }
        }
    }
    Err(said.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(h: &str, a: &str, p: &str) -> Entry {
        Entry::Tcp {
            host: h.into(),
            hostaddr: a.into(),
            port: p.into(),
        }
    }

    fn sock(h: &str, p: &str) -> Entry {
        Entry::Socket {
            host: h.into(),
            port: p.into(),
        }
    }

    #[test]
    fn libpqs_host_list() {
        let cases = [
            (
                ("a,b", "", "1,2"),
                vec![tcp("a", "", "1"), tcp("b", "", "2")],
            ),
            (("a,b", "", "7"), vec![tcp("a", "", "7"), tcp("b", "", "7")]),
            (("", "", "5432"), vec![sock("", "5432")]),
            (
                ("/tmp,h", "", ""),
                vec![sock("/tmp", "5432"), tcp("h", "", "5432")],
            ),
            (("h", "10.0.0.1", "6"), vec![tcp("h", "10.0.0.1", "6")]),
            (
                ("", "10.0.0.1,10.0.0.2", "6"),
                vec![tcp("", "10.0.0.1", "6"), tcp("", "10.0.0.2", "6")],
            ),
            (("@abstract", "", "6"), vec![sock("@abstract", "6")]),
        ];
        for ((h, a, p), want) in cases {
            assert_eq!(entries(h, a, p), want, "host={h} hostaddr={a} port={p}");
        }
    }

    #[test]
    fn a_shuffle_keeps_every_item() {
        let mut v: Vec<u32> = (0..50).collect();
        shuffle(&mut v);
        v.sort();
        assert_eq!(v, (0..50).collect::<Vec<_>>());
    }
}
