//! The guard against duplicate IDs, as pure Rust (no PostgreSQL calls).
//!
//! Two IDs from one sequence collide exactly when they share the millisecond
//! and `nextval % 1024`. So for every sequence we remember the last
//! millisecond we issued in and which of the 1024 residues it has used. A
//! residue already used in that millisecond moves the ID to a later one; the
//! time field of a sequence never goes backwards, even when the clock does.
//!
//! A time field ahead of the clock is how a stepped-back clock or a restart
//! is survived, but it is also a debt every later ID of the sequence pays,
//! so it is bounded: the guard never admits an ID more than `max_lead_ms`
//! past the clock reading it was given (`Policy`). Beyond it `wait` waits
//! for the clock and `error` refuses. This holds for every sequence shape:
//! one that repeats a single residue (`INCREMENT BY 1024`, a short `CYCLE`)
//! moves a millisecond ahead on every call, and without the bound would
//! carry its IDs, and the durable mark after them, arbitrarily far ahead.
//!
//! The states live in a fixed-size, set-associative table: a key hashes to
//! one bucket of `WAYS` slots, each bucket has its own spin lock. A full
//! bucket evicts its oldest slot and keeps that slot's millisecond as the
//! bucket's floor, with the residues evicted slots used in it; a sequence
//! that comes (back) into the bucket starts from there, so eviction can never
//! cost a duplicate. It can cost no refusal either, and at most a wait for
//! the rest of a millisecond: what a state inherited from the floor is not
//! its own overflow (`SeqState::inherited`). The hash that picks a key's
//! bucket is keyed with random words drawn when the table is made (`Seed`),
//! so no role can aim its own sequences at another's bucket. The table lives
//! in shared memory, wherever `guard_store` finds it.
//!
//! Each slot also counts what the guard did for its sequence (`Stats`),
//! updated under the bucket's lock that admitting takes anyway; an evicted
//! slot's counts move to its bucket's `retired` sum, so server totals
//! survive eviction.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering};

/// Slots per bucket.
pub const WAYS: usize = 8;

/// How far behind the last millisecond used the clock must read before an
/// overflow borrows the next millisecond instead of waiting. Smaller lags are
/// a session's slightly stale clock reading racing another session (or a
/// small step back): waiting them out keeps IDs from running ahead of real
/// time; borrowing there would let concurrent sessions push the time field
/// ever further ahead.
pub const BORROW_AFTER_MS: i64 = 100;
const RESIDUE_WORDS: usize = 1024 / 64;

/// What to do when a residue is already used in the current millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Move to the next millisecond (waiting for the clock when it is there).
    Wait,
    /// Report it and issue nothing.
    Error,
}

/// How one call may be admitted: the overflow mode and how far ahead of the
/// clock reading an ID's millisecond may be (`insta_id.max_lead`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub overflow: Overflow,
    pub max_lead_ms: i64,
}

/// The guard's answer for one sequence value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Issue the ID in this millisecond (since the epoch).
    Issue(i64),
    /// The residue is taken up to this millisecond and the clock is not past
    /// it yet: read the clock until it is, then ask again.
    WaitPast(i64),
    /// The residue is taken and the mode is `Overflow::Error`.
    Full(i64),
    /// The ID would be in this millisecond, more than `max_lead_ms` ahead of
    /// the clock, and the mode is `Overflow::Error`.
    Ahead(i64),
}

/// Per-sequence state: the last millisecond used and its used residues.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct SeqState {
    last_ms: i64,
    used: [u64; RESIDUE_WORDS],
    /// `last_ms` and `used` came from a floor (an eviction, the durable
    /// mark), not from this sequence's own IDs: a residue found used there
    /// is not this sequence's overflow, and moves it on in either mode.
    inherited: bool,
}

impl SeqState {
    /// A state whose millisecond `floor_ms` counts as completely used.
    pub const fn full_at(floor_ms: i64) -> Self {
        Self::inheriting(floor_ms, [u64::MAX; RESIDUE_WORDS])
    }

    /// A state starting from a floor: `used` residues of `floor_ms` taken.
    const fn inheriting(floor_ms: i64, used: [u64; RESIDUE_WORDS]) -> Self {
        SeqState {
            last_ms: floor_ms,
            used,
            inherited: true,
        }
    }

    /// `admit_at` with a reading that cannot be stale (a test's clock).
    #[cfg(test)]
    pub fn admit(&mut self, residue: u16, now_ms: i64, policy: Policy) -> Admit {
        self.admit_at(residue, now_ms, policy, || now_ms)
    }

    /// Decides the millisecond for `residue` given the clock reading `now_ms`,
    /// taken before the lock. `clock` reads the clock again, at most once,
    /// only where a borrow or the lead's bound is decided: `now_ms` may be
    /// far behind the last millisecond because the clock stepped back, or
    /// only because the session stalled between its reading and the lock
    /// while others moved on (a busy machine deschedules a backend for
    /// 100 ms); a reading taken now tells them apart.
    pub fn admit_at(
        &mut self,
        residue: u16,
        now_ms: i64,
        policy: Policy,
        clock: impl FnOnce() -> i64,
    ) -> Admit {
        debug_assert!(residue < 1024);
        // The clock read again at most once, and only where `now_ms` decides.
        let mut clock = Some(clock);
        let mut fresh = |stale: i64| clock.take().map_or(stale, |read| read());
        if now_ms > self.last_ms {
            self.last_ms = now_ms;
            self.used = [0; RESIDUE_WORDS];
            self.inherited = false;
        }
        // Otherwise the clock is in the last millisecond or behind it (stepped
        // back, or a floor ahead of it): keep issuing from the last millisecond.
        let (word, bit) = ((residue / 64) as usize, 1u64 << (residue % 64));
        let (mut ms, mut now_ms) = (self.last_ms, now_ms);
        if self.used[word] & bit != 0 {
            // Fullness inherited from a floor is not this sequence's overflow:
            // move on as `wait` would (the lead bound below still applies).
            let overflow = if self.inherited {
                Overflow::Wait
            } else {
                policy.overflow
            };
            match overflow {
                Overflow::Error => return Admit::Full(ms),
                Overflow::Wait if now_ms > ms - BORROW_AFTER_MS => return Admit::WaitPast(ms),
                Overflow::Wait => {
                    // Every millisecond up to `ms` came from a reading taken
                    // before this one, so a clock that did not step back now
                    // reads at least `ms`: then wait, never borrow ahead of it.
                    now_ms = fresh(now_ms);
                    if now_ms > ms - BORROW_AFTER_MS {
                        return Admit::WaitPast(ms);
                    }
                    // The clock is well behind a millisecond already used:
                    // waiting for it could take as long as the step, so
                    // borrow the next millisecond instead (as Sonyflake
                    // does), within the lead.
                    ms += 1;
                }
            }
        }
        if ms.saturating_sub(now_ms) > policy.max_lead_ms {
            // (A stale reading is not a lead: read again.)
            now_ms = fresh(now_ms);
        }
        if ms.saturating_sub(now_ms) > policy.max_lead_ms {
            // Nothing changes: the call comes back once the clock allows it.
            return match policy.overflow {
                Overflow::Wait => Admit::WaitPast(ms - policy.max_lead_ms - 1),
                Overflow::Error => Admit::Ahead(ms),
            };
        }
        if ms != self.last_ms {
            self.last_ms = ms;
            self.used = [0; RESIDUE_WORDS];
            self.inherited = false;
        }
        self.used[word] |= bit;
        Admit::Issue(ms)
    }
}

/// What the guard did for one sequence, or summed over several.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Stats {
    /// IDs admitted.
    pub issued: u64,
    /// Times a call found its residue used and waited for the next millisecond.
    pub waits: u64,
    /// Microseconds spent in those waits.
    pub wait_us: u64,
    /// Milliseconds moved ahead of a clock that stepped back (borrowed).
    pub borrowed_ms: u64,
    /// Calls refused with 54000 (insta_id.on_overflow = 'error'): the
    /// millisecond was full, or the ID would have run past insta_id.max_lead.
    pub refused: u64,
    /// Slots evicted to make room for another sequence (bucket sums only).
    pub evictions: u64,
}

impl Stats {
    pub const ZERO: Stats = Stats {
        issued: 0,
        waits: 0,
        wait_us: 0,
        borrowed_ms: 0,
        refused: 0,
        evictions: 0,
    };

    fn add(&mut self, o: &Stats) {
        self.issued += o.issued;
        self.waits += o.waits;
        self.wait_us += o.wait_us;
        self.borrowed_ms += o.borrowed_ms;
        self.refused += o.refused;
        self.evictions += o.evictions;
    }

    /// Counts the outcome of one admit: `before` was the state's last
    /// millisecond, `now_ms` the clock reading, `waited_us` the wait that
    /// preceded this call (0 if none).
    #[inline(always)]
    fn count(&mut self, outcome: Admit, before: i64, now_ms: i64, waited_us: u64) {
        self.wait_us += waited_us;
        match outcome {
            // Above both the clock and the last millisecond: only a borrow
            // moves there.
            Admit::Issue(ms) => {
                self.issued += 1;
                self.borrowed_ms += (ms > before.max(now_ms)) as u64;
            }
            Admit::WaitPast(_) => self.waits += 1,
            Admit::Full(_) | Admit::Ahead(_) => self.refused += 1,
        }
    }
}

/// One slot's sequence and what the guard knows and counted of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqStats {
    pub key: SeqKey,
    /// The last millisecond (since 1970) the sequence issued in.
    pub last_ms: i64,
    pub stats: Stats,
}

/// Identifies a sequence server-wide: database OID and relation OID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct SeqKey {
    pub database: u32,
    pub relation: u32,
}

impl SeqKey {
    fn is_empty(&self) -> bool {
        self.relation == 0
    }
}

/// A bucket of `WAYS` sequences behind one spin lock.
#[repr(C)]
pub struct Bucket {
    lock: AtomicU32,
    slots: UnsafeCell<Slots>,
}

// SAFETY: `slots` is only touched while `lock` is held (see Table::admit).
unsafe impl Sync for Bucket {}

#[repr(C)]
struct Slots {
    /// Highest millisecond of any state evicted from this bucket (or of the
    /// durable mark), and the residues used in it by the evicted states.
    floor_ms: i64,
    floor_used: [u64; RESIDUE_WORDS],
    // Keys apart from states: a lookup reads one cache line of keys.
    keys: [SeqKey; WAYS],
    states: [SeqState; WAYS],
    stats: [Stats; WAYS],
    /// The counts of evicted slots, and the number of evictions.
    retired: Stats,
}

impl Bucket {
    pub const fn new() -> Self {
        Bucket {
            lock: AtomicU32::new(0),
            slots: UnsafeCell::new(Slots {
                floor_ms: i64::MIN,
                floor_used: [0; RESIDUE_WORDS],
                keys: [SeqKey {
                    database: 0,
                    relation: 0,
                }; WAYS],
                states: [SeqState::full_at(i64::MIN); WAYS],
                stats: [Stats::ZERO; WAYS],
                retired: Stats::ZERO,
            }),
        }
    }
}

impl Slots {
    /// The slot of `key`, claiming one (empty, or else the oldest) for it.
    #[inline]
    fn slot_for(&mut self, key: SeqKey) -> usize {
        if let Some(i) = self.keys.iter().position(|k| *k == key) {
            return i;
        }
        let victim = match self.keys.iter().position(SeqKey::is_empty) {
            Some(i) => i,
            None => {
                let i = (0..WAYS)
                    .min_by_key(|&i| self.states[i].last_ms)
                    .unwrap_or(0);
                self.fold_into_floor(self.states[i].last_ms, self.states[i].used);
                let evicted = std::mem::take(&mut self.stats[i]);
                self.retired.add(&evicted);
                self.retired.evictions += 1;
                i
            }
        };
        // Every millisecond below the floor counts as used, and in the floor's
        // millisecond what evicted states used there, so a key that was
        // evicted before can never reissue what it issued then; residues no
        // evicted state used stay free.
        self.keys[victim] = key;
        self.states[victim] = SeqState::inheriting(self.floor_ms, self.floor_used);
        victim
    }

    /// Keeps `used` residues of millisecond `ms` in the floor.
    fn fold_into_floor(&mut self, ms: i64, used: [u64; RESIDUE_WORDS]) {
        if ms > self.floor_ms {
            (self.floor_ms, self.floor_used) = (ms, used);
        } else if ms == self.floor_ms {
            for (f, u) in self.floor_used.iter_mut().zip(used) {
                *f |= u;
            }
        }
    }

    /// The sequences in this bucket with what the guard knows of them.
    fn live(&self) -> impl Iterator<Item = SeqStats> + '_ {
        (0..WAYS)
            .filter(|&i| !self.keys[i].is_empty())
            .map(|i| SeqStats {
                key: self.keys[i],
                last_ms: self.states[i].last_ms,
                stats: self.stats[i],
            })
    }

    /// Counts every millisecond up to `ms` as used, for every sequence.
    fn raise_floor(&mut self, ms: i64) {
        self.fold_into_floor(ms, [u64::MAX; RESIDUE_WORDS]);
        for (key, state) in self.keys.iter().zip(self.states.iter_mut()) {
            if !key.is_empty() && state.last_ms < ms {
                *state = SeqState::full_at(ms);
            }
        }
    }
}

impl Default for Bucket {
    fn default() -> Self {
        Self::new()
    }
}

/// The key of the hash that picks a sequence's bucket: multiply-shift with
/// a random odd multiplier (a universal family), after a random xor. Drawn
/// when the table is made, so that which sequences share a bucket cannot be
/// known, or chosen, from OIDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Seed {
    xor: u64,
    mul: u64,
}

impl Seed {
    /// Fibonacci hashing, for tests that need a known placement.
    pub const FIXED: Seed = Seed {
        xor: 0,
        mul: 0x9E37_79B9_7F4A_7C15,
    };

    /// A seed from 16 random bytes.
    pub fn from_bytes(b: [u8; 16]) -> Self {
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        Seed {
            xor: word(0),
            mul: word(8) | 1,
        }
    }
}

/// A view of `buckets` (in shared memory or in a session's own memory).
#[derive(Clone, Copy)]
pub struct Table<'a> {
    buckets: &'a [Bucket],
    seed: Seed,
}

impl<'a> Table<'a> {
    /// `buckets` must not be empty; placed by `Seed::FIXED`.
    pub fn new(buckets: &'a [Bucket]) -> Self {
        Self::seeded(buckets, Seed::FIXED)
    }

    /// `buckets` placed by `seed` (every user of one table passes the same).
    pub fn seeded(buckets: &'a [Bucket], seed: Seed) -> Self {
        assert!(!buckets.is_empty());
        Table { buckets, seed }
    }

    fn bucket_of(&self, key: SeqKey) -> &'a Bucket {
        let k = ((key.database as u64) << 32) | key.relation as u64;
        let h = (k ^ self.seed.xor).wrapping_mul(self.seed.mul);
        &self.buckets[((h >> 32) % self.buckets.len() as u64) as usize]
    }

    /// Admits `residue` for `key` at clock reading `now_ms` (a test's clock,
    /// never stale), under the lock.
    #[cfg(test)]
    pub fn admit(&self, key: SeqKey, residue: u16, now_ms: i64, policy: Policy) -> Admit {
        self.admit_counted(key, residue, now_ms, policy, None, || now_ms)
    }

    /// `SeqState::admit_at` under the lock, also counting the outcome in the
    /// sequence's `Stats` when `waited_us` (the wait before this call, 0 if
    /// none) is given.
    #[inline]
    pub fn admit_counted(
        &self,
        key: SeqKey,
        residue: u16,
        now_ms: i64,
        policy: Policy,
        waited_us: Option<u64>,
        clock: impl FnOnce() -> i64,
    ) -> Admit {
        locked(self.bucket_of(key), |slots| {
            let i = slots.slot_for(key);
            let before = slots.states[i].last_ms;
            let outcome = slots.states[i].admit_at(residue, now_ms, policy, clock);
            if let Some(waited_us) = waited_us {
                slots.stats[i].count(outcome, before, now_ms, waited_us);
            }
            outcome
        })
    }

    /// Every sequence in the table with its counts, in bucket order. Each
    /// bucket's live slots are copied to the stack under its lock, and only
    /// then into the vector: growing it (a copy of everything so far, or an
    /// allocation that fails) never happens while other sessions' next_id
    /// spin on that bucket.
    pub fn sequences(&self) -> Vec<SeqStats> {
        let mut out = Vec::new();
        for bucket in self.buckets {
            let mut copy = [None; WAYS];
            locked(bucket, |slots| {
                for (to, seq) in copy.iter_mut().zip(slots.live()) {
                    *to = Some(seq);
                }
            });
            out.extend(copy.into_iter().flatten());
        }
        out
    }

    /// The counts summed over the whole table, evicted sequences included,
    /// and the number of sequences in it now.
    pub fn totals(&self) -> (Stats, usize) {
        let (mut sum, mut tracked) = (Stats::ZERO, 0);
        for bucket in self.buckets {
            locked(bucket, |slots| {
                sum.add(&slots.retired);
                for seq in slots.live() {
                    sum.add(&seq.stats);
                    tracked += 1;
                }
            });
        }
        (sum, tracked)
    }

    /// Zeroes every count; what the guard remembers to prevent duplicates
    /// stays.
    pub fn reset_stats(&self) {
        for bucket in self.buckets {
            locked(bucket, |slots| {
                slots.stats = [Stats::ZERO; WAYS];
                slots.retired = Stats::ZERO;
            });
        }
    }

    /// The number of sequences the table holds at most.
    pub fn capacity(&self) -> usize {
        self.buckets.len() * WAYS
    }

    /// Counts every millisecond up to `ms` as used by every sequence, known
    /// or not: after a restart, the durable high-water mark (see `mark`).
    pub fn raise_floor(&self, ms: i64) {
        for bucket in self.buckets {
            locked(bucket, |slots| slots.raise_floor(ms));
        }
    }
}

/// Runs `f` on `bucket`'s slots under its spin lock.
#[inline(always)]
fn locked<R>(bucket: &Bucket, f: impl FnOnce(&mut Slots) -> R) -> R {
    let _guard = SpinGuard::lock(&bucket.lock);
    // SAFETY: the bucket's spin lock is held, so no other process or thread
    // touches this bucket's slots until `_guard` drops.
    f(unsafe { &mut *bucket.slots.get() })
}

/// A test-and-test-and-set spin lock on a word that may live in shared memory.
/// Held only for a few dozen instructions that cannot fail or call out but
/// to read the clock (gettimeofday), and that only where a borrow is decided.
struct SpinGuard<'a>(&'a AtomicU32);

impl<'a> SpinGuard<'a> {
    fn lock(word: &'a AtomicU32) -> Self {
        let mut spins = 0u32;
        loop {
            if word
                .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return SpinGuard(word);
            }
            while word.load(Ordering::Relaxed) != 0 {
                spins += 1;
                if spins.is_multiple_of(1000) {
                    // The holder may have been descheduled: give it the core.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// The default bound (insta_id.max_lead), under which most tests run.
    const LEAD: i64 = 1_000;
    const WAIT: Policy = Policy {
        overflow: Overflow::Wait,
        max_lead_ms: LEAD,
    };
    const ERROR: Policy = Policy {
        overflow: Overflow::Error,
        max_lead_ms: LEAD,
    };
    /// For steps back longer than the default bound.
    const WIDE: Policy = Policy {
        overflow: Overflow::Wait,
        max_lead_ms: 10_000,
    };

    const K: SeqKey = SeqKey {
        database: 1,
        relation: 16384,
    };

    #[test]
    fn first_1024_values_share_the_millisecond() {
        let mut s = SeqState::full_at(i64::MIN);
        for v in 0..1024u16 {
            assert_eq!(s.admit(v, 100, WAIT), Admit::Issue(100));
        }
        // The 1025th value wraps to residue 0: the original would repeat.
        assert_eq!(s.admit(0, 100, WAIT), Admit::WaitPast(100));
        assert_eq!(s.admit(0, 100, ERROR), Admit::Full(100));
        // Once the clock moves on, the residue is free again.
        assert_eq!(s.admit(0, 101, WAIT), Admit::Issue(101));
    }

    #[test]
    fn clock_step_back_keeps_the_last_millisecond_then_borrows() {
        // Under a bound wider than the step (insta_id.max_lead = 10 s).
        let mut s = SeqState::full_at(i64::MIN);
        assert_eq!(s.admit(7, 5_000, WIDE), Admit::Issue(5_000));
        // The clock steps back five seconds: stay on 5000.
        assert_eq!(s.admit(8, 0, WIDE), Admit::Issue(5_000));
        // A repeated residue while behind borrows 5001 instead of waiting 5 s.
        assert_eq!(s.admit(7, 1, WIDE), Admit::Issue(5_001));
        assert_eq!(s.admit(7, 2, ERROR), Admit::Full(5_001));
        // When the clock catches up, real time again.
        assert_eq!(s.admit(7, 6_000, WIDE), Admit::Issue(6_000));
    }

    #[test]
    fn never_further_ahead_of_the_clock_than_the_bound() {
        let mut s = SeqState::full_at(i64::MIN);
        assert_eq!(s.admit(7, 5_000, WAIT), Admit::Issue(5_000));
        // The clock steps back 5 s, past the 1 s bound: wait until it is
        // within 1 s of ms 5000 (error mode refuses), then issue there.
        assert_eq!(s.admit(8, 0, WAIT), Admit::WaitPast(5_000 - LEAD - 1));
        assert_eq!(s.admit(8, 0, ERROR), Admit::Ahead(5_000));
        assert_eq!(s.admit(8, 5_000 - LEAD, WAIT), Admit::Issue(5_000));
        // Borrowing 5001 would be 1001 ms ahead: wait one more millisecond.
        assert_eq!(
            s.admit(7, 5_000 - LEAD, WAIT),
            Admit::WaitPast(5_001 - LEAD - 1)
        );
        assert_eq!(s.admit(7, 5_001 - LEAD, WAIT), Admit::Issue(5_001));
    }

    #[test]
    fn one_residue_repeated_cannot_carry_a_sequence_away() {
        // INCREMENT BY 1024 (or a CYCLE of at most 1024 values) repeats one
        // residue: with a floor 200 ms ahead (a restart, a raised mark),
        // every call borrows a millisecond, until the bound stops it.
        let mut s = SeqState::full_at(200);
        let mut last = 0;
        for call in 0.. {
            match s.admit(5, 0, WAIT) {
                Admit::Issue(ms) => last = ms,
                Admit::WaitPast(until) => {
                    assert_eq!((call, last, until), (LEAD as usize - 200, LEAD, 0));
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        // The same with a moving clock: one ID per millisecond, at most LEAD ahead.
        for now in 1..3_000 {
            let mut t = now;
            let ms = loop {
                match s.admit(5, t, WAIT) {
                    Admit::Issue(ms) => break ms,
                    Admit::WaitPast(until) => t = until + 1,
                    other => panic!("{other:?}"),
                }
            };
            assert!(ms - t <= LEAD && ms > last, "{ms} at clock {t}");
            last = ms;
        }
    }

    #[test]
    fn a_slightly_stale_reading_waits_instead_of_running_ahead() {
        let mut s = SeqState::full_at(i64::MIN);
        for v in 0..1024u16 {
            assert_eq!(s.admit(v, 100, WAIT), Admit::Issue(100));
        }
        // Another session read the clock just before ms 100 began.
        assert_eq!(s.admit(0, 99, WAIT), Admit::WaitPast(100));
        assert_eq!(
            s.admit(0, 100 - BORROW_AFTER_MS + 1, WAIT),
            Admit::WaitPast(100)
        );
        // Far enough behind, it is a step back: borrow.
        assert_eq!(s.admit(0, 100 - BORROW_AFTER_MS, WAIT), Admit::Issue(101));
    }

    #[test]
    fn a_reading_a_stall_made_stale_waits_instead_of_borrowing() {
        let mut s = SeqState::full_at(i64::MIN);
        for v in 0..1024u16 {
            assert_eq!(s.admit(v, 100, WAIT), Admit::Issue(100));
        }
        // A session read ms 0, then stood descheduled while others filled ms
        // 100: the clock read again under the lock says 100, so it waits (a
        // borrow would issue ms 101 while the clock is still in 100).
        let mut reread = 0;
        let at_100 = || {
            reread += 1;
            100
        };
        assert_eq!(s.admit_at(0, 0, WAIT, at_100), Admit::WaitPast(100));
        assert_eq!(reread, 1);
        // Read again past 100: it would start ms 101 on its own next call.
        assert_eq!(s.admit_at(0, 0, WAIT, || 101), Admit::WaitPast(100));
        // The clock really stepped back: the reading under the lock agrees.
        assert_eq!(s.admit_at(0, 0, WAIT, || 0), Admit::Issue(101));
        // A reading a stall made older than the lead's bound is read again
        // before the bound refuses (error mode) or waits.
        let mut far = SeqState::full_at(i64::MIN);
        assert_eq!(far.admit(7, 5_000, WAIT), Admit::Issue(5_000));
        assert_eq!(
            far.admit_at(8, 5_000 - LEAD - 500, ERROR, || 5_000),
            Admit::Issue(5_000)
        );
        assert_eq!(
            far.admit_at(9, 5_000 - LEAD - 500, ERROR, || 5_000 - LEAD - 500),
            Admit::Ahead(5_000)
        );
        // No re-read where nothing is borrowed.
        assert_eq!(
            s.admit_at(1, 0, WAIT, || unreachable!("not a borrow")),
            Admit::Issue(101)
        );
    }

    #[test]
    fn eviction_never_reissues() {
        let buckets = [Bucket::new()];
        let table = Table::new(&buckets);
        let first = table.admit(K, 3, 50, WAIT);
        assert_eq!(first, Admit::Issue(50));
        // Fill the bucket's other slots in the same millisecond.
        let other = |r: u32| SeqKey {
            database: 1,
            relation: 20_000 + r,
        };
        for r in 1..WAYS as u32 {
            assert_eq!(table.admit(other(r), 3, 50, WAIT), Admit::Issue(50));
        }
        // One more sequence evicts K (the oldest); the bucket's floor is now
        // ms 50 with residue 3 used, so the newcomer, knowing nothing of ms
        // 50, takes residue 3 only after it (a residue nobody used, at once).
        assert_eq!(table.admit(other(99), 3, 50, WAIT), Admit::WaitPast(50));
        assert_eq!(table.admit(other(99), 4, 50, WAIT), Admit::Issue(50));
        assert_eq!(table.admit(other(99), 3, 51, WAIT), Admit::Issue(51));
        // K comes back: in ms 50 it must not get residue 3 again.
        assert_eq!(table.admit(K, 3, 50, WAIT), Admit::WaitPast(50));
        assert_eq!(table.admit(K, 3, 51, WAIT), Admit::Issue(51));
    }

    #[test]
    fn eviction_is_never_reported_as_the_callers_overflow() {
        // A victim's sequence shares a bucket with another role's eight,
        // which are called in turn so that every call evicts one: the
        // attack of issue 23, aimed (here) by knowing the placement.
        let buckets = [Bucket::new()];
        let table = Table::new(&buckets);
        let attacker = |r: u32| SeqKey {
            database: 2,
            relation: 30_000 + r,
        };
        let (mut waits, mut issued) = (0, 0);
        for ms in 100..200i64 {
            for v in 0..20u16 {
                // The attacker's values use residues 0..79 of every ms.
                for r in 0..=WAYS as u32 {
                    assert!(matches!(
                        table.admit(attacker(r), (v * 4 + r as u16 % 4) % 80, ms, ERROR),
                        Admit::Issue(_) | Admit::WaitPast(_)
                    ));
                }
                // The victim, in error mode: never 54000. Its own values
                // use other residues than the attacker's: no wait either.
                match table.admit(K, 100 + (ms as u16 % 9) * 20 + v, ms, ERROR) {
                    Admit::Issue(got) => {
                        assert_eq!(got, ms);
                        issued += 1
                    }
                    Admit::WaitPast(_) => waits += 1,
                    other => panic!("the victim was refused: {other:?}"),
                }
            }
        }
        assert_eq!((issued, waits), (2000, 0));
    }

    #[test]
    fn a_raised_floor_counts_every_earlier_millisecond_as_used() {
        let buckets = [Bucket::new(), Bucket::new()];
        let table = Table::new(&buckets);
        assert_eq!(table.admit(K, 3, 50, WAIT), Admit::Issue(50));
        table.raise_floor(2_000);
        // A known sequence and an unknown one both continue above the floor:
        // the clock is far behind it, so they borrow ms 2001 (within a bound
        // of 10 s; the default 1 s makes them wait until the clock is at 1001).
        assert_eq!(table.admit(K, 3, 60, WIDE), Admit::Issue(2_001));
        let other = SeqKey {
            database: 2,
            relation: 16_384,
        };
        assert_eq!(table.admit(other, 0, 60, WAIT), Admit::WaitPast(1_000));
        assert_eq!(table.admit(other, 0, 1_001, WAIT), Admit::Issue(2_001));
        // Error mode: what the floor holds is not this sequence's overflow;
        // it refuses only an ID past the bound on the lead.
        let third = SeqKey {
            database: 3,
            relation: 16_384,
        };
        assert_eq!(table.admit(third, 0, 60, ERROR), Admit::Ahead(2_001));
        assert_eq!(table.admit(third, 0, 1_950, ERROR), Admit::WaitPast(2_000));
        assert_eq!(table.admit(third, 0, 2_001, ERROR), Admit::Issue(2_001));
        // Once the clock passes it, real time again.
        assert_eq!(table.admit(other, 1, 2_500, WAIT), Admit::Issue(2_500));
        // A floor below what a sequence used changes nothing for it.
        table.raise_floor(10);
        assert_eq!(table.admit(K, 4, 2_500, WAIT), Admit::Issue(2_500));
    }

    #[test]
    fn counts_what_the_guard_did() {
        let buckets = [Bucket::new()];
        let table = Table::new(&buckets);
        for v in 0..1024u16 {
            table.admit_counted(K, v, 100, WAIT, Some(0), || 100);
        }
        // The 1025th waits, then is issued after a 700 µs wait.
        assert_eq!(
            table.admit_counted(K, 0, 100, WAIT, Some(0), || 100),
            Admit::WaitPast(100)
        );
        assert_eq!(
            table.admit_counted(K, 0, 101, WAIT, Some(700), || 101),
            Admit::Issue(101)
        );
        // Error mode refuses and counts it.
        assert_eq!(
            table.admit_counted(K, 0, 101, ERROR, Some(0), || 101),
            Admit::Full(101)
        );
        // The clock steps back 5 s: the repeated residue borrows ms 102, the
        // new one stays on 102 without borrowing again.
        assert_eq!(
            table.admit_counted(K, 0, -4_000, WIDE, Some(0), || -4_000),
            Admit::Issue(102)
        );
        assert_eq!(
            table.admit_counted(K, 1, -4_000, WIDE, Some(0), || -4_000),
            Admit::Issue(102)
        );
        // Uncounted admits leave the counts alone.
        table.admit(K, 2, 102, WAIT);
        let expect = Stats {
            issued: 1027,
            waits: 1,
            wait_us: 700,
            borrowed_ms: 1,
            refused: 1,
            evictions: 0,
        };
        let seqs = table.sequences();
        assert_eq!(
            seqs,
            vec![SeqStats {
                key: K,
                last_ms: 102,
                stats: expect
            }]
        );
        assert_eq!(table.totals(), (expect, 1));
        assert_eq!(table.capacity(), WAYS);
    }

    #[test]
    fn totals_survive_eviction_and_reset_keeps_the_guard() {
        let buckets = [Bucket::new()];
        let table = Table::new(&buckets);
        let key = |r: u32| SeqKey {
            database: 1,
            relation: 20_000 + r,
        };
        // WAYS + 3 sequences, 2 IDs each, in one bucket: 3 evictions.
        for r in 0..WAYS as u32 + 3 {
            for v in 0..2 {
                table.admit_counted(key(r), v, 10 + r as i64, WAIT, Some(0), || 10 + r as i64);
            }
        }
        let (totals, tracked) = table.totals();
        assert_eq!(
            (totals.issued, totals.evictions, tracked),
            (2 * (WAYS as u64 + 3), 3, WAYS)
        );
        let live: u64 = table.sequences().iter().map(|s| s.stats.issued).sum();
        assert_eq!(live, 2 * WAYS as u64);
        table.reset_stats();
        assert_eq!(table.totals(), (Stats::ZERO, WAYS));
        // The guard itself is untouched: the last sequence's residue 1 in
        // its millisecond is still taken.
        let last = key(WAYS as u32 + 2);
        let ms = 10 + WAYS as i64 + 2;
        assert_eq!(
            table.admit_counted(last, 1, ms, ERROR, Some(0), || ms),
            Admit::Full(ms)
        );
    }

    /// Simulated sessions over one table: any interleaving of sequence values
    /// and clock readings (forwards and backwards), from any floor, yields
    /// distinct (ms, residue) pairs per sequence, per sequence the issued
    /// millisecond never decreases, and no ID is further ahead of the clock
    /// reading it was admitted at than the bound.
    fn run(
        ops: Vec<(u8, u16, i64)>,
        n_buckets: usize,
        policy: Policy,
        floor: i64,
    ) -> Result<(), TestCaseError> {
        let buckets: Vec<Bucket> = (0..n_buckets).map(|_| Bucket::new()).collect();
        let table = Table::new(&buckets);
        table.raise_floor(floor);
        let mut issued: HashSet<(u32, i64, u16)> = HashSet::new();
        let mut last: std::collections::HashMap<u32, i64> = Default::default();
        for (seq, residue, clock) in ops {
            let key = SeqKey {
                database: 1,
                relation: 16_384 + seq as u32,
            };
            let mut now = clock;
            let ms = loop {
                match table.admit(key, residue, now, policy) {
                    Admit::Issue(ms) => break ms,
                    Admit::WaitPast(ms) => now = now.max(ms + 1),
                    other => unreachable!("{other:?}"),
                }
            };
            prop_assert!(ms - now <= policy.max_lead_ms, "{} ms ahead", ms - now);
            prop_assert!(issued.insert((key.relation, ms, residue)), "duplicate");
            let prev = last.insert(key.relation, ms).unwrap_or(i64::MIN);
            prop_assert!(ms >= prev, "time went back");
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn never_a_duplicate(ops in proptest::collection::vec((0u8..40, 0u16..1024, 0i64..20), 1..3000)) {
            // 40 sequences in 2 buckets: plenty of evictions.
            run(ops, 2, WAIT, i64::MIN)?;
        }

        #[test]
        fn never_a_duplicate_with_few_residues(
            ops in proptest::collection::vec((0u8..3, 0u16..4, 0i64..5), 1..500),
            lead in 0i64..300,
            floor in -10i64..400,
        ) {
            // Residues repeat at once (a sequence stepping by 1024 has one),
            // the floor is ahead of the clock or not, the bound tight or wide.
            let policy = Policy { overflow: Overflow::Wait, max_lead_ms: lead };
            run(ops, 1, policy, floor)?;
        }
    }

    #[test]
    fn no_id_ahead_of_the_real_clock_when_a_thread_stalls_after_its_reading() {
        // Three threads fill the milliseconds of one sequence from the real
        // (monotonic) clock; one of them now and then sleeps past
        // BORROW_AFTER_MS between reading it and admitting, as a descheduled
        // backend does. No ID may be ahead of the clock read after it.
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        use std::time::{Duration, Instant};
        let start = Instant::now();
        let clock = move || start.elapsed().as_millis() as i64;
        let buckets: Arc<Vec<Bucket>> = Arc::new(vec![Bucket::new()]);
        let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..3)
            .map(|t| {
                let (buckets, next, done) = (buckets.clone(), next.clone(), done.clone());
                std::thread::spawn(move || {
                    let table = Table::new(&buckets);
                    let (mut ahead, mut calls) = (Vec::new(), 0u64);
                    while !done.load(Ordering::Relaxed) {
                        let v = next.fetch_add(1, Ordering::SeqCst);
                        let mut now = clock();
                        calls += 1;
                        if t == 0 && calls % 20_000 == 0 {
                            std::thread::sleep(Duration::from_millis(BORROW_AFTER_MS as u64 + 10));
                            done.store(calls == 100_000, Ordering::Relaxed);
                        }
                        let ms = loop {
                            match table.admit_counted(K, (v % 1024) as u16, now, WAIT, None, clock)
                            {
                                Admit::Issue(ms) => break ms,
                                Admit::WaitPast(ms) => {
                                    while clock() <= ms {
                                        std::hint::spin_loop();
                                    }
                                    now = clock();
                                }
                                other => unreachable!("{other:?}"),
                            }
                        };
                        let after = clock();
                        if ms > after {
                            ahead.push((ms, after));
                        }
                    }
                    ahead
                })
            })
            .collect();
        for h in handles {
            assert_eq!(
                h.join().unwrap(),
                vec![],
                "IDs ahead of the clock (ms, clock)"
            );
        }
    }

    #[test]
    fn threads_hammering_one_sequence_get_distinct_pairs() {
        use std::sync::Arc;
        let buckets: Arc<Vec<Bucket>> = Arc::new((0..4).map(|_| Bucket::new()).collect());
        let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (buckets, next) = (buckets.clone(), next.clone());
                std::thread::spawn(move || {
                    let table = Table::new(&buckets);
                    let mut out = Vec::new();
                    for i in 0..20_000u64 {
                        let v = next.fetch_add(1, Ordering::SeqCst);
                        let residue = (v % 1024) as u16;
                        let mut now = (i / 3000) as i64; // a slow clock
                        loop {
                            match table.admit(K, residue, now, WAIT) {
                                Admit::Issue(ms) => {
                                    out.push((ms, residue));
                                    break;
                                }
                                Admit::WaitPast(ms) => now = now.max(ms + 1),
                                other => unreachable!("{other:?}"),
                            }
                        }
                    }
                    out
                })
            })
            .collect();
        let mut all = HashSet::new();
        for h in handles {
            for pair in h.join().unwrap() {
                assert!(all.insert(pair), "duplicate {pair:?}");
            }
        }
        assert_eq!(all.len(), 80_000);
    }
}
