//! Locking shared by the executor's parts (the step machinery, the schedulers, the run's
//! checkpoint IO): a leaf, so that none of them imports another only for it.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex; a poisoned one is still consistent, since no code panics while holding it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
