//! Connection settings read the way libpq reads them, so that the servers
//! an operator names work as they do for psql and pg_dump: a connection
//! string (`keyword=value ...` or a `postgresql://` URI), then the section of
//! the service file it names (`service=`, or `PGSERVICE`), then the `PG*`
//! environment variables, then libpq's defaults; the password from the
//! password file (`passfile=`, `PGPASSFILE`, `~/.pgpass`) or the service
//! file. A password in the connection string or in `PGPASSWORD` is refused:
//! a command line is visible to every user of the machine (`ps`), and the
//! environment to the user's other processes.
//!
//! The rules are libpq's ("Connection Strings", "The Connection Service
//! File", "The Password File" in PostgreSQL's documentation), decided here in
//! pure Rust; `Env` is what they read of the process, so that tests can give
//! their own.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// What the rules read of the process: its environment, home directory and
/// user name, and whether a directory exists (for the default socket).
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub vars: BTreeMap<String, String>,
    pub home: Option<PathBuf>,
    pub os_user: Option<String>,
    /// The Unix socket directory used when no host is given (libpq's
    /// compiled default: Debian's /var/run/postgresql, else /tmp).
    pub default_socket_dir: String,
}

impl Env {
    /// The running process's.
    pub fn of_process() -> Env {
        let (os_user, passwd_home) = os_user();
        Env {
            vars: std::env::vars()
                .filter(|(k, _)| k.starts_with("PG"))
                .collect(),
            home: std::env::var_os("HOME").map(PathBuf::from).or(passwd_home),
            os_user,
            default_socket_dir: if Path::new("/var/run/postgresql").is_dir() {
                "/var/run/postgresql".into()
            } else {
                "/tmp".into()
            },
        }
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// The effective user's name and home directory, as libpq finds them
/// (getpwuid(geteuid())): /proc/self belongs to the process's effective
/// user, whose line of /etc/passwd names it.
fn os_user() -> (Option<String>, Option<PathBuf>) {
    use std::os::unix::fs::MetadataExt;
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return (std::env::var("USER").ok(), None);
    };
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    for line in passwd.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() >= 6 && f[2].parse::<u32>() == Ok(uid) {
            return (Some(f[0].to_string()), Some(PathBuf::from(f[5])));
        }
    }
    (std::env::var("USER").ok(), None)
}

/// Where a connection goes and as whom, every setting resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// A host name or address, or a Unix socket directory (starts with '/').
    pub host: String,
    pub port: u16,
    pub dbname: String,
    pub user: String,
    pub password: Option<String>,
    pub application_name: Option<String>,
    pub connect_timeout: Option<u64>,
    pub options: Option<String>,
    /// TLS, as libpq's sslmode and its files say.
    pub tls: Tls,
    /// Whether the password may be sent in clear (the server's `password`
    /// method) over a connection that is not encrypted: only when
    /// require_auth allows `password` (see `clear_password_allowed`).
    pub clear_password: bool,
    /// libpq's `host` as given, for messages (never with a password).
    pub label: String,
}

/// libpq's sslmode: what TLS a connection asks for and what it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// Never (and over a Unix socket, where libpq never uses TLS either).
    Disable,
    /// TLS when the server offers it, nothing verified ("allow" too).
    #[default]
    Prefer,
    /// TLS or no connection, nothing verified.
    Require,
    /// TLS, the server's certificate signed by `rootcert`.
    VerifyCa,
    /// As VerifyCa, and issued to the host connected to.
    VerifyFull,
}

/// A connection's TLS settings, resolved as libpq resolves them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tls {
    pub mode: SslMode,
    /// The certificate authorities a server's certificate is checked
    /// against (`sslrootcert`, default ~/.postgresql/root.crt).
    pub rootcert: Option<PathBuf>,
    /// The client's certificate and key, when given or found in their
    /// default places (~/.postgresql/postgresql.crt and .key).
    pub cert: Option<(PathBuf, PathBuf)>,
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

/// The keywords the tool understands, and the environment variable each
/// falls back to (libpq's names).
const KEYWORDS: &[(&str, Option<&str>)] = &[
    ("host", Some("PGHOST")),
    ("port", Some("PGPORT")),
    ("dbname", Some("PGDATABASE")),
    ("user", Some("PGUSER")),
    ("passfile", Some("PGPASSFILE")),
    ("service", Some("PGSERVICE")),
    ("application_name", Some("PGAPPNAME")),
    ("connect_timeout", Some("PGCONNECT_TIMEOUT")),
    ("options", Some("PGOPTIONS")),
    ("sslmode", Some("PGSSLMODE")),
    ("sslrootcert", Some("PGSSLROOTCERT")),
    ("sslcert", Some("PGSSLCERT")),
    ("sslkey", Some("PGSSLKEY")),
    ("require_auth", Some("PGREQUIREAUTH")),
];

const PASSWORD_REFUSED: &str =
    "a connection string must not hold a password: put it in the password file (~/.pgpass, or PGPASSFILE) or a service file";

fn known(key: &str) -> Result<(), Error> {
    match key {
        "password" => err(PASSWORD_REFUSED),
        k if KEYWORDS.iter().any(|(name, _)| *name == k) => Ok(()),
        k => err(format!("invalid connection option \"{k}\"")),
    }
}

/// Parses a connection string: `keyword = value` pairs (a value quoted in
/// single quotes, `\` escaping a quote or itself) or a URI.
pub fn parse(conninfo: &str) -> Result<BTreeMap<String, String>, Error> {
    parse_with(conninfo, known)
}

/// Checks a connection string the tool hands to a server (a subscription's,
/// a router's target): any keyword libpq knows, but no password, which the
/// server would store where others read it (pg_subscription, its log).
pub fn parse_foreign(conninfo: &str) -> Result<BTreeMap<String, String>, Error> {
    parse_with(conninfo, |k| match k {
        "password" => err(PASSWORD_REFUSED),
        _ => Ok(()),
    })
}

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
    if hostport.contains(',') {
        return err("more than one host in a connection string is not supported");
    }
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':')),
            None => return err(format!("missing \"]\" in URI \"{uri}\"")),
        }
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if !host.is_empty() {
        out.insert("host".into(), decode(host)?);
    }
    if let Some(p) = port.filter(|p| !p.is_empty()) {
        out.insert("port".into(), decode(p)?);
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

/// The section `service` of a service file, if the file has it. Lines are
/// libpq's: `[name]`, `keyword=value` (nothing trimmed around `=`), `#`
/// comments; the lines of other sections are not looked at.
fn service_section(
    text: &str,
    file: &Path,
    service: &str,
) -> Result<Option<BTreeMap<String, String>>, Error> {
    let mut found: Option<BTreeMap<String, String>> = None;
    let mut in_section = false;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            if found.is_some() {
                break;
            }
            in_section = name.strip_suffix(']') == Some(service);
            if in_section {
                found = Some(BTreeMap::new());
            }
            continue;
        }
        if !in_section {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return err(format!(
                "syntax error in service file \"{}\", line {}",
                file.display(),
                n + 1
            ));
        };
        if key == "service" {
            return err(format!(
                "nested service specifications not supported in service file \"{}\", line {}",
                file.display(),
                n + 1
            ));
        }
        if key != "password" {
            known(key).map_err(|e| {
                Error(format!(
                    "{e} in service file \"{}\", line {}",
                    file.display(),
                    n + 1
                ))
            })?;
        }
        found
            .as_mut()
            .expect("in a section")
            .entry(key.to_string())
            .or_insert_with(|| value.to_string());
    }
    Ok(found)
}

/// The service's settings: the user's service file first (PGSERVICEFILE, or
/// ~/.pg_service.conf), where a section found ends the search; then the
/// system's (PGSYSCONFDIR/pg_service.conf, Debian's /etc/postgresql-common).
fn service(name: &str, env: &Env) -> Result<BTreeMap<String, String>, Error> {
    let user_file = env
        .var("PGSERVICEFILE")
        .map(PathBuf::from)
        .or_else(|| env.home.as_ref().map(|h| h.join(".pg_service.conf")));
    let system_file = PathBuf::from(env.var("PGSYSCONFDIR").unwrap_or("/etc/postgresql-common"))
        .join("pg_service.conf");
    for file in user_file.into_iter().chain([system_file]) {
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return err(format!(
                    "could not read service file \"{}\": {e}",
                    file.display()
                ))
            }
        };
        if let Some(section) = service_section(&text, &file, name)? {
            return Ok(section);
        }
    }
    err(format!("definition of service \"{name}\" not found"))
}

/// Resolves a connection string as libpq would, the password from the
/// password file.
pub fn resolve(conninfo: &str, env: &Env) -> Result<Settings, Error> {
    if env.vars.contains_key("PGPASSWORD") {
        return err("PGPASSWORD is set: insta-id reads passwords from the password file (~/.pgpass, or PGPASSFILE) or a service file only");
    }
    let mut opts = parse(conninfo)?;
    let service_name = opts
        .get("service")
        .cloned()
        .or_else(|| env.var("PGSERVICE").map(String::from));
    let mut password = None;
    if let Some(name) = service_name {
        for (k, v) in service(&name, env)? {
            if k == "password" {
                password = Some(v);
            } else {
                opts.entry(k).or_insert(v);
            }
        }
    }
    for (key, var) in KEYWORDS {
        if let Some(v) = var.and_then(|var| env.var(var)) {
            opts.entry((*key).to_string())
                .or_insert_with(|| v.to_string());
        }
    }
    let get = |k: &str| opts.get(k).filter(|v| !v.is_empty()).cloned();
    let host = get("host").unwrap_or_else(|| env.default_socket_dir.clone());
    let tls = tls(&get, env, &host)?;
    if host.contains(',') {
        return err("more than one host in a connection string is not supported");
    }
    let port = match get("port") {
        None => 5432,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return err(format!("invalid port number: \"{p}\"")),
        },
    };
    let Some(user) = get("user").or_else(|| env.os_user.clone()) else {
        return err("no user name: give user= or PGUSER");
    };
    let dbname = get("dbname").unwrap_or_else(|| user.clone());
    let connect_timeout = match get("connect_timeout") {
        None => None,
        Some(t) => match t.parse::<i64>() {
            Ok(t) if t <= 0 => None,
            Ok(t) => Some(t.max(2) as u64), // libpq's minimum
            Err(_) => {
                return err(format!(
                    "invalid integer value \"{t}\" for connection option \"connect_timeout\""
                ))
            }
        },
    };
    if password.is_none() {
        let file = get("passfile")
            .map(PathBuf::from)
            .or_else(|| env.home.as_ref().map(|h| h.join(".pgpass")));
        if let Some(file) = file {
            password = password_from_file(&file, &host, port, &dbname, &user)?;
        }
    }
    Ok(Settings {
        label: format!("{host}:{port}/{dbname}"),
        host,
        port,
        dbname,
        user,
        password,
        application_name: get("application_name"),
        connect_timeout,
        options: get("options"),
        clear_password: clear_password_allowed(get("require_auth").as_deref())?,
        tls,
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

/// libpq's TLS rules: sslmode (default prefer; never over a Unix socket),
/// require with a root certificate file there behaving as verify-ca; the
/// root certificate file required by verify-ca and verify-full; the
/// client's certificate and key from sslcert and sslkey, or their default
/// files when both exist.
fn tls(get: &dyn Fn(&str) -> Option<String>, env: &Env, host: &str) -> Result<Tls, Error> {
    let home = |f: &str| env.home.as_ref().map(|h| h.join(".postgresql").join(f));
    let mut mode = match get("sslmode").as_deref() {
        None | Some("prefer" | "allow") => SslMode::Prefer,
        Some("disable") => SslMode::Disable,
        Some("require") => SslMode::Require,
        Some("verify-ca") => SslMode::VerifyCa,
        Some("verify-full") => SslMode::VerifyFull,
        Some(m) => return err(format!("invalid sslmode value: \"{m}\"")),
    };
    if host.starts_with('/') {
        mode = SslMode::Disable;
    }
    let rootcert = get("sslrootcert")
        .map(PathBuf::from)
        .or_else(|| home("root.crt"))
        .filter(|p| p.is_file() || matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull));
    if mode == SslMode::Require && rootcert.is_some() {
        mode = SslMode::VerifyCa;
    }
    let verifies = matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull);
    let rootcert = rootcert.filter(|_| verifies);
    if let Some(r) = &rootcert {
        if !r.is_file() {
            return err(format!(
                "root certificate file \"{}\" does not exist: give sslrootcert, or sslmode=require to connect without verifying the server (libpq says the same)",
                r.display()
            ));
        }
    } else if verifies {
        return err(
            "no root certificate file for sslmode=verify-ca or verify-full: give sslrootcert",
        );
    }
    let cert = match (get("sslcert"), get("sslkey")) {
        (Some(c), Some(k)) => Some((PathBuf::from(c), PathBuf::from(k))),
        (Some(_), None) | (None, Some(_)) => return err("sslcert and sslkey go together"),
        (None, None) => home("postgresql.crt")
            .zip(home("postgresql.key"))
            .filter(|(c, k)| c.is_file() && k.is_file()),
    };
    Ok(Tls {
        mode,
        rootcert,
        cert: cert.filter(|_| mode != SslMode::Disable),
    })
}

/// The password of the first line of the password file that matches, as
/// libpq reads it: `host:port:dbname:user:password`, `*` matching anything,
/// `\` escaping `:` and itself; a Unix socket matches `localhost`. A file
/// that others may read is ignored, with libpq's warning.
pub fn password_from_file(
    file: &Path,
    host: &str,
    port: u16,
    dbname: &str,
    user: &str,
) -> Result<Option<String>, Error> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(file) else {
        return Ok(None);
    };
    if !meta.is_file() {
        return Ok(None);
    }
    if meta.permissions().mode() & 0o077 != 0 {
        eprintln!(
            "WARNING: password file \"{}\" has group or world access; permissions should be u=rw (0600) or less",
            file.display()
        );
        return Ok(None);
    }
    let text = std::fs::read_to_string(file).or_else(|e| {
        err(format!(
            "could not read password file \"{}\": {e}",
            file.display()
        ))
    })?;
    let host = if host.is_empty() || host.starts_with('/') {
        "localhost"
    } else {
        host
    };
    let port = port.to_string();
    Ok(text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| matching_password(line, [host, &port, dbname, user])))
}

/// The password of one line if its four fields match `want`.
fn matching_password(line: &str, want: [&str; 4]) -> Option<String> {
    let mut rest = line;
    for token in want {
        rest = field_matches(rest, token)?;
    }
    // The password: the rest of the line, de-escaped.
    let mut pw = String::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => pw.extend(chars.next()),
            c => pw.push(c),
        }
    }
    Some(pw)
}

/// If the field at the start of `line` matches `token` (or is `*`), what
/// follows its `:`.
fn field_matches<'a>(line: &'a str, token: &str) -> Option<&'a str> {
    if let Some(rest) = line.strip_prefix("*:") {
        return Some(rest);
    }
    let mut want = token.chars();
    let mut chars = line.char_indices();
    while let Some((i, c)) = chars.next() {
        let c = match c {
            ':' => return want.next().is_none().then(|| &line[i + 1..]),
            '\\' => chars.next()?.1,
            c => c,
        };
        if want.next() != Some(c) {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

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
    use std::os::unix::fs::PermissionsExt;

    fn env(vars: &[(&str, &str)], home: Option<&Path>) -> Env {
        Env {
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            home: home.map(Path::to_path_buf),
            os_user: Some("osuser".into()),
            default_socket_dir: "/var/run/postgresql".into(),
        }
    }

    /// A directory of this test's own, emptied.
    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("insta-id-conninfo-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn keyword_value_strings_parse_as_libpq_does() {
        let got = parse(
            "host=/tmp  port = 5433 dbname='my db' user=it\\'s application_name='a \\'b\\' \\\\c'",
        )
        .unwrap();
        assert_eq!(got["host"], "/tmp");
        assert_eq!(got["port"], "5433");
        assert_eq!(got["dbname"], "my db");
        assert_eq!(got["user"], "it's");
        assert_eq!(got["application_name"], "a 'b' \\c");
        assert!(parse("").unwrap().is_empty());
        assert_eq!(
            parse("host").unwrap_err().0,
            "missing \"=\" after \"host\" in connection info string"
        );
        assert_eq!(
            parse("dbname='x").unwrap_err().0,
            "unterminated quoted string in connection info string"
        );
        assert_eq!(
            parse("hots=x").unwrap_err().0,
            "invalid connection option \"hots\""
        );
    }

    #[test]
    fn uris_parse_with_percent_decoding() {
        let got = parse(
            "postgresql://ann@%2Fvar%2Frun%2Fpostgresql:5433/app%20db?application_name=mover",
        )
        .unwrap();
        assert_eq!(got["user"], "ann");
        assert_eq!(got["host"], "/var/run/postgresql");
        assert_eq!(got["port"], "5433");
        assert_eq!(got["dbname"], "app db");
        assert_eq!(got["application_name"], "mover");
        let v6 = parse("postgres://[::1]:6000/d").unwrap();
        assert_eq!((v6["host"].as_str(), v6["port"].as_str()), ("::1", "6000"));
        assert!(parse("postgresql://").unwrap().is_empty());
        assert!(parse("postgresql://h1,h2/d").is_err());
        assert!(parse("postgresql://h/d?x").is_err());
        assert!(parse("postgresql://h/%zz").is_err());
    }

    #[test]
    fn a_password_on_the_command_line_or_in_the_environment_is_refused() {
        for s in [
            "password=x",
            "host=h password = 'x'",
            "postgresql://u:x@h/d",
            "postgresql://h/d?password=x",
        ] {
            assert_eq!(parse(s).unwrap_err().0, PASSWORD_REFUSED, "{s}");
            assert_eq!(parse_foreign(s).unwrap_err().0, PASSWORD_REFUSED, "{s}");
        }
        // TLS keywords, in the tool's strings as in a server's.
        let tls = "host=h sslmode=verify-full sslrootcert=/etc/ssl/ca.pem";
        for p in [parse(tls).unwrap(), parse_foreign(tls).unwrap()] {
            assert_eq!(p["sslrootcert"], "/etc/ssl/ca.pem");
        }
        let e = resolve("host=h", &env(&[("PGPASSWORD", "x")], None)).unwrap_err();
        assert!(e.0.starts_with("PGPASSWORD is set"), "{e}");
    }

    #[test]
    fn tls_as_libpq_resolves_it() {
        let e = env(&[], None);
        let mode = |s: &str| resolve(s, &e).map(|s| s.tls.mode);
        let dir = std::env::temp_dir().join(format!("insta-id-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.crt");
        std::fs::write(&ca, "").unwrap();
        let ca = ca.display();
        assert_eq!(mode("host=h"), Ok(SslMode::Prefer));
        assert_eq!(mode("host=h sslmode=allow"), Ok(SslMode::Prefer));
        assert_eq!(mode("host=h sslmode=require"), Ok(SslMode::Require));
        // require with a root certificate verifies the chain, as libpq does.
        assert_eq!(
            mode(&format!("host=h sslmode=require sslrootcert={ca}")),
            Ok(SslMode::VerifyCa)
        );
        assert_eq!(
            mode(&format!("host=h sslmode=verify-full sslrootcert={ca}")),
            Ok(SslMode::VerifyFull)
        );
        // Never over a Unix socket.
        assert_eq!(mode("host=/tmp sslmode=verify-full"), Ok(SslMode::Disable));
        let said = |s: &str| resolve(s, &e).unwrap_err().0;
        assert!(said("host=h sslmode=verify-full").starts_with("no root certificate file"));
        assert!(
            said("host=h sslmode=verify-ca sslrootcert=/nonexistent/ca.crt")
                .contains("does not exist")
        );
        assert_eq!(said("host=h sslmode=on"), "invalid sslmode value: \"on\"");
        assert_eq!(
            said(&format!("host=h sslcert={ca}")),
            "sslcert and sslkey go together"
        );
        let s = resolve(
            &format!("host=h sslmode=require sslcert={ca} sslkey={ca}"),
            &e,
        )
        .unwrap();
        assert!(s.tls.cert.is_some() && s.tls.rootcert.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_string_wins_over_the_environment_which_wins_over_defaults() {
        let e = env(
            &[
                ("PGHOST", "envhost"),
                ("PGPORT", "6000"),
                ("PGUSER", "envuser"),
                ("PGAPPNAME", "app"),
            ],
            None,
        );
        let s = resolve("host=h dbname=d", &e).unwrap();
        assert_eq!(
            (s.host.as_str(), s.port, s.dbname.as_str(), s.user.as_str()),
            ("h", 6000, "d", "envuser")
        );
        assert_eq!(s.application_name.as_deref(), Some("app"));
        // Defaults: the socket directory, 5432, the OS user, a database named after the user.
        let s = resolve("", &env(&[], None)).unwrap();
        assert_eq!(
            (s.host.as_str(), s.port, s.dbname.as_str(), s.user.as_str()),
            ("/var/run/postgresql", 5432, "osuser", "osuser")
        );
        // An empty host is given, and means libpq's default socket.
        assert_eq!(
            resolve("host=''", &env(&[("PGHOST", "envhost")], None))
                .unwrap()
                .host,
            "/var/run/postgresql"
        );
        assert!(resolve("port=0", &e).is_err());
        assert!(resolve("port=x", &e).is_err());
        assert!(resolve("sslmode=prefer", &e).is_ok());
        assert_eq!(
            resolve("connect_timeout=1", &e).unwrap().connect_timeout,
            Some(2)
        );
    }

    #[test]
    fn a_service_fills_what_the_string_leaves_and_the_users_file_comes_first() {
        let d = dir("service");
        let user_file = d.join("user.conf");
        write(
            &user_file,
            "# mine\n[fleet]\nhost=userhost\nport=7000\n\n[other]\nhost=x\n",
            0o600,
        );
        std::fs::create_dir_all(d.join("sys")).unwrap();
        write(
            &d.join("sys/pg_service.conf"),
            "[fleet]\nhost=syshost\ndbname=sysdb\n[sysonly]\nhost=s\npassword=secret\n",
            0o644,
        );
        let e = env(
            &[
                ("PGSERVICEFILE", user_file.to_str().unwrap()),
                ("PGSYSCONFDIR", d.join("sys").to_str().unwrap()),
                ("PGDATABASE", "envdb"),
            ],
            None,
        );
        // Found in the user's file: the system's is not read (no sysdb).
        let s = resolve("service=fleet port=7001", &e).unwrap();
        assert_eq!(
            (s.host.as_str(), s.port, s.dbname.as_str()),
            ("userhost", 7001, "envdb")
        );
        // PGSERVICE names it too; the system file holds the other, with its password.
        let mut e2 = e.clone();
        e2.vars.insert("PGSERVICE".into(), "sysonly".into());
        let s = resolve("", &e2).unwrap();
        assert_eq!(
            (s.host.as_str(), s.password.as_deref()),
            ("s", Some("secret"))
        );
        assert_eq!(
            resolve("service=nope", &e).unwrap_err().0,
            "definition of service \"nope\" not found"
        );
        write(&user_file, "[fleet]\nhost userhost\n", 0o600);
        assert!(resolve("service=fleet", &e)
            .unwrap_err()
            .0
            .starts_with("syntax error in service file"));
        write(&user_file, "[fleet]\nservice=other\n", 0o600);
        assert!(resolve("service=fleet", &e)
            .unwrap_err()
            .0
            .starts_with("nested service"));
    }

    #[test]
    fn the_password_file_matches_as_libpq_does() {
        let d = dir("pgpass");
        let f = d.join("pgpass");
        write(
            &f,
            "# comment\nother:5432:*:ann:wrong\nlocalhost:5432:app:ann:socket\\:pw\nh\\:x:*:*:*:escaped\n*:6000:*:*:any\\\\one\n",
            0o600,
        );
        let pw = |host: &str, port| password_from_file(&f, host, port, "app", "ann").unwrap();
        assert_eq!(
            pw("/var/run/postgresql", 5432).as_deref(),
            Some("socket:pw")
        );
        assert_eq!(pw("localhost", 5432).as_deref(), Some("socket:pw"));
        assert_eq!(pw("h:x", 1).as_deref(), Some("escaped"));
        assert_eq!(pw("anywhere", 6000).as_deref(), Some("any\\one"));
        assert_eq!(pw("anywhere", 5432), None);
        // Readable by others: ignored (libpq warns).
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(pw("localhost", 5432), None);
        // Through resolve: passfile=, else PGPASSFILE, else ~/.pgpass.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = env(&[], None);
        let s = resolve(
            &format!("host=/tmp dbname=app user=ann passfile={}", f.display()),
            &e,
        )
        .unwrap();
        assert_eq!(s.password.as_deref(), Some("socket:pw"));
        let e = env(&[("PGPASSFILE", f.to_str().unwrap())], None);
        assert_eq!(
            resolve("host=localhost dbname=app user=ann", &e)
                .unwrap()
                .password
                .as_deref(),
            Some("socket:pw")
        );
        std::fs::copy(&f, d.join(".pgpass")).unwrap();
        std::fs::set_permissions(d.join(".pgpass"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        let e = env(&[], Some(&d));
        assert_eq!(
            resolve("host=x port=6000", &e).unwrap().password.as_deref(),
            Some("any\\one")
        );
        assert_eq!(resolve("host=x port=6001", &e).unwrap().password, None);
    }
}
