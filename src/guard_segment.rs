//! How the sessions of a PostgreSQL 15 or 16 server, without preloading,
//! find one guard: the decisions, as pure Rust.
//!
//! There is no DSM registry before 17, so insta_id does what 17's registry
//! does: the first backend that needs the guard creates a dynamic shared
//! memory segment, pins it for the life of the server's run, and publishes
//! its handle in the data directory (`FILE_NAME`), under the file's lock;
//! every later backend reads the handle there, under the same lock, and
//! attaches. A handle is trusted only when the record names this run (the
//! postmaster's start time and its shared memory's DSM control handle, drawn
//! anew at every start and crash restart) and the segment it leads to starts
//! with a stamp of the same run and the record's random token: a file left by
//! an earlier run, a crash restart, a copy of the data directory (a base
//! backup, another cluster) or a handle now naming another segment never is.
//!
//! The record also carries the table's layout and size: a library of another
//! release (or build) finding this run's guard laid out otherwise refuses
//! rather than making a second guard beside it.
//!
//! The FFI is `guard_store::segment`.

// The pure half is compiled (and tested) on every version; only 15 and 16 use it.
#![cfg_attr(any(feature = "pg17", feature = "pg18"), allow(dead_code))]

/// The file, relative to the data directory. Never fsync'd: a record is only
/// ever trusted within the run that wrote it, which a machine crash ends.
pub const FILE_NAME: &str = "insta_id.guard";
pub const RECORD_LEN: usize = 56;
const MAGIC: [u8; 8] = *b"INSTAIDG";

/// One run of a server: from a start (or a crash restart, which builds new
/// shared memory) to its stop.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// The postmaster's start time (timestamptz).
    pub started: i64,
    /// Drawn anew whenever shared memory is built: at every start and crash
    /// restart.
    pub shmem: u64,
}

/// What the file says: the run's guard segment and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    pub run: Run,
    /// The segment's `dsm_handle`.
    pub handle: u32,
    /// The guard table's layout (`guard_store::LAYOUT`).
    pub layout: u32,
    /// The segment's size in bytes.
    pub size: u64,
    /// Drawn at random when the segment was made; also in its stamp.
    pub token: u64,
}

pub fn encode(p: Published) -> [u8; RECORD_LEN] {
    let mut rec = [0u8; RECORD_LEN];
    rec[..8].copy_from_slice(&MAGIC);
    rec[8..16].copy_from_slice(&p.run.started.to_le_bytes());
    rec[16..24].copy_from_slice(&p.run.shmem.to_le_bytes());
    rec[24..28].copy_from_slice(&p.handle.to_le_bytes());
    rec[28..32].copy_from_slice(&p.layout.to_le_bytes());
    rec[32..40].copy_from_slice(&p.size.to_le_bytes());
    rec[40..48].copy_from_slice(&p.token.to_le_bytes());
    let sum = crate::mark::checksum(&rec[..48]);
    rec[48..].copy_from_slice(&sum.to_le_bytes());
    rec
}

/// `None` for an empty, torn or foreign file: a new segment is then made.
pub fn decode(bytes: &[u8]) -> Option<Published> {
    if bytes.len() != RECORD_LEN || bytes[..8] != MAGIC {
        return None;
    }
    if u64::from_le_bytes(bytes[48..56].try_into().unwrap()) != crate::mark::checksum(&bytes[..48])
    {
        return None;
    }
    let word = |i: usize| <[u8; 8]>::try_from(&bytes[i..i + 8]).unwrap();
    let half = |i: usize| <[u8; 4]>::try_from(&bytes[i..i + 4]).unwrap();
    Some(Published {
        run: Run {
            started: i64::from_le_bytes(word(8)),
            shmem: u64::from_le_bytes(word(16)),
        },
        handle: u32::from_le_bytes(half(24)),
        layout: u32::from_le_bytes(half(28)),
        size: u64::from_le_bytes(word(32)),
        token: u64::from_le_bytes(word(40)),
    })
}

/// What a backend does with the file's record, in run `run`, wanting a
/// table of `layout` and `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Attach this run's segment (and check its stamp: `stamped`).
    Attach(Published),
    /// No record of this run: make the run's segment and publish it.
    Create,
    /// This run's guard is another release's or build's: refuse.
    Foreign(Published),
}

pub fn decide(rec: Option<Published>, run: Run, layout: u32, size: u64) -> Found {
    match rec {
        Some(p) if p.run == run && p.layout == layout && p.size == size => Found::Attach(p),
        Some(p) if p.run == run => Found::Foreign(p),
        _ => Found::Create,
    }
}

/// 0.9.0 and earlier guarded per session here, and 0.9.0's sessions of a
/// database share a record, `insta_id.sessions.<database oid>`, written by
/// the first of them in each run. A record of this run means sessions of
/// that library mint in this database beside this one: it must refuse.
/// (Earlier releases left no such trace: docs/upgrading.md.)
pub const PER_SESSION_FILE: &str = "insta_id.sessions";
pub const PER_SESSION_LEN: usize = 48;

/// The run a per-session record was written in; `None` for anything else.
pub fn per_session_run(bytes: &[u8]) -> Option<Run> {
    if bytes.len() != PER_SESSION_LEN || bytes[..8] != *b"INSTAIDT" {
        return None;
    }
    if u64::from_le_bytes(bytes[40..48].try_into().unwrap()) != crate::mark::checksum(&bytes[..40])
    {
        return None;
    }
    Some(Run {
        started: i64::from_le_bytes(bytes[8..16].try_into().unwrap()),
        shmem: u64::from_le_bytes(bytes[16..24].try_into().unwrap()),
    })
}

/// The first bytes of the segment, written before its handle is published.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub magic: [u8; 8],
    pub run: Run,
    pub layout: u32,
    pub _pad: u32,
    pub size: u64,
    pub token: u64,
}
/// Room kept for the stamp before the guard's table.
pub const STAMP: usize = 64;
const _: () = assert!(std::mem::size_of::<Stamp>() <= STAMP);

impl Stamp {
    pub fn of(p: Published) -> Stamp {
        Stamp {
            magic: MAGIC,
            run: p.run,
            layout: p.layout,
            _pad: 0,
            size: p.size,
            token: p.token,
        }
    }
}

/// Whether a segment of `mapped` bytes starting with `stamp` is the one `p`
/// publishes: a handle from another run or cluster, or reused by another
/// segment, is not.
pub fn stamped(stamp: &Stamp, mapped: usize, p: Published) -> bool {
    mapped as u64 >= p.size && *stamp == Stamp::of(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: Run = Run {
        started: 800_000_000_000_000,
        shmem: 0xdead_beef,
    };
    const P: Published = Published {
        run: RUN,
        handle: 12345,
        layout: 5,
        size: 3_000_000,
        token: 0x0123_4567_89ab_cdef,
    };

    #[test]
    fn records_round_trip_and_damage_reads_as_none() {
        assert_eq!(decode(&encode(P)), Some(P));
        for i in 0..RECORD_LEN {
            let mut bad = encode(P);
            bad[i] ^= 0x40;
            assert_eq!(decode(&bad), None, "flipped byte {i}");
        }
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&encode(P)[..RECORD_LEN - 1]), None);
    }

    #[test]
    fn only_this_runs_record_of_this_layout_is_attached() {
        assert_eq!(decide(Some(P), RUN, 5, P.size), Found::Attach(P));
        assert_eq!(decide(None, RUN, 5, P.size), Found::Create);
        // An earlier run, a crash restart (same start, new shared memory),
        // another cluster's copy: made anew.
        for run in [
            Run {
                started: RUN.started - 1,
                ..RUN
            },
            Run {
                shmem: RUN.shmem + 1,
                ..RUN
            },
        ] {
            assert_eq!(decide(Some(P), run, 5, P.size), Found::Create);
        }
        // This run's guard of another layout or size: never a second guard.
        assert_eq!(decide(Some(P), RUN, 6, P.size), Found::Foreign(P));
        assert_eq!(decide(Some(P), RUN, 5, P.size + 8), Found::Foreign(P));
    }

    #[test]
    fn a_per_session_record_tells_its_run() {
        // As 0.9.0 wrote it: magic, run, floor, clocks' gap, checksum.
        let mut rec = [0u8; PER_SESSION_LEN];
        rec[..8].copy_from_slice(b"INSTAIDT");
        rec[8..16].copy_from_slice(&RUN.started.to_le_bytes());
        rec[16..24].copy_from_slice(&RUN.shmem.to_le_bytes());
        rec[24..32].copy_from_slice(&1_700_000_000_000i64.to_le_bytes());
        rec[32..40].copy_from_slice(&(-5i64).to_le_bytes());
        let sum = crate::mark::checksum(&rec[..40]);
        rec[40..].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(per_session_run(&rec), Some(RUN));
        for i in 0..PER_SESSION_LEN {
            let mut bad = rec;
            bad[i] ^= 0x01;
            assert_eq!(per_session_run(&bad), None, "flipped byte {i}");
        }
        assert_eq!(per_session_run(&encode(P)), None);
        assert_eq!(per_session_run(&[]), None);
    }

    #[test]
    fn a_segment_is_trusted_only_with_its_records_stamp() {
        let stamp = Stamp::of(P);
        assert!(stamped(&stamp, P.size as usize, P));
        assert!(stamped(&stamp, P.size as usize + 4096, P));
        assert!(!stamped(&stamp, P.size as usize - 1, P));
        for other in [
            Published {
                token: P.token ^ 1,
                ..P
            },
            Published {
                run: Run { shmem: 1, ..RUN },
                ..P
            },
            Published { layout: 4, ..P },
            Published {
                size: P.size - 8,
                ..P
            },
        ] {
            assert!(!stamped(&stamp, P.size as usize, other), "{other:?}");
        }
        let zeroed = Stamp {
            magic: [0; 8],
            ..stamp
        };
        assert!(!stamped(&zeroed, P.size as usize, P));
    }
}
