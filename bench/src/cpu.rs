//! What the harness's processes cost in CPU time, from `getrusage`.

use std::time::Duration;

/// CPU time (user + system) used by this process (`who` = RUSAGE_SELF) or by its
/// waited-for children (RUSAGE_CHILDREN).
pub(crate) fn cpu_time(who: libc::c_int) -> Duration {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is valid and writable; `who` is RUSAGE_SELF or RUSAGE_CHILDREN.
    unsafe { libc::getrusage(who, &mut usage) };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}
