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
    // pgrx's wrapper has cleanup to run, which a longjmp would skip: the
    // boundary turns one into a Rust panic that unwinds it (the cost of the
    // wrapper, measured, includes this).
    // SAFETY: only next_id's plain frames are inside the boundary.
    unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| functions::next_id(shard, seq)) }
}

#[pg_extern(sql = false, immutable, strict, parallel_safe)]
fn bench_shard_id(id: i64) -> i32 {
    layout::decompose(id).shard
}
