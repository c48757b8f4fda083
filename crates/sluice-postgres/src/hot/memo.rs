//! A value a node notes of one queue for its own hot-path choices (sizes seen, times of
//! checks), forgotten with the queue.

use std::sync::{Mutex, MutexGuard};

/// The last value noted, if any.
pub(crate) struct Memo<T>(Mutex<Option<T>>);

impl<T> Default for Memo<T> {
    fn default() -> Self {
        Memo(Mutex::new(None))
    }
}

impl<T: Copy> Memo<T> {
    /// The value last noted.
    pub(crate) fn get(&self) -> Option<T> {
        *self.value()
    }

    /// Notes `value`.
    pub(crate) fn set(&self, value: T) {
        *self.value() = Some(value);
    }

    /// Forgets the value (the queue was deleted).
    pub(crate) fn clear(&self) {
        *self.value() = None;
    }

    fn value(&self) -> MutexGuard<'_, Option<T>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
