//! Walking every queue with its numbers, a page at a time: what `/metrics` and the stats
//! sampler read. Each page is one listing and one batched stats read, so a walk over 100,000
//! queues costs a hundred calls to the store rather than one per queue.

use sluice_core::{QueueInfo, QueuePageRequest, QueueStats, Store, StoreError};

/// A walk over every queue in name order; [`StatsWalk::next_page`] until it answers `None`.
pub struct StatsWalk<'a> {
    store: &'a dyn Store,
    cursor: Option<String>,
    done: bool,
}

impl<'a> StatsWalk<'a> {
    /// A walk from the first queue.
    pub fn new(store: &'a dyn Store) -> Self {
        StatsWalk {
            store,
            cursor: None,
            done: false,
        }
    }

    /// The next page of queues with their stats; a queue deleted between the listing and the
    /// stats read is left out. `None` once every queue has been returned.
    ///
    /// # Errors
    /// The store's, when it cannot list or read.
    pub async fn next_page(&mut self) -> Result<Option<Vec<(QueueInfo, QueueStats)>>, StoreError> {
        if self.done {
            return Ok(None);
        }
        let page = self
            .store
            .list_queues_page(QueuePageRequest {
                cursor: self.cursor.take(),
                ..QueuePageRequest::default()
            })
            .await?;
        self.cursor = page.next_cursor;
        self.done = self.cursor.is_none();
        let names: Vec<_> = page.queues.iter().map(|q| q.name.clone()).collect();
        let stats = self.store.stats_many(&names).await?;
        Ok(Some(
            page.queues
                .into_iter()
                .zip(stats)
                .filter_map(|(q, s)| Some((q, s?)))
                .collect(),
        ))
    }
}
