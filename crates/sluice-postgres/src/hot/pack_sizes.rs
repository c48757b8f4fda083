//! How many waiting packs a pack lease locks to choose from.
//!
//! A pack lease locks the oldest waiting packs (`FOR UPDATE SKIP LOCKED`, so leases of
//! several nodes never wait for each other), then takes as many of them as fit the receive.
//! It must lock enough to fill the receive, but every pack it locks and does not take still
//! costs a row lock (a heap write and a WAL record) and is skipped by any lease running
//! meanwhile. Sized for the smallest pack any node makes ([`pack_min`]), a receive of 100
//! from packs of 100 locked 11 packs to take one; once a backlog formed, those wasted locks
//! made consumers slower than producers for the rest of the run (measured: 61,000 – 74,000
//! msg/s sustained instead of about 120,000). So a node sizes each lease by the packs its
//! last lease of that queue took.
//!
//! [`pack_min`]: crate::PostgresOptions::pack_min

use crate::hot::memo::Memo;

/// Packs locked beyond those the size last seen says would fill the receive, for packs of
/// varying sizes.
const SLACK: i64 = 2;

/// Of one queue, the smallest pack the last pack lease on this node took.
#[derive(Default)]
pub(crate) struct PackSizes(Memo<usize>);

impl PackSizes {
    /// How many waiting packs a lease of up to `max` messages locks: enough to
    /// fill it with packs of the size last seen there (before any, of `pack_min`), and
    /// [`SLACK`] more. Should smaller packs come, the lease returns fewer messages than it
    /// could, and the next one, knowing their size, locks more.
    pub(crate) fn choose(&self, max: u32, pack_min: usize) -> i64 {
        let size = self.0.get().unwrap_or(pack_min).max(1);
        i64::from(max) / i64::try_from(size).unwrap_or(i64::MAX) + SLACK
    }

    /// Notes the sizes of the packs a lease took (nothing when it took none).
    pub(crate) fn leased(&self, sizes: impl IntoIterator<Item = usize>) {
        if let Some(smallest) = sizes.into_iter().min() {
            self.0.set(smallest);
        }
    }

    /// Forgets the sizes seen (the queue was deleted).
    pub(crate) fn clear(&self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_locks_what_packs_of_the_last_seen_size_need() {
        let (sizes, other) = (PackSizes::default(), PackSizes::default());
        // Nothing seen: sized for the smallest pack a node makes.
        assert_eq!(sizes.choose(100, 10), 12);
        sizes.leased([100, 100]);
        assert_eq!(sizes.choose(100, 10), 3);
        assert_eq!(sizes.choose(400, 10), 6);
        // Smaller packs came: the next lease locks more; other queues keep their own.
        sizes.leased([25, 100]);
        assert_eq!(sizes.choose(100, 10), 6);
        sizes.leased([]);
        assert_eq!(sizes.choose(100, 10), 6);
        assert_eq!(other.choose(100, 10), 12);
        sizes.clear();
        assert_eq!(sizes.choose(100, 10), 12);
    }
}
