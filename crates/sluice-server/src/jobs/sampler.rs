//! Stats history: every 10 s, a point per queue into the store.
//!
//! Points are taken at multiples of the interval, so broker nodes sharing a database sample
//! the same moments and the store keeps one point per queue and moment.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::stats::{SAMPLE_INTERVAL, StatsSample};
use sluice_core::{Clock, Store, SystemClock};
use tokio::sync::watch;

use crate::walk::StatsWalk;

/// Takes one point of every queue now.
///
/// # Errors
/// The store's error, when it cannot list or record.
pub async fn sample_once(store: &dyn Store) -> Result<usize, sluice_core::StoreError> {
    let at = StatsSample::slot(SystemClock.now());
    let mut walk = StatsWalk::new(store);
    let mut n = 0;
    while let Some(page) = walk.next_page().await? {
        n += page.len();
        let samples = page
            .into_iter()
            .map(|(q, s)| (q.name, StatsSample::of(&s, at)))
            .collect();
        store.record_stats(samples).await?;
    }
    Ok(n)
}

/// Samples at every interval until `shutdown` turns true.
pub async fn run(store: Arc<dyn Store>, mut shutdown: watch::Receiver<bool>) {
    let step = SAMPLE_INTERVAL.as_millis() as i64;
    loop {
        let now = SystemClock.now().as_millis();
        let wait = Duration::from_millis((step - now.rem_euclid(step)) as u64 + 5);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            return;
        }
        if let Err(e) = sample_once(store.as_ref()).await {
            tracing::warn!(error = %e, "could not record stats history; will try at the next interval");
        }
    }
}
