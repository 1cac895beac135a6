//! What the commands share: how a command fails and exits, a shard's
//! number as the operator gives it, bytes as PostgreSQL shows them. Every
//! module may use these; this one uses none of them, so no file of cli/src
//! imports one that imports it back.

use std::process::ExitCode;

/// --pause-budget's default (docs/fleet.md says it).
pub const DEFAULT_PAUSE_BUDGET_MS: u64 = 500;

pub enum Failure {
    /// Refused before connecting anywhere (exit 2).
    Usage(String),
    Failed(String),
    /// A try of the cutover that would have held the clients past its
    /// budget, undone; after the last try, the move's exit is 75
    /// (EX_TEMPFAIL: nothing changed, try again later).
    GaveUp(String),
}

impl Failure {
    /// Says it, and exits 2 for a refusal before any connection, 75 for a
    /// cutover given up, else 1.
    pub fn exit(self) -> ExitCode {
        match self {
            Failure::Usage(e) => {
                eprintln!("insta-id: {e}");
                ExitCode::from(2)
            }
            Failure::Failed(e) => {
                eprintln!("insta-id: {e}");
                ExitCode::FAILURE
            }
            Failure::GaveUp(e) => {
                eprintln!("insta-id: {e}");
                ExitCode::from(75)
            }
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Failure::Usage(e) | Failure::Failed(e) | Failure::GaveUp(e) => e,
        }
    }
}

impl From<String> for Failure {
    fn from(e: String) -> Failure {
        Failure::Failed(e)
    }
}

pub type Result<T> = std::result::Result<T, Failure>;

/// A shard's number as the operator gives it; a schema's name (insta5) is
/// told apart from it.
pub fn shard_number(said: &str) -> std::result::Result<u32, String> {
    said.parse().map_err(|_| {
        // A name, then digits: insta5.
        let digits = said.trim_start_matches(|c: char| !c.is_ascii_digit());
        let name = &said[..said.len() - digits.len()];
        if !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && name.chars().all(|c| c.is_alphabetic() || c == '_')
            && !name.is_empty()
        {
            format!(
                "a shard is a number from 0 to 8191, not a schema's name: {digits}, not {said}?"
            )
        } else {
            "a shard is a number from 0 to 8191".to_string()
        }
    })
}

/// Bytes as PostgreSQL's pg_size_pretty shows them.
pub fn pretty(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "kB", "MB", "GB", "TB"];
    let (mut v, mut u) = (bytes as f64, 0);
    while v >= 10240.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{} {}", v.round() as u64, UNITS[u])
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
    fn a_shard_is_a_number_and_a_schema_name_is_told_apart() {
        assert_eq!(shard_number("5"), Ok(5));
        assert_eq!(
            shard_number("insta5"),
            Err("a shard is a number from 0 to 8191, not a schema's name: 5, not insta5?".into())
        );
        for bad in ["", "-1", "five", "5a", "insta"] {
            assert_eq!(
                shard_number(bad),
                Err("a shard is a number from 0 to 8191".into()),
                "{bad}"
            );
        }
    }

    #[test]
    fn sizes_read_as_pg_size_pretty() {
        assert_eq!(pretty(0), "0 bytes");
        assert_eq!(pretty(10239), "10239 bytes");
        assert_eq!(pretty(10240), "10 kB");
        assert_eq!(pretty(64 * 1024 * 1024), "64 MB");
        assert_eq!(pretty(3 << 40), "3072 GB");
    }
}
