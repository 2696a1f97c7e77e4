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

/// Context switches of this process so far (`getrusage`): voluntary (it waited:
/// for a socket, a timer, another thread) and involuntary (the scheduler took the
/// core away).
pub(crate) fn switches() -> (u64, u64) {
    // SAFETY: as in `cpu_time`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as in `cpu_time`, for this process.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    (usage.ru_nvcsw as u64, usage.ru_nivcsw as u64)
}
