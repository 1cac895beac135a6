//! A connection string as the operator gives it, checked before anything
//! connects. Everything else of a connection is libpq's (src/pq.rs): the
//! syntax, the service and password files, the PG* environment, TLS and
//! authentication. What stays here, each for a reason libpq cannot serve:
//! - a password in the string or in `PGPASSWORD` is refused: a command line
//!   is visible to every user of the machine (`ps`), and the environment to
//!   the user's other processes;
//! - `require_auth` is read for the tool's own refusal of a password in
//!   clear (db::guarded), and taken out of what a libpq older
//!   than 16 gets, which does not know the keyword;
//! - strings the tool hands to a server (a subscription's, PgBouncer's
//!   target) are read by that server's libpq, whatever its version: their
//!   syntax is checked here (`parse_foreign`), for a password only.

use crate::pq;
use std::collections::BTreeMap;
use std::fmt;

/// What the rules read of the process: its PG* environment.
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub vars: BTreeMap<String, String>,
}

impl Env {
    /// The running process's.
    pub fn of_process() -> Env {
        Env {
            vars: std::env::vars()
                .filter(|(k, _)| k.starts_with("PG"))
                .collect(),
        }
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// A server as the operator named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// What libpq gets: the string's keywords and values.
    pub params: Vec<(String, String)>,
    /// Every setting as libpq resolves it to connect (pq::resolve): host,
    /// hostaddr, port, dbname, user, sslmode, options...
    pub resolved: BTreeMap<String, String>,
    /// Whether the password may be sent in clear (the server's `password`
    /// method) over a connection that is not encrypted: only when
    /// require_auth allows `password` (see `clear_password_allowed`).
    pub clear_password: bool,
    /// Whether libpq has a password to send: a service file's, or a
    /// password file exists (whether a line of it matches is libpq's
    /// business). The password itself is not kept.
    pub password_at_hand: bool,
    /// host:port/dbname, for messages (never with a password).
    pub label: String,
}

impl Settings {
    /// A setting as libpq resolved it, "" when it has none.
    pub fn get(&self, key: &str) -> &str {
        self.resolved.get(key).map_or("", String::as_str)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

fn err<T>(msg: impl Into<String>) -> Result<T, Error> {
    Err(Error(msg.into()))
}

const PASSWORD_REFUSED: &str =
    "a connection string must not hold a password: put it in the password file (~/.pgpass, or PGPASSFILE) or a service file";

/// Whether libpq reads `s` as a connection string rather than a database
/// name (psql's -d): an `=`, or a URI.
fn is_conninfo(s: &str) -> bool {
    s.contains('=') || s.starts_with("postgresql://") || s.starts_with("postgres://")
}

/// Resolves a connection string as libpq will: its keywords parsed by
/// libpq, then every setting resolved by libpq (pq::resolve), nothing
/// connected. A password in it or in `PGPASSWORD` is refused.
pub fn resolve(conninfo: &str, env: &Env) -> Result<Settings, Error> {
    if env.var("PGPASSWORD").is_some() {
        return err("PGPASSWORD is set: insta-id reads passwords from the password file (~/.pgpass, or PGPASSFILE) or a service file only");
    }
    let old_libpq = pq::lib_version() < 160_000;
    let mut map = if !is_conninfo(conninfo) {
        BTreeMap::from([("dbname".to_string(), conninfo.to_string())])
    } else {
        match pq::conninfo_parse(conninfo) {
            Ok(m) => m,
            // A libpq older than 16 refuses require_auth: the tool reads it
            // itself, and libpq gets the rest (which it checks in resolve).
            Err(e) if old_libpq => match parse_with(conninfo, |_| Ok(())) {
                Ok(m) if m.contains_key("require_auth") => m,
                _ => return err(e),
            },
            Err(e) => return err(e),
        }
    };
    if map.contains_key("password") || map.contains_key("sslpassword") {
        return err(PASSWORD_REFUSED);
    }
    let require_auth = if old_libpq {
        let r = map
            .remove("require_auth")
            .or_else(|| env.var("PGREQUIREAUTH").map(String::from));
        if r.is_some() {
            eprintln!("insta-id: WARNING: this libpq ({}) does not know require_auth (16 and later do): insta-id reads it only to allow a password in clear, and no other method is refused", pq::lib_version());
        }
        r
    } else {
        None
    };
    let params: Vec<(String, String)> = map.into_iter().collect();
    let resolved = pq::resolve(
        &params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
    )
    .map_err(Error)?;
    let require_auth = require_auth.or_else(|| resolved.get("require_auth").cloned());
    let clear_password = clear_password_allowed(require_auth.as_deref().filter(|r| !r.is_empty()))?;
    let mut resolved = resolved;
    let password_at_hand = resolved.remove("password").is_some_and(|p| !p.is_empty())
        || resolved
            .get("passfile")
            .is_some_and(|f| std::path::Path::new(f).is_file());
    // (libpq fills in its default, prefer; a libpq that did not would
    // still mean it.)
    resolved
        .entry("sslmode".into())
        .or_insert_with(|| "prefer".into());
    let get = |k: &str| resolved.get(k).map_or("", String::as_str);
    let label = format!(
        "{}:{}/{}",
        match get("host") {
            "" => get("hostaddr"),
            h => h,
        },
        get("port"),
        get("dbname")
    );
    Ok(Settings {
        params,
        clear_password,
        password_at_hand,
        label,
        resolved,
    })
}

/// Whether libpq's `require_auth` allows the `password` method: a list of
/// methods allowed, or, each with `!`, refused. insta-id reads it for that
/// only: without it, a password is never sent in clear over a connection
/// that is not encrypted (libpq would send it).
fn clear_password_allowed(require_auth: Option<&str>) -> Result<bool, Error> {
    let Some(list) = require_auth else {
        return Ok(false);
    };
    let methods: Vec<&str> = list.split(',').map(str::trim).collect();
    let negated = methods.iter().filter(|m| m.starts_with('!')).count();
    for m in &methods {
        if !matches!(
            m.trim_start_matches('!'),
            "password" | "md5" | "gss" | "sspi" | "scram-sha-256" | "none" | "oauth"
        ) {
            return err(format!("invalid require_auth method: \"{m}\""));
        }
    }
    if negated != 0 && negated != methods.len() {
        return err(format!(
            "require_auth {list}: negative methods (!) cannot be mixed with others"
        ));
    }
    Ok(if negated == 0 {
        methods.contains(&"password")
    } else {
        !methods.contains(&"!password")
    })
}

/// Checks a connection string the tool hands to a server (a subscription's,
/// a router's target): any keyword (that server's libpq knows its own), but
/// no password, which the server would store where others read it
/// (pg_subscription, its log).
pub fn parse_foreign(conninfo: &str) -> Result<BTreeMap<String, String>, Error> {
    parse_with(conninfo, |k| match k {
        "password" | "sslpassword" => err(PASSWORD_REFUSED),
        _ => Ok(()),
    })
}

/// Parses a connection string as libpq does: `keyword = value` pairs (a
/// value quoted in single quotes, `\` escaping a quote or itself) or a URI;
/// `known` says which keywords may appear.
fn parse_with(
    conninfo: &str,
    known: fn(&str) -> Result<(), Error>,
) -> Result<BTreeMap<String, String>, Error> {
    if conninfo.starts_with("postgresql://") || conninfo.starts_with("postgres://") {
        return parse_uri(conninfo, known);
    }
    let mut out = BTreeMap::new();
    let mut chars = conninfo.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return err(format!(
                "missing \"=\" after \"{key}\" in connection info string"
            ));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    None => return err("unterminated quoted string in connection info string"),
                    Some('\\') => match chars.next() {
                        Some(c) => value.push(c),
                        None => return err("unterminated quoted string in connection info string"),
                    },
                    Some('\'') => break,
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                if c == '\\' {
                    if let Some(e) = chars.next() {
                        value.push(e);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        known(&key)?;
        out.insert(key, value);
    }
}

/// `postgresql://[user[:password]@][host][:port][/dbname][?keyword=value&...]`,
/// each part percent-decoded.
fn parse_uri(
    uri: &str,
    known: fn(&str) -> Result<(), Error>,
) -> Result<BTreeMap<String, String>, Error> {
    let rest = uri.split_once("://").map(|(_, r)| r).unwrap_or_default();
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (rest, None),
    };
    let mut out = BTreeMap::new();
    let hostport = match authority.rsplit_once('@') {
        Some((userinfo, hp)) => {
            if userinfo.contains(':') {
                return err(PASSWORD_REFUSED);
            }
            if !userinfo.is_empty() {
                out.insert("user".into(), decode(userinfo)?);
            }
            hp
        }
        None => authority,
    };
    // Each host with its port, several separated by commas, as libpq
    // lists them: hosts in `host`, ports in `port`, in the same order.
    let (mut hosts, mut ports) = (Vec::new(), Vec::new());
    for hostport in hostport.split(',') {
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            match v6.split_once(']') {
                Some((h, p)) => (h, p.strip_prefix(':').unwrap_or("")),
                None => return err(format!("missing \"]\" in URI \"{uri}\"")),
            }
        } else {
            hostport.split_once(':').unwrap_or((hostport, ""))
        };
        hosts.push(decode(host)?);
        ports.push(decode(port)?);
    }
    if hosts.iter().any(|h| !h.is_empty()) {
        out.insert("host".into(), hosts.join(","));
    }
    if ports.iter().any(|p| !p.is_empty()) {
        out.insert("port".into(), ports.join(","));
    }
    if let Some(db) = path.filter(|p| !p.is_empty()) {
        out.insert("dbname".into(), decode(db)?);
    }
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let Some((k, v)) = pair.split_once('=') else {
            return err(format!(
                "missing key/value separator \"=\" in URI query parameter: \"{pair}\""
            ));
        };
        let k = decode(k)?;
        known(&k)?;
        out.insert(k, decode(v)?);
    }
    Ok(out)
}

fn decode(s: &str) -> Result<String, Error> {
    let mut bytes = Vec::with_capacity(s.len());
    let mut it = s.bytes();
    while let Some(b) = it.next() {
        if b == b'%' {
            let hex: Vec<u8> = it.by_ref().take(2).collect();
            let v = std::str::from_utf8(&hex)
                .ok()
                .filter(|h| h.len() == 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match v {
                Some(v) if v != 0 => bytes.push(v),
                _ => return err(format!("invalid percent-encoded token: \"{s}\"")),
            }
        } else {
            bytes.push(b);
        }
    }
    String::from_utf8(bytes).or_else(|_| err(format!("invalid UTF-8 in \"{s}\"")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Env {
        Env {
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn require_auth_allows_a_password_in_clear_or_not() {
        assert_eq!(clear_password_allowed(None), Ok(false));
        assert_eq!(clear_password_allowed(Some("password")), Ok(true));
        assert_eq!(
            clear_password_allowed(Some("scram-sha-256,password")),
            Ok(true)
        );
        assert_eq!(clear_password_allowed(Some("scram-sha-256")), Ok(false));
        assert_eq!(clear_password_allowed(Some("!md5")), Ok(true));
        assert_eq!(clear_password_allowed(Some("!password,!md5")), Ok(false));
        assert!(clear_password_allowed(Some("!md5,password")).is_err());
        assert!(clear_password_allowed(Some("plaintext")).is_err());
    }

    #[test]
    fn foreign_strings_parse_as_libpq_does() {
        let got = parse_foreign(
            "host=/tmp  port = 5433 dbname='my db' user=it\\'s application_name='a \\'b\\' \\\\c'",
        )
        .unwrap();
        assert_eq!(got["host"], "/tmp");
        assert_eq!(got["port"], "5433");
        assert_eq!(got["dbname"], "my db");
        assert_eq!(got["user"], "it's");
        assert_eq!(got["application_name"], "a 'b' \\c");
        assert!(parse_foreign("").unwrap().is_empty());
        assert_eq!(
            parse_foreign("host").unwrap_err().0,
            "missing \"=\" after \"host\" in connection info string"
        );
        assert_eq!(
            parse_foreign("dbname='x").unwrap_err().0,
            "unterminated quoted string in connection info string"
        );
        let got = parse_foreign(
            "postgresql://ann@%2Fvar%2Frun%2Fpostgresql:5433/app%20db?application_name=mover",
        )
        .unwrap();
        assert_eq!(got["user"], "ann");
        assert_eq!(got["host"], "/var/run/postgresql");
        assert_eq!(got["dbname"], "app db");
        let v6 = parse_foreign("postgres://[::1]:6000/d").unwrap();
        assert_eq!((v6["host"].as_str(), v6["port"].as_str()), ("::1", "6000"));
        let two = parse_foreign("postgresql://h1:1,h2/d").unwrap();
        assert_eq!(
            (two["host"].as_str(), two["port"].as_str()),
            ("h1,h2", "1,")
        );
        assert!(parse_foreign("postgresql://h/d?x").is_err());
        assert!(parse_foreign("postgresql://h/%zz").is_err());
    }

    #[test]
    fn a_password_on_the_command_line_or_in_the_environment_is_refused() {
        for s in [
            "password=x",
            "host=h password = 'x'",
            "postgresql://u:x@h/d",
            "postgresql://h/d?password=x",
            "host=h sslkey=k sslpassword=x",
        ] {
            assert_eq!(
                resolve(s, &env(&[])).unwrap_err().0,
                PASSWORD_REFUSED,
                "{s}"
            );
            assert_eq!(parse_foreign(s).unwrap_err().0, PASSWORD_REFUSED, "{s}");
        }
        let e = resolve("host=h", &env(&[("PGPASSWORD", "x")])).unwrap_err();
        assert!(e.0.starts_with("PGPASSWORD is set"), "{e}");
    }

    #[test]
    fn libpq_resolves_and_refuses() {
        let s = resolve(
            "host=/nowhere port=5499 dbname='a b' user=ann sslmode=disable",
            &env(&[]),
        )
        .unwrap();
        assert_eq!(s.label, "/nowhere:5499/a b");
        assert_eq!((s.get("user"), s.get("sslmode")), ("ann", "disable"));
        // What the tool decides by, resolved without connecting.
        let d = resolve("host=h", &env(&[])).unwrap();
        for key in ["host", "port", "dbname", "user", "sslmode", "passfile"] {
            assert!(!d.get(key).is_empty(), "{key} resolved: {:?}", d.resolved);
        }
        assert_eq!(resolve("app", &env(&[])).unwrap().get("dbname"), "app");
        assert!(resolve("postgresql://h1:1,h2:2/d", &env(&[]))
            .unwrap()
            .label
            .starts_with("h1,h2:1,2/d"));
        assert!(resolve("hots=x", &env(&[])).unwrap_err().0.contains("hots"));
        assert!(resolve("host=h sslmode=sometimes", &env(&[]))
            .unwrap_err()
            .0
            .contains("sslmode"));
        assert!(resolve("host=h require_auth=plaintext", &env(&[])).is_err());
        assert!(
            resolve("host=h require_auth=password", &env(&[]))
                .unwrap()
                .clear_password
        );
        assert!(!resolve("host=h", &env(&[])).unwrap().clear_password);
    }
}
