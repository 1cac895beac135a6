//! The wall clock, in whole milliseconds since 1970-01-01 UTC.
//!
//! Reads what clock_timestamp() reads (GetCurrentTimestamp), not the
//! transaction's now(), and floors to the millisecond exactly like the
//! original's `FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)`.
//!
//! Test builds (feature `pg_test`) can replace it with a scripted clock;
//! release builds contain no such switch.

use pgrx::pg_sys;

/// Microseconds from 1970-01-01 to PostgreSQL's 2000-01-01 epoch.
pub const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// Milliseconds since 1970 of a PostgreSQL timestamptz (µs since 2000),
/// floored. `infinity` and `-infinity` (i64::MAX and MIN) saturate, so they
/// land beyond every range check instead of wrapping around.
#[inline]
pub fn timestamptz_to_unix_ms(ts: i64) -> i64 {
    ts.saturating_add(PG_EPOCH_OFFSET_US).div_euclid(1000)
}

/// The inverse: a PostgreSQL timestamptz from ms since 1970.
#[inline]
pub fn unix_ms_to_timestamptz(ms: i64) -> i64 {
    ms * 1000 - PG_EPOCH_OFFSET_US
}

// PostgreSQL's clock, declared here instead of taken from pgrx's bindings,
// whose wrapper puts a sigsetjmp boundary (and a thread check) around every
// call: GetCurrentTimestamp only reads gettimeofday and raises nothing, and
// next_id reads it on every call.
unsafe extern "C-unwind" {
    #[link_name = "GetCurrentTimestamp"]
    fn get_current_timestamp() -> pg_sys::TimestampTz;
}

/// The server's clock, as PostgreSQL reads it (timestamptz, µs since 2000).
#[inline(always)]
pub fn pg_now() -> pg_sys::TimestampTz {
    // SAFETY: see above; callable from any frame, it cannot longjmp.
    unsafe { get_current_timestamp() }
}

#[cfg(not(feature = "pg_test"))]
#[inline]
pub fn now_unix_ms() -> i64 {
    timestamptz_to_unix_ms(pg_now())
}

#[cfg(feature = "pg_test")]
pub use test_clock::now_unix_ms;

/// Whether a test has scripted the clock (never in release builds).
#[inline(always)]
pub fn scripted() -> bool {
    #[cfg(feature = "pg_test")]
    return test_clock::is_set();
    #[cfg(not(feature = "pg_test"))]
    false
}

#[cfg(feature = "pg_test")]
pub mod test_clock {
    //! A scripted clock for `#[pg_test]`s: starts at a given millisecond and
    //! advances one millisecond every `reads_per_ms` readings (0: frozen).
    use super::*;
    use std::cell::Cell;

    thread_local! {
        static SCRIPT: Cell<Option<(i64, u64)>> = const { Cell::new(None) };
        static READS: Cell<u64> = const { Cell::new(0) };
    }

    pub fn set(start_ms: i64, reads_per_ms: u64) {
        SCRIPT.with(|s| s.set(Some((start_ms, reads_per_ms))));
        READS.with(|r| r.set(0));
    }

    pub fn clear() {
        SCRIPT.with(|s| s.set(None));
    }

    pub fn is_set() -> bool {
        SCRIPT.with(Cell::get).is_some()
    }

    /// A scripted clock that never advances: waiting for it would never end.
    pub fn is_frozen() -> bool {
        matches!(SCRIPT.with(Cell::get), Some((_, 0)))
    }

    pub fn now_unix_ms() -> i64 {
        match SCRIPT.with(Cell::get) {
            None => timestamptz_to_unix_ms(pg_now()),
            Some((start, per_ms)) => {
                let n = READS.with(|r| {
                    let n = r.get();
                    r.set(n + 1);
                    n
                });
                start + n.checked_div(per_ms).unwrap_or(0) as i64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_like_the_original() {
        // 2000-01-01 00:00:00.0019 -> ...001 ms; 1999-12-31 23:59:59.9991 -> ...999 ms.
        assert_eq!(timestamptz_to_unix_ms(1_900), 946_684_800_001);
        assert_eq!(timestamptz_to_unix_ms(-900), 946_684_799_999);
        assert_eq!(unix_ms_to_timestamptz(946_684_800_001), 1_000);
        // infinity / -infinity stay at the far ends.
        assert!(timestamptz_to_unix_ms(i64::MAX) > 9_000_000_000_000_000);
        assert!(timestamptz_to_unix_ms(i64::MIN) < -9_000_000_000_000_000);
    }
}
