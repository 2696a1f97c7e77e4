//! A mutex's guard whether or not a panic poisoned it: every lock the client keeps
//! guards state that stays whole across a panic (each change is one assignment or
//! one collection operation), so a poisoned mutex is used as it is.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// The guard of `mutex`, poisoned or not.
pub(crate) fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
