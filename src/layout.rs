//! The 64-bit ID layout of Instagram's 2011 generator, as pure Rust.
//!
//! ```text
//!  63                       23 22          10 9          0
//! +---------------------------+--------------+------------+
//! | ms since epoch (41 bits)  | shard (13)   | seq % 1024 |
//! +---------------------------+--------------+------------+
//! ```
//!
//! The time field includes the sign bit: IDs turn negative once 2^40 ms have
//! passed since the epoch, so every decoder here treats the ID as unsigned.
//! Nothing in this module touches PostgreSQL, so it is tested with plain
//! `cargo test` and proptest.

/// Instagram's epoch: 2011-08-24 21:07:01.721 UTC, in ms since 1970-01-01.
pub const INSTAGRAM_EPOCH_MS: i64 = 1_314_220_021_721;

pub const TIME_BITS: u32 = 41;
pub const SHARD_BITS: u32 = 13;
pub const SEQ_BITS: u32 = 10;

pub const SHARD_SHIFT: u32 = SEQ_BITS;
pub const TIME_SHIFT: u32 = SEQ_BITS + SHARD_BITS;

/// Largest value of each field.
pub const MAX_MS: i64 = (1 << TIME_BITS) - 1;
pub const MAX_SHARD: i32 = (1 << SHARD_BITS) - 1;
pub const SEQ_MODULUS: i64 = 1 << SEQ_BITS;

/// Latest epoch we accept: 9999-12-31 23:59:59.999 UTC. Keeps every decoded
/// time inside PostgreSQL's timestamptz range.
pub const MAX_EPOCH_MS: i64 = 253_402_300_799_999;

/// Why a value cannot become (part of) an ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// The shard is outside 0..=8191.
    ShardOutOfRange(i64),
    /// The time is before the epoch (value: ms since the epoch, negative).
    BeforeEpoch(i64),
    /// The time is past the 41-bit field (value: ms since the epoch).
    PastTimeField(i64),
    /// A sequence value below zero: `v % 1024` would be negative and, OR-ed
    /// into the ID as the original does, would set every high bit.
    NegativeSequenceValue(i64),
}

/// The three fields of an ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// Milliseconds since the epoch (0..=2^41-1).
    pub ms: i64,
    /// Logical shard (0..=8191).
    pub shard: i32,
    /// The sequence value modulo 1024 (0..=1023).
    pub seq: i32,
}

pub fn check_shard(shard: i64) -> Result<i32, LayoutError> {
    if (0..=MAX_SHARD as i64).contains(&shard) {
        Ok(shard as i32)
    } else {
        Err(LayoutError::ShardOutOfRange(shard))
    }
}

/// Checks a time (ms since the epoch) fits the 41-bit field.
pub fn check_ms(ms: i64) -> Result<i64, LayoutError> {
    if ms < 0 {
        Err(LayoutError::BeforeEpoch(ms))
    } else if ms > MAX_MS {
        Err(LayoutError::PastTimeField(ms))
    } else {
        Ok(ms)
    }
}

/// The 10-bit sequence field of a sequence value, exactly as the original's
/// `nextval(seq) % 1024`, refusing the negative values it would corrupt IDs with.
pub fn seq_field(seq_value: i64) -> Result<i32, LayoutError> {
    if seq_value < 0 {
        Err(LayoutError::NegativeSequenceValue(seq_value))
    } else {
        Ok((seq_value % SEQ_MODULUS) as i32)
    }
}

/// Packs already-checked fields. Same bits as the original's
/// `(ms << 23) | (shard << 10) | seq`, including the sign bit from 2^40 ms on.
#[inline]
pub fn pack(ms: i64, shard: i32, seq: i32) -> i64 {
    debug_assert!((0..=MAX_MS).contains(&ms));
    debug_assert!((0..=MAX_SHARD).contains(&shard));
    debug_assert!((0..SEQ_MODULUS as i32).contains(&seq));
    (((ms as u64) << TIME_SHIFT) | ((shard as u64) << SHARD_SHIFT) | seq as u64) as i64
}

/// Checks and packs: ms since the epoch, shard, raw sequence value. next_id
/// does these steps apart (the shard before nextval, the time after the
/// guard), so this whole is for the tests that pin the published formula.
#[cfg(test)]
pub fn compose(ms: i64, shard: i64, seq_value: i64) -> Result<i64, LayoutError> {
    Ok(pack(
        check_ms(ms)?,
        check_shard(shard)?,
        seq_field(seq_value)?,
    ))
}

/// Splits any 64-bit value into its fields; every bigint is a valid ID.
#[inline]
pub fn decompose(id: i64) -> Parts {
    let bits = id as u64;
    Parts {
        ms: (bits >> TIME_SHIFT) as i64 & MAX_MS,
        shard: ((bits >> SHARD_SHIFT) & MAX_SHARD as u64) as i32,
        seq: (bits & (SEQ_MODULUS as u64 - 1)) as i32,
    }
}

/// Smallest ID any shard can have in millisecond `ms` (since the epoch).
pub fn min_id(ms: i64) -> Result<i64, LayoutError> {
    Ok(pack(check_ms(ms)?, 0, 0))
}

/// Largest ID any shard can have in millisecond `ms`.
pub fn max_id(ms: i64) -> Result<i64, LayoutError> {
    Ok(pack(check_ms(ms)?, MAX_SHARD, SEQ_MODULUS as i32 - 1))
}

/// Smallest ID of one shard in millisecond `ms`.
pub fn min_id_in_shard(ms: i64, shard: i64) -> Result<i64, LayoutError> {
    Ok(pack(check_ms(ms)?, check_shard(shard)?, 0))
}

/// Largest ID of one shard in millisecond `ms`.
pub fn max_id_in_shard(ms: i64, shard: i64) -> Result<i64, LayoutError> {
    Ok(pack(
        check_ms(ms)?,
        check_shard(shard)?,
        SEQ_MODULUS as i32 - 1,
    ))
}

/// Checks an epoch (ms since 1970) is one we can decode into timestamptz.
pub fn check_epoch(epoch_ms: i64) -> Option<i64> {
    (0..=MAX_EPOCH_MS).contains(&epoch_ms).then_some(epoch_ms)
}

/// Parses the `insta_id.epoch` setting: whole milliseconds since 1970-01-01 UTC.
pub fn parse_epoch(text: &str) -> Option<i64> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<i64>().ok().and_then(check_epoch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn blog_example() {
        // Instagram's engineering blog: ms 1387263000, shard 1341, nextval 5001.
        let id = compose(1_387_263_000, 1341, 5001).unwrap();
        assert_eq!(id, 11_637_205_501_278_089);
        assert_eq!(
            decompose(id),
            Parts {
                ms: 1_387_263_000,
                shard: 1341,
                seq: 905
            }
        );
    }

    #[test]
    fn second_article_example_and_its_misprint() {
        let id = compose(264_384_000_000, 1001, 9001).unwrap();
        assert_eq!(id, 2_217_813_737_473_025_833);
        // The article prints ...832, which is seq 808, not 9001 % 1024 = 809.
        assert_eq!(decompose(2_217_813_737_473_025_832).seq, 808);
    }

    #[test]
    fn sign_bit_edge() {
        // 2^40 - 1 ms is the last positive time; 2^40 sets the sign bit.
        assert!(pack((1 << 40) - 1, MAX_SHARD, 1023) > 0);
        let first_negative = pack(1 << 40, 0, 0);
        assert_eq!(first_negative, i64::MIN);
        assert_eq!(decompose(first_negative).ms, 1 << 40);
        // 2^40 ms after Instagram's epoch is 2046-06-27 17:00:49.497 UTC.
        assert_eq!(INSTAGRAM_EPOCH_MS + (1 << 40), 2_413_731_649_497);
    }

    #[test]
    fn time_field_limits() {
        assert_eq!(decompose(max_id(MAX_MS).unwrap()).ms, MAX_MS);
        assert_eq!(max_id(MAX_MS).unwrap(), -1);
        assert_eq!(
            compose(MAX_MS + 1, 0, 0),
            Err(LayoutError::PastTimeField(MAX_MS + 1))
        );
        assert_eq!(compose(-1, 0, 0), Err(LayoutError::BeforeEpoch(-1)));
        // The field ends at 2081-04-30 12:54:37.273 UTC with Instagram's epoch.
        assert_eq!(INSTAGRAM_EPOCH_MS + MAX_MS, 3_513_243_277_272);
    }

    #[test]
    fn shard_and_sequence_checks() {
        assert_eq!(check_shard(8191), Ok(8191));
        assert_eq!(check_shard(8192), Err(LayoutError::ShardOutOfRange(8192)));
        assert_eq!(check_shard(-1), Err(LayoutError::ShardOutOfRange(-1)));
        assert_eq!(seq_field(1024), Ok(0));
        assert_eq!(seq_field(i64::MAX), Ok(1023));
        assert_eq!(seq_field(-5), Err(LayoutError::NegativeSequenceValue(-5)));
    }

    #[test]
    fn epoch_setting_parsing() {
        assert_eq!(parse_epoch("1314220021721"), Some(INSTAGRAM_EPOCH_MS));
        assert_eq!(parse_epoch(" 0 "), Some(0));
        assert_eq!(parse_epoch("-1"), None);
        assert_eq!(parse_epoch("1.5"), None);
        assert_eq!(parse_epoch("2011-08-24"), None);
        assert_eq!(parse_epoch(""), None);
        assert_eq!(parse_epoch("253402300800000"), None);
        assert_eq!(parse_epoch("99999999999999999999"), None);
    }

    /// Instagram's formula as published, on i64 with PostgreSQL's bigint semantics.
    fn original_formula(ms: i64, shard: i64, seq_value: i64) -> i64 {
        (ms << 23) | (shard << 10) | (seq_value % 1024)
    }

    proptest! {
        #[test]
        fn compose_matches_the_original(ms in 0..=MAX_MS, shard in 0..=8191i64, v in 0..=i64::MAX) {
            prop_assert_eq!(compose(ms, shard, v).unwrap(), original_formula(ms, shard, v));
        }

        #[test]
        fn round_trip_every_field(ms in 0..=MAX_MS, shard in 0..=MAX_SHARD, seq in 0..1024i32) {
            let id = pack(ms, shard, seq);
            prop_assert_eq!(decompose(id), Parts { ms, shard, seq });
        }

        #[test]
        fn every_bigint_round_trips(id in any::<i64>()) {
            let p = decompose(id);
            prop_assert_eq!(pack(p.ms, p.shard, p.seq), id);
        }

        #[test]
        fn min_max_bound_every_id_of_the_ms(ms in 0..=MAX_MS, shard in 0..=MAX_SHARD, seq in 0..1024i32) {
            let id = pack(ms, shard, seq) as u64;
            prop_assert!(min_id(ms).unwrap() as u64 <= id && id <= max_id(ms).unwrap() as u64);
            prop_assert!(min_id_in_shard(ms, shard as i64).unwrap() as u64 <= id);
            prop_assert!(id <= max_id_in_shard(ms, shard as i64).unwrap() as u64);
            if ms < MAX_MS {
                prop_assert!(id < min_id(ms + 1).unwrap() as u64);
            }
        }

        #[test]
        fn ids_sort_by_time_while_positive(a in 0..(1i64 << 40), b in 0..(1i64 << 40), s in 0..=MAX_SHARD, q in 0..1024i32) {
            prop_assume!(a < b);
            prop_assert!(pack(a, s, q) < pack(b, 0, 0));
        }
    }
}
