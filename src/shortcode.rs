//! Instagram's shortcodes, as pure Rust: an ID written in base 64 with the
//! URL-safe alphabet `A-Z a-z 0-9 - _`, most significant digit first, no
//! padding (`instagram.com/p/CWvxAY7B0ci/` is media 2715604631366879010).
//! The ID is read as the 64 unsigned bits it is (IDs turn negative once 2^40
//! ms have passed since the epoch; see `layout`), so every bigint has a
//! shortcode of 1 to 11 characters and comes back from it unchanged.

pub const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The longest shortcode: 64 bits in 6-bit digits.
pub const MAX_LEN: usize = 11;

/// Why a text is not a shortcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShortcodeError {
    Empty,
    /// The byte at this position (0-based) is outside the alphabet.
    BadByte(usize, u8),
    /// The value does not fit in 64 bits.
    TooLarge,
}

/// Digit values by byte; 64 marks a byte outside the alphabet.
const DIGIT: [u8; 256] = {
    let mut t = [64u8; 256];
    let mut i = 0;
    while i < 64 {
        t[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// The shortcode of `id`: its bytes, and how many of the 11 are used
/// (from the end).
#[inline]
pub fn encode(id: i64) -> ([u8; MAX_LEN], usize) {
    let mut n = id as u64;
    let mut out = [0u8; MAX_LEN];
    let mut at = MAX_LEN;
    loop {
        at -= 1;
        out[at] = ALPHABET[(n & 63) as usize];
        n >>= 6;
        if n == 0 {
            break;
        }
    }
    (out, at)
}

/// The shortcode of `id` as a string.
pub fn to_string(id: i64) -> String {
    let (bytes, at) = encode(id);
    // The alphabet is ASCII.
    String::from_utf8(bytes[at..].to_vec()).expect("ASCII")
}

/// The ID a shortcode stands for. Leading `A`s (zero digits) are accepted,
/// as in a shortcode padded to a fixed width.
#[inline]
pub fn decode(code: &[u8]) -> Result<i64, ShortcodeError> {
    if code.is_empty() {
        return Err(ShortcodeError::Empty);
    }
    let mut n: u64 = 0;
    for (i, &b) in code.iter().enumerate() {
        let d = DIGIT[b as usize];
        if d == 64 {
            return Err(ShortcodeError::BadByte(i, b));
        }
        if n >> 58 != 0 {
            return Err(ShortcodeError::TooLarge);
        }
        n = (n << 6) | u64::from(d);
    }
    Ok(n as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Public pairs. The second is from a question whose asker ran the
    /// conversion on a real post's link; the others are bounds.
    #[test]
    fn known_pairs() {
        for (id, code) in [
            (2_715_604_631_366_879_010i64, "CWvxAY7B0ci"),
            // From the README of the npm package instagram-id-to-url-segment.
            (1_038_059_720_608_660_215, "5n7dDmhTr3"),
            // The pair issue 43 quotes, 2501040375429168306 and
            // CK1JqHqFVOy, does not agree with itself under any base-64
            // reading; each side's own conversion is this.
            (2_501_040_375_429_168_306, "CK1evhqXXyy"),
            (2_500_947_644_933_034_930, "CK1JqHqFVOy"),
            (0, "A"),
            (1, "B"),
            (63, "_"),
            (64, "BA"),
            (i64::MAX, "H__________"),
            (-1, "P__________"),
            (i64::MIN, "IAAAAAAAAAA"),
        ] {
            assert_eq!(to_string(id), code, "{id}");
            assert_eq!(decode(code.as_bytes()), Ok(id), "{code}");
        }
    }

    #[test]
    fn errors() {
        assert_eq!(decode(b""), Err(ShortcodeError::Empty));
        assert_eq!(decode(b"CK1J+q"), Err(ShortcodeError::BadByte(4, b'+')));
        assert_eq!(
            decode(b"ab=").unwrap_err(),
            ShortcodeError::BadByte(2, b'=')
        );
        assert_eq!(
            decode("é".as_bytes()),
            Err(ShortcodeError::BadByte(0, 0xc3))
        );
        // 64 bits end at "P__________"; one more is too large.
        assert_eq!(decode(b"QAAAAAAAAAA"), Err(ShortcodeError::TooLarge));
        assert_eq!(decode(b"BAAAAAAAAAAA"), Err(ShortcodeError::TooLarge));
        // Leading zero digits are only padding.
        assert_eq!(decode(b"AAAAAAAAAAAAAAB"), Ok(1));
        assert_eq!(decode(b"AP__________"), Ok(-1));
    }

    proptest! {
        #[test]
        fn every_id_round_trips(id in any::<i64>()) {
            let code = to_string(id);
            prop_assert!((1..=MAX_LEN).contains(&code.len()));
            prop_assert!(code == "A" || !code.starts_with('A'));
            prop_assert_eq!(decode(code.as_bytes()), Ok(id));
        }

        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..20)) {
            // What decodes is the canonical code, after its padding.
            if let Ok(id) = decode(&bytes) {
                let code = to_string(id);
                let trimmed = bytes.iter().position(|&b| b != b'A').map_or(&bytes[bytes.len() - 1..], |i| &bytes[i..]);
                prop_assert_eq!(code.as_bytes(), trimmed);
            }
        }
    }
}
