//! A value per queue that a node remembers for its own hot-path choices (sizes seen, times of
//! checks), forgotten with the queue.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// Per queue, the last value noted on this node.
pub(crate) struct PerQueue<T>(Mutex<HashMap<String, T>>);

impl<T> Default for PerQueue<T> {
    fn default() -> Self {
        PerQueue(Mutex::new(HashMap::new()))
    }
}

impl<T: Copy> PerQueue<T> {
    /// The value last noted for `queue`.
    pub(crate) fn get(&self, queue: &str) -> Option<T> {
        self.map().get(queue).copied()
    }

    /// Notes `value` for `queue` (the name is copied only the first time).
    pub(crate) fn set(&self, queue: &str, value: T) {
        let mut map = self.map();
        match map.get_mut(queue) {
            Some(v) => *v = value,
            None => {
                map.insert(queue.to_owned(), value);
            }
        }
    }

    /// Forgets `queue` (deleted).
    pub(crate) fn forget(&self, queue: &str) {
        self.map().remove(queue);
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, T>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
