//! Poison-tolerant locking for the service's small shared maps.
//!
//! A std mutex is poisoned when a thread panics holding it; every later `lock()`
//! then fails, and one bad input would stop every worker. The maps guarded here
//! (caches, pauses, live operations) stay consistent under any single insert or
//! remove, so the data of a poisoned lock is used as it is.

use std::sync::{Mutex, MutexGuard};

pub trait LockExt<T> {
    /// The guard, whether or not an earlier holder panicked.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> LockExt<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_while_holding_the_lock_does_not_stop_later_users() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("while holding the lock");
        })
        .join();
        assert!(m.is_poisoned());
        *m.locked() += 1;
        assert_eq!(*m.locked(), 2);
    }
}
