//! next_id and a decoder written with `#[pg_extern]`, for `make bench` only.
//!
//! They are not part of the extension (`sql = false`): bench/setup.sql
//! declares them as C functions, so the benchmark measures what pgrx's
//! generated wrapper costs against the hand-written fmgr entry points of
//! `functions`, with the same body. BENCHMARKS.md ("How the functions are
//! written") has the figures behind keeping fmgr.

use crate::{functions, layout};
use pgrx::prelude::*;

#[pg_extern(sql = false, volatile, strict, parallel_unsafe)]
fn bench_next_id(shard: i32, seq: pg_sys::Oid) -> i64 {
    functions::next_id(shard, seq)
}

#[pg_extern(sql = false, immutable, strict, parallel_safe)]
fn bench_shard_id(id: i64) -> i32 {
    layout::decompose(id).shard
}
