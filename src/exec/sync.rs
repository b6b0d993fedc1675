//! Locking shared by the executor's parts (the step machinery, the schedulers, the run's
//! checkpoint IO, the variable store) and the layers above (a session's eager saver): a leaf,
//! so that none of them imports another only for it. Every lock of the crate ignores poisoning
//! through [`unpoisoned`]: no code panics while holding one, so a poisoned lock is still
//! consistent.

use std::sync::{LockResult, Mutex, MutexGuard, PoisonError};

/// The guard (or value) of a lock result, poisoned or not.
pub(crate) fn unpoisoned<G>(result: LockResult<G>) -> G {
    result.unwrap_or_else(PoisonError::into_inner)
}

/// Locks a mutex, poisoned or not.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    unpoisoned(mutex.lock())
}
