//! The tool's sessions, through libpq itself (pq-sys): connection strings,
//! service and password files, TLS (sslmode, sslrootcert, sslcrl, the key
//! file's permissions), authentication, several hosts and
//! target_session_attrs are libpq's, exactly as psql's and pg_dump's.
//!
//! This is the FFI, kept thin: statements go as text with their parameters
//! as text (PQexecParams), results come back as text and are parsed by the
//! caller's type (`FromText`). The names follow the `postgres` crate's, which
//! the tool used before, so that its call sites read the same.

use pq_sys as ffi;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;
use std::sync::Arc;

/// SQLSTATEs the tool tells apart.
pub mod sqlstate {
    pub const QUERY_CANCELED: &str = "57014";
    pub const LOCK_NOT_AVAILABLE: &str = "55P03";
}

/// An error a server sent: its fields as psql shows them.
#[derive(Debug, Clone)]
pub struct DbError {
    severity: String,
    code: String,
    message: String,
    detail: Option<String>,
    hint: Option<String>,
}

impl DbError {
    pub fn severity(&self) -> &str {
        &self.severity
    }
    pub fn code(&self) -> &str {
        &self.code
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }
}

/// A session's error: the server's, or libpq's own (no connection, a
/// connection lost, a bad connection string).
#[derive(Debug, Clone)]
pub enum Error {
    Db(DbError),
    /// libpq's message; `closed` when the connection is gone with it.
    Client {
        message: String,
        closed: bool,
    },
}

impl Error {
    pub fn as_db_error(&self) -> Option<&DbError> {
        match self {
            Error::Db(d) => Some(d),
            Error::Client { .. } => None,
        }
    }
    /// The SQLSTATE, when a server sent one.
    pub fn code(&self) -> Option<&str> {
        self.as_db_error().map(DbError::code)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Db(d) => write!(f, "{}: {}", d.severity, d.message),
            // (ended_by_watchdog reads "connection closed".)
            Error::Client {
                message,
                closed: true,
            } => write!(f, "connection closed: {message}"),
            Error::Client { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {}

/// What libpq allocated and hands back as text, copied.
unsafe fn text(p: *const c_char) -> Option<String> {
    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
}

fn cstring(s: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|_| Error::Client {
        message: format!("a NUL character in \"{}\"", s.replace('\0', "\\0")),
        closed: false,
    })
}

/// libpq's version, as PQlibVersion gives it (160002 for 16.2).
pub fn lib_version() -> i32 {
    // SAFETY: takes nothing, reads a constant.
    unsafe { ffi::PQlibVersion() }
}

/// Options as libpq lists them (PQconninfoOption): the ones with a value.
/// Frees the list.
unsafe fn options(list: *mut ffi::PQconninfoOption) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if list.is_null() {
        return out; // (out of memory)
    }
    let mut o = list;
    while !(*o).keyword.is_null() {
        if let (Some(k), Some(v)) = (text((*o).keyword), text((*o).val)) {
            out.insert(k, v);
        }
        o = o.add(1);
    }
    ffi::PQconninfoFree(list);
    out
}

/// The keywords and values of a connection string, as libpq parses it
/// (PQconninfoParse: its syntax and its keywords, nothing looked up).
pub fn conninfo_parse(conninfo: &str) -> Result<BTreeMap<String, String>, String> {
    let c = cstring(conninfo).map_err(|e| e.to_string())?;
    let mut msg: *mut c_char = std::ptr::null_mut();
    // SAFETY: a NUL-terminated string; libpq allocates the list or the
    // message, which are freed here.
    unsafe {
        let list = ffi::PQconninfoParse(c.as_ptr(), &mut msg);
        if list.is_null() {
            let said = text(msg).unwrap_or_else(|| "out of memory".into());
            if !msg.is_null() {
                ffi::PQfreemem(msg as *mut c_void);
            }
            return Err(said.trim_end().to_string());
        }
        Ok(options(list))
    }
}

/// Keyword and value arrays as PQconnectdbParams and PQconnectStartParams
/// take them, NULL-terminated.
struct Params {
    _owned: Vec<CString>,
    keys: Vec<*const c_char>,
    values: Vec<*const c_char>,
}

impl Params {
    fn of(params: &[(&str, &str)]) -> Result<Params, Error> {
        let mut owned = Vec::new();
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for (k, v) in params {
            let (k, v) = (cstring(k)?, cstring(v)?);
            keys.push(k.as_ptr());
            values.push(v.as_ptr());
            owned.push(k);
            owned.push(v);
        }
        keys.push(std::ptr::null());
        values.push(std::ptr::null());
        Ok(Params {
            _owned: owned,
            keys,
            values,
        })
    }
}

/// Every setting a connection with `params` would have, resolved by libpq
/// as it resolves them to connect (the service file, the PG* environment,
/// its defaults, the user and database defaulted), without connecting: a
/// value no libpq accepts, given to an option it validates, makes
/// PQconnectStartParams stop where it validates its options, which is
/// after it filled them in and before it looks up any host. Twice: the
/// option that stops it is read from the other call (target_session_attrs
/// stops the first, gssencmode the second). Only what the tool decides
/// before connecting reads this (db::guarded, labels); `Err` is libpq's
/// word on an option it refuses.
pub fn resolve(params: &[(&str, &str)]) -> Result<BTreeMap<String, String>, String> {
    let mut resolved = resolved_up_to(params, "target_session_attrs")?;
    let other = resolved_up_to(params, "gssencmode")?;
    match other.get("target_session_attrs") {
        Some(t) => resolved.insert("target_session_attrs".into(), t.clone()),
        None => resolved.remove("target_session_attrs"),
    };
    Ok(resolved)
}

/// `resolve`'s one call, stopped by `stop`.
fn resolved_up_to(params: &[(&str, &str)], stop: &str) -> Result<BTreeMap<String, String>, String> {
    const STOP: &str = "insta-id resolves only";
    let mut all = params.to_vec();
    all.push((stop, STOP));
    let p = Params::of(&all).map_err(|e| e.to_string())?;
    // SAFETY: arrays NULL-terminated, alive for the call; the connection
    // object is freed here, its options list by `options`.
    unsafe {
        let conn = ffi::PQconnectStartParams(p.keys.as_ptr(), p.values.as_ptr(), 0);
        if conn.is_null() {
            return Err("out of memory".into());
        }
        let said = text(ffi::PQerrorMessage(conn)).unwrap_or_default();
        let resolved = options(ffi::PQconninfo(conn));
        let status = ffi::PQstatus(conn);
        ffi::PQfinish(conn);
        // Refused for the stop alone: every other option was accepted.
        if status != ffi::ConnStatusType::CONNECTION_BAD || !said.contains(STOP) {
            return Err(said.trim_end().to_string());
        }
        Ok(resolved)
    }
}

/// A server's notice: WARNINGs printed as they arrive, the rest dropped
/// (libpq's default would print every NOTICE on stderr).
unsafe extern "C" fn notice(arg: *mut c_void, res: *const ffi::PGresult) {
    if arg.is_null() {
        return;
    }
    let field = |f: u8| text(ffi::PQresultErrorField(res, f as c_int));
    if field(ffi::PG_DIAG_SEVERITY_NONLOCALIZED).as_deref() == Some("WARNING") {
        let msg = field(ffi::PG_DIAG_MESSAGE_PRIMARY).unwrap_or_default();
        // (Never a panic here, which would abort the process mid-cutover:
        // a closed stdout loses the line.)
        use std::io::Write;
        let _ = writeln!(
            std::io::stdout(),
            "   WARNING:  {}",
            crate::shared::printable(&msg)
        );
    }
}

/// A session.
pub struct Client {
    conn: *mut ffi::PGconn,
}

// SAFETY: a PGconn is used by one thread at a time (&mut self for every
// call that touches it); libpq is thread-safe across connections.
unsafe impl Send for Client {}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { ffi::PQfinish(self.conn) }
    }
}

impl Client {
    /// Connects with `params` (PQconnectdbParams, later keywords winning);
    /// `warnings` prints the server's WARNINGs.
    pub fn connect(params: &[(&str, &str)], warnings: bool) -> Result<Client, Error> {
        let p = Params::of(params)?;
        // SAFETY: arrays NULL-terminated and alive for the call.
        let conn = unsafe { ffi::PQconnectdbParams(p.keys.as_ptr(), p.values.as_ptr(), 0) };
        if conn.is_null() {
            return Err(Error::Client {
                message: "out of memory".into(),
                closed: true,
            });
        }
        let c = Client { conn };
        // SAFETY: a connection object libpq made.
        if unsafe { ffi::PQstatus(conn) } != ffi::ConnStatusType::CONNECTION_OK {
            return Err(Error::Client {
                message: c.error_message(),
                closed: false,
            });
        }
        // SAFETY: the receiver reads only the result it is given; its
        // argument is a flag, never dereferenced.
        unsafe {
            let flag = if warnings { 1usize } else { 0 };
            ffi::PQsetNoticeReceiver(conn, Some(notice), flag as *mut c_void);
        }
        Ok(c)
    }

    fn error_message(&self) -> String {
        // SAFETY: the connection is live; the message is copied.
        let m = unsafe { text(ffi::PQerrorMessage(self.conn)) }.unwrap_or_default();
        m.trim_end().to_string()
    }

    fn field(&self, f: unsafe extern "C" fn(*const ffi::PGconn) -> *mut c_char) -> String {
        // SAFETY: the connection is live; the text is copied.
        unsafe { text(f(self.conn)) }.unwrap_or_default()
    }

    /// Where the session went, as libpq connected it: the host (or socket
    /// directory), port, database and user.
    pub fn host(&self) -> String {
        self.field(ffi::PQhost)
    }
    pub fn port(&self) -> String {
        self.field(ffi::PQport)
    }
    pub fn db(&self) -> String {
        self.field(ffi::PQdb)
    }
    pub fn user(&self) -> String {
        self.field(ffi::PQuser)
    }
    /// Whether the session is encrypted (TLS).
    pub fn ssl_in_use(&self) -> bool {
        // SAFETY: the connection is live.
        unsafe { ffi::PQsslInUse(self.conn) == 1 }
    }

    /// The results of what was sent, read to the end (PQgetResult until
    /// NULL): the last's rows, or the first error. A server that ends the
    /// session (pg_terminate_backend) sends its FATAL error, with its
    /// SQLSTATE, before it closes: that error is the one said, where
    /// PQexec would keep only libpq's "server closed the connection".
    fn results(&mut self, sent: c_int) -> Result<Rows, Error> {
        use ffi::ExecStatusType::*;
        if sent == 0 {
            return Err(self.lost());
        }
        let (mut rows, mut error) = (None, None);
        // SAFETY: each result is libpq's, read then cleared once.
        unsafe {
            loop {
                let res = ffi::PQgetResult(self.conn);
                if res.is_null() {
                    break;
                }
                let status = ffi::PQresultStatus(res);
                match status {
                    PGRES_COMMAND_OK | PGRES_TUPLES_OK | PGRES_EMPTY_QUERY => {
                        rows = Some(Rows::of(res))
                    }
                    _ if error.is_none() => error = Some(self.error_of(res)),
                    _ => {}
                }
                ffi::PQclear(res);
                // (The tool runs no COPY: a statement that starts one would
                // keep PQgetResult answering COPY forever. Said, and the
                // session is not reused.)
                if matches!(status, PGRES_COPY_IN | PGRES_COPY_OUT | PGRES_COPY_BOTH) {
                    break;
                }
            }
        }
        match (error, rows) {
            (Some(e), _) => Err(e),
            (None, Some(r)) => Ok(r),
            (None, None) => Err(self.lost()),
        }
    }

    /// The error a result carries: the server's fields, or libpq's words
    /// (no SQLSTATE) with whether the session is gone.
    ///
    /// SAFETY: `res` is an error result, not yet cleared.
    unsafe fn error_of(&self, res: *const ffi::PGresult) -> Error {
        let field = |f: u8| text(ffi::PQresultErrorField(res, f as c_int));
        match field(ffi::PG_DIAG_SQLSTATE) {
            Some(code) => Error::Db(DbError {
                severity: field(ffi::PG_DIAG_SEVERITY_NONLOCALIZED)
                    .or_else(|| field(ffi::PG_DIAG_SEVERITY))
                    .unwrap_or_else(|| "ERROR".into()),
                code,
                message: field(ffi::PG_DIAG_MESSAGE_PRIMARY).unwrap_or_default(),
                detail: field(ffi::PG_DIAG_MESSAGE_DETAIL),
                hint: field(ffi::PG_DIAG_MESSAGE_HINT),
            }),
            None => {
                let said = text(ffi::PQresultErrorMessage(res)).unwrap_or_default();
                match self.lost() {
                    Error::Client { message, closed } => Error::Client {
                        message: match said.trim_end() {
                            "" => message,
                            m => m.to_string(),
                        },
                        closed,
                    },
                    e => e,
                }
            }
        }
    }

    /// libpq's error when it returned no result, the connection's state
    /// with it.
    fn lost(&self) -> Error {
        // SAFETY: the connection object is live.
        let closed = unsafe { ffi::PQstatus(self.conn) } != ffi::ConnStatusType::CONNECTION_OK;
        Error::Client {
            message: self.error_message(),
            closed,
        }
    }

    /// One statement, its parameters as text (the server infers their
    /// types, or the statement casts them).
    fn exec(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Rows, Error> {
        let sql = cstring(sql)?;
        let values: Vec<Option<CString>> = params
            .iter()
            .map(|p| p.to_sql().map(|t| cstring(&t)).transpose())
            .collect::<Result<_, _>>()?;
        let ptrs: Vec<*const c_char> = values
            .iter()
            .map(|v| v.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()))
            .collect();
        // SAFETY: every pointer is alive for the call; text formats (NULL
        // lengths and formats), text results.
        let sent = unsafe {
            ffi::PQsendQueryParams(
                self.conn,
                sql.as_ptr(),
                ptrs.len() as c_int,
                std::ptr::null(),
                ptrs.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                0,
            )
        };
        self.results(sent)
    }

    /// Statements separated by semicolons, in the simple query protocol:
    /// the rows of the last (the server stops at the first error, which is
    /// said). PgBouncer's console takes only this.
    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<Row>, Error> {
        let sql = cstring(sql)?;
        // SAFETY: a NUL-terminated statement.
        let sent = unsafe { ffi::PQsendQuery(self.conn, sql.as_ptr()) };
        self.results(sent).map(|r| r.rows)
    }

    pub fn cancel_token(&self) -> CancelToken {
        // SAFETY: the connection is live; the object is freed by the token.
        CancelToken(Arc::new(Cancel(unsafe { ffi::PQgetCancel(self.conn) })))
    }

    /// BEGIN; ROLLBACK when the transaction is dropped without commit.
    pub fn transaction(&mut self) -> Result<Transaction<'_>, Error> {
        self.batch_execute("BEGIN")?;
        Ok(Transaction {
            client: self,
            done: false,
        })
    }
}

/// What the tool runs, on a session or in its transaction.
pub trait GenericClient {
    fn client(&mut self) -> &mut Client;

    fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, Error> {
        self.client().exec(sql, params).map(|r| r.rows)
    }
    /// Exactly one row, else an error.
    fn query_one(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, Error> {
        let mut rows = self.query(sql, params)?;
        match rows.len() {
            1 => Ok(rows.remove(0)),
            n => Err(unexpected(n)),
        }
    }
    /// At most one row, else an error.
    fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error> {
        let mut rows = self.query(sql, params)?;
        match rows.len() {
            0 => Ok(None),
            1 => Ok(Some(rows.remove(0))),
            n => Err(unexpected(n)),
        }
    }
    /// The rows the statement affected.
    fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Error> {
        self.client().exec(sql, params).map(|r| r.affected)
    }
    fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        self.client().simple_query(sql).map(|_| ())
    }
}

fn unexpected(n: usize) -> Error {
    Error::Client {
        message: format!("query returned an unexpected number of rows ({n})"),
        closed: false,
    }
}

impl GenericClient for Client {
    fn client(&mut self) -> &mut Client {
        self
    }
}

/// A transaction on a session: COMMIT by `commit`, ROLLBACK when dropped.
pub struct Transaction<'a> {
    client: &'a mut Client,
    done: bool,
}

impl GenericClient for Transaction<'_> {
    fn client(&mut self) -> &mut Client {
        self.client
    }
}

impl Transaction<'_> {
    pub fn commit(mut self) -> Result<(), Error> {
        self.done = true;
        self.client.batch_execute("COMMIT")
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.client.batch_execute("ROLLBACK");
        }
    }
}

/// Cancels a session's statement from anywhere (PQcancel: a connection of
/// its own, made to be used from another thread). libpq before 17 sends
/// the cancel request without TLS, whatever the session's sslmode: what
/// crosses the network is the session's process ID and cancel key.
#[derive(Clone)]
pub struct CancelToken(Arc<Cancel>);

struct Cancel(*mut ffi::PGcancel);

// SAFETY: PQcancel is documented safe to call from any thread; the object
// is only read by it, and freed once, by the last owner.
unsafe impl Send for Cancel {}
unsafe impl Sync for Cancel {}

impl Drop for Cancel {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: owned, freed once.
            unsafe { ffi::PQfreeCancel(self.0) }
        }
    }
}

impl CancelToken {
    /// Sends the cancel and waits for the server to take it.
    pub fn cancel_query(&self) -> Result<(), String> {
        if self.0 .0.is_null() {
            return Err("no connection to cancel".into());
        }
        let mut buf = [0 as c_char; 256];
        // SAFETY: the object is live; the buffer's size is passed.
        if unsafe { ffi::PQcancel(self.0 .0, buf.as_mut_ptr(), buf.len() as c_int) } == 1 {
            return Ok(());
        }
        // SAFETY: PQcancel wrote a NUL-terminated message.
        Err(unsafe { text(buf.as_ptr()) }.unwrap_or_default())
    }

    /// Sends the cancel, waiting `within` at most: PQcancel's connect has
    /// no timeout of its own, and a server that does not answer must not
    /// hold the caller past its bound while clients wait. A cancel still on
    /// its way after that is left to finish alone, and may end a later
    /// statement of that session: only for a session that is not used
    /// again (a try's own, or the process about to exit).
    pub fn cancel_within(&self, within: std::time::Duration) -> Result<(), String> {
        let (tx, rx) = std::sync::mpsc::channel();
        let token = self.clone();
        std::thread::Builder::new()
            .spawn(move || {
                let _ = tx.send(token.cancel_query());
            })
            .map_err(|e| format!("no thread for the cancel: {e}"))?;
        rx.recv_timeout(within)
            .unwrap_or_else(|_| Err(format!("no answer within {} ms", within.as_millis())))
    }
}

/// A result's rows, copied out of libpq.
struct Rows {
    rows: Vec<Row>,
    affected: u64,
}

impl Rows {
    /// SAFETY: `res` is a successful result, not yet cleared.
    unsafe fn of(res: *mut ffi::PGresult) -> Rows {
        let (n, f) = (ffi::PQntuples(res), ffi::PQnfields(res));
        let names: Arc<[String]> = (0..f)
            .map(|j| text(ffi::PQfname(res, j)).unwrap_or_default())
            .collect();
        let rows = (0..n)
            .map(|i| Row {
                names: names.clone(),
                values: (0..f)
                    .map(|j| {
                        (ffi::PQgetisnull(res, i, j) == 0)
                            .then(|| text(ffi::PQgetvalue(res, i, j)).unwrap_or_default())
                    })
                    .collect(),
            })
            .collect();
        let affected = text(ffi::PQcmdTuples(res))
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        Rows { rows, affected }
    }
}

/// A row, its values as the server wrote them in text.
#[derive(Debug, Clone)]
pub struct Row {
    names: Arc<[String]>,
    values: Vec<Option<String>>,
}

impl Row {
    /// The value of column `idx` (a position) as `T`; panics
    /// when there is no such column or the text is not a `T`, as the
    /// statement and the type are the caller's to match.
    pub fn get<'a, I: RowIndex + fmt::Display, T: FromText<'a>>(&'a self, idx: I) -> T {
        let Some(i) = idx.index(&self.names) else {
            panic!("no column {idx} in a row of {:?}", self.names);
        };
        T::from_text(self.values[i].as_deref())
            .unwrap_or_else(|e| panic!("column {idx} ({:?}): {e}", self.names[i]))
    }
    /// The text of column `name`, `None` when it is NULL or the row has no
    /// such column (PgBouncer's consoles differ between versions).
    pub fn named(&self, name: &str) -> Option<&str> {
        let i = self.names.iter().position(|n| n == name)?;
        self.values[i].as_deref()
    }
}

/// A column by position.
pub trait RowIndex {
    fn index(&self, names: &[String]) -> Option<usize>;
}

impl RowIndex for usize {
    fn index(&self, names: &[String]) -> Option<usize> {
        (*self < names.len()).then_some(*self)
    }
}

/// A Rust value from a column's text (`None`: NULL).
pub trait FromText<'a>: Sized {
    fn from_text(text: Option<&'a str>) -> Result<Self, String>;
}

fn not_null(text: Option<&str>) -> Result<&str, String> {
    text.ok_or_else(|| "NULL where a value was expected".to_string())
}

impl<'a, T: FromText<'a>> FromText<'a> for Option<T> {
    fn from_text(text: Option<&'a str>) -> Result<Self, String> {
        text.map(|t| T::from_text(Some(t))).transpose()
    }
}

impl<'a> FromText<'a> for &'a str {
    fn from_text(text: Option<&'a str>) -> Result<Self, String> {
        not_null(text)
    }
}

impl FromText<'_> for String {
    fn from_text(text: Option<&str>) -> Result<Self, String> {
        not_null(text).map(String::from)
    }
}

impl FromText<'_> for bool {
    fn from_text(text: Option<&str>) -> Result<Self, String> {
        match not_null(text)? {
            "t" => Ok(true),
            "f" => Ok(false),
            t => Err(format!("\"{t}\" is not a boolean")),
        }
    }
}

macro_rules! from_text_parsed {
    ($($t:ty),*) => {$(
        impl FromText<'_> for $t {
            fn from_text(text: Option<&str>) -> Result<Self, String> {
                let t = not_null(text)?;
                t.parse().map_err(|e| format!("\"{t}\": {e}"))
            }
        }
    )*};
}
from_text_parsed!(i16, i32, i64, u32, u64, f64);

/// A parameter as text (`None`: NULL).
pub trait ToSql {
    fn to_sql(&self) -> Option<String>;
}

impl<T: ToSql + ?Sized> ToSql for &T {
    fn to_sql(&self) -> Option<String> {
        (**self).to_sql()
    }
}

impl<T: ToSql> ToSql for Option<T> {
    fn to_sql(&self) -> Option<String> {
        self.as_ref().and_then(ToSql::to_sql)
    }
}

impl ToSql for str {
    fn to_sql(&self) -> Option<String> {
        Some(self.to_string())
    }
}

impl ToSql for String {
    fn to_sql(&self) -> Option<String> {
        Some(self.clone())
    }
}

impl ToSql for bool {
    fn to_sql(&self) -> Option<String> {
        Some(if *self { "t" } else { "f" }.to_string())
    }
}

macro_rules! to_sql_display {
    ($($t:ty),*) => {$(
        impl ToSql for $t {
            fn to_sql(&self) -> Option<String> {
                Some(self.to_string())
            }
        }
    )*};
}
to_sql_display!(i16, i32, i64, u32, u64, f64);

/// An array parameter, in PostgreSQL's array text: every element quoted,
/// NULL bare.
impl<T: ToSql> ToSql for [T] {
    fn to_sql(&self) -> Option<String> {
        let elements: Vec<String> = self
            .iter()
            .map(|e| match e.to_sql() {
                Some(t) => format!("\"{}\"", t.replace('\\', "\\\\").replace('"', "\\\"")),
                None => "NULL".to_string(),
            })
            .collect();
        Some(format!("{{{}}}", elements.join(",")))
    }
}

impl<T: ToSql> ToSql for Vec<T> {
    fn to_sql(&self) -> Option<String> {
        self.as_slice().to_sql()
    }
}

/// A one-dimensional array's elements from its text (`{a,"b c",NULL}`),
/// `None` for NULL.
fn array_elements(text: &str) -> Result<Vec<Option<String>>, String> {
    let inner = text
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or_else(|| format!("\"{text}\" is not an array"))?;
    let mut out = Vec::new();
    let mut chars = inner.chars().peekable();
    while chars.peek().is_some() {
        let mut e = String::new();
        let quoted = chars.peek() == Some(&'"');
        if quoted {
            chars.next();
            loop {
                match chars.next() {
                    Some('\\') => e.extend(chars.next()),
                    Some('"') => break,
                    Some(c) => e.push(c),
                    None => return Err(format!("\"{text}\": an unterminated element")),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                if c == '{' {
                    return Err(format!("\"{text}\" has more than one dimension"));
                }
                e.push(c);
                chars.next();
            }
        }
        out.push((quoted || e != "NULL").then_some(e));
        match chars.next() {
            None | Some(',') => {}
            Some(c) => return Err(format!("\"{text}\": '{c}' after an element")),
        }
    }
    Ok(out)
}

impl<T: for<'b> FromText<'b>> FromText<'_> for Vec<T> {
    fn from_text(text: Option<&str>) -> Result<Self, String> {
        array_elements(not_null(text)?)?
            .iter()
            .map(|e| T::from_text(e.as_deref()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolved_as_libpq_would_connect() {
        let r = resolve(&[("host", "h1,h2"), ("target_session_attrs", "read-write")]).unwrap();
        assert_eq!(r["host"], "h1,h2");
        assert_eq!(r["target_session_attrs"], "read-write");
        let r = resolve(&[("host", "h")]).unwrap();
        assert_eq!(
            r.get("target_session_attrs").map(String::as_str),
            Some("any")
        );
    }

    #[test]
    fn arrays_go_as_quoted_text() {
        let strings = vec!["a", "b\"c", "d\\e", "", "NULL"];
        assert_eq!(
            strings.to_sql().unwrap(),
            r#"{"a","b\"c","d\\e","","NULL"}"#
        );
        assert_eq!(Vec::<String>::new().to_sql().unwrap(), "{}");
        assert_eq!(vec![Some(1), None].to_sql().unwrap(), r#"{"1",NULL}"#);
        assert_eq!(None::<i32>.to_sql(), None);
        // And back, as the server writes them.
        let back = Vec::<String>::from_text(Some(r#"{a,"b\"c","d\\e","","NULL"}"#));
        assert_eq!(back.unwrap(), strings);
        assert_eq!(
            Vec::<Option<i32>>::from_text(Some("{1,NULL,3}")),
            Ok(vec![Some(1), None, Some(3)])
        );
        assert_eq!(Vec::<i32>::from_text(Some("{}")), Ok(vec![]));
        assert!(Vec::<String>::from_text(Some("{a,NULL}")).is_err());
        assert!(Vec::<i32>::from_text(Some("{{1},{2}}")).is_err());
    }

    #[test]
    fn columns_parse_as_their_types() {
        assert_eq!(bool::from_text(Some("t")), Ok(true));
        assert!(bool::from_text(Some("true")).is_err());
        assert_eq!(i64::from_text(Some("-9223372036854775808")), Ok(i64::MIN));
        assert_eq!(Option::<i32>::from_text(None), Ok(None));
        assert!(String::from_text(None).is_err());
    }

    #[test]
    fn libpq_parses_and_resolves_without_connecting() {
        let parsed = conninfo_parse("host=/nowhere port=1 dbname='a b' user=u").unwrap();
        assert_eq!(parsed["dbname"], "a b");
        assert!(conninfo_parse("hots=x").unwrap_err().contains("hots"));
        // Nothing listens on /nowhere: resolving does not try.
        let r = resolve(&[("host", "/nowhere"), ("port", "1"), ("user", "u")]).unwrap();
        assert_eq!((r["host"].as_str(), r["port"].as_str()), ("/nowhere", "1"));
        assert_eq!(
            r["dbname"], "u",
            "the database defaults to the user, as libpq's"
        );
        assert!(resolve(&[("sslmode", "sometimes")])
            .unwrap_err()
            .contains("sslmode"));
    }
}
