//! How many messages each named key has in a queue, and its deliveries per minute: what stats'
//! `active_keys` and the keys listing's delivery rates read without visiting every message.
//!
//! A key's entry lives while it has messages in the queue, and for up to two minutes after
//! its last delivery (so that a key whose messages are delivered as they come keeps its rate):
//! emptied keys wait in a line, oldest first, that expiry walks from the front.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use sluice_core::key_stats::MinuteTally;

/// One named key's entry.
#[derive(Default)]
pub(crate) struct KeyEntry {
    /// Its messages in the queue, in any slot.
    pub messages: u32,
    /// Its deliveries.
    pub delivered: MinuteTally,
    /// In the line of emptied keys.
    lined: bool,
}

/// A queue's keys.
#[derive(Default)]
pub(crate) struct KeyCounts {
    keys: HashMap<Arc<str>, KeyEntry>,
    /// Keys with messages.
    active: u64,
    /// Keys that had none left when last seen, oldest first.
    emptied: VecDeque<Arc<str>>,
    /// Deliveries of messages without a key.
    pub implicit: MinuteTally,
}

impl KeyCounts {
    /// A message of `key` entered the queue (or a slot of it).
    pub fn enter(&mut self, key: &Arc<str>) {
        let e = self.keys.entry(key.clone()).or_default();
        if e.messages == 0 {
            self.active += 1;
        }
        e.messages += 1;
    }

    /// A message of `key` left the queue (or a slot of it, to enter another at once).
    pub fn leave(&mut self, key: &Arc<str>) {
        let Some(e) = self.keys.get_mut(key) else {
            return;
        };
        e.messages = e.messages.saturating_sub(1);
        if e.messages == 0 {
            self.active = self.active.saturating_sub(1);
            if !e.lined {
                e.lined = true;
                self.emptied.push_back(key.clone());
            }
        }
    }

    /// Counts `n` deliveries of `key` (`None`: the implicit key) at `now`.
    pub fn delivered(&mut self, key: Option<&Arc<str>>, now: i64, n: u64) {
        match key {
            None => self.implicit.count(now, n),
            Some(k) => {
                if let Some(e) = self.keys.get_mut(k) {
                    e.delivered.count(now, n);
                }
            }
        }
    }

    /// Keys with messages in the queue.
    pub fn active(&self) -> u64 {
        self.active
    }

    /// The entry of `key`, while it has one.
    pub fn get(&self, key: &str) -> Option<&KeyEntry> {
        self.keys.get(key)
    }

    /// Forgets the keys that have had no messages and no deliveries for the last minute and
    /// more. Stops at the first emptied key still counting deliveries: the line is in the
    /// order keys emptied, and a key's last delivery came before it emptied.
    pub fn forget_idle(&mut self, now: i64) {
        let stale = MinuteTally::minute_of(now) - 1;
        while let Some(k) = self.emptied.front() {
            let Some(e) = self.keys.get_mut(k) else {
                self.emptied.pop_front();
                continue;
            };
            if e.messages > 0 {
                e.lined = false;
            } else if e.delivered.minute >= stale && e.delivered.current + e.delivered.previous > 0
            {
                break;
            } else {
                self.keys.remove(k);
            }
            self.emptied.pop_front();
        }
    }

    /// Entries kept, for tests of the bound.
    #[cfg(test)]
    pub fn kept(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_kept_while_it_has_messages_and_for_its_recent_deliveries() {
        let mut c = KeyCounts::default();
        let a: Arc<str> = Arc::from("a");
        let b: Arc<str> = Arc::from("b");
        c.enter(&a);
        c.enter(&b);
        assert_eq!(c.active(), 2);
        // A move between slots leaves and enters at once: still one active key each.
        c.leave(&a);
        c.enter(&a);
        assert_eq!(c.active(), 2);
        c.delivered(Some(&a), 60_000, 1);
        c.leave(&a);
        c.leave(&b);
        assert_eq!(c.active(), 0);
        c.forget_idle(60_000);
        // `a` was delivered this minute: its rate stays; `b` goes.
        assert_eq!(c.kept(), 2, "stops at a, the first in line");
        c.forget_idle(3 * 60_000);
        assert_eq!(c.kept(), 0);
        assert!(c.emptied.is_empty());
    }
}
