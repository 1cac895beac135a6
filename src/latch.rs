//! Waiting as pg_sleep does: on the backend's latch, so that a cancel, a
//! statement timeout, a terminate or the postmaster's death ends the wait.

use pgrx::pg_sys;

/// Sleeps up to `ms` milliseconds (reported as `event` in
/// pg_stat_activity), then serves interrupts: a cancel raises its error here.
pub fn nap(ms: i64, event: u32) {
    // SAFETY: plain C calls on this backend's own latch.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms as std::ffi::c_long,
            event,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pgrx::check_for_interrupts!();
}
