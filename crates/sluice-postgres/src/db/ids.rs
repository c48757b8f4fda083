//! Message and job ids, unique across every node of a database.
//!
//! A node reserves a block of [`ID_BLOCK`] ids with one `nextval` and
//! hands them out from memory, so a batch of a thousand sends costs one round trip at most.

use std::sync::Mutex;

use sluice_core::StoreError;

use crate::db::schema::ID_BLOCK;
use crate::error::db;

/// The unused rest of this node's current block.
#[derive(Default)]
pub(crate) struct Ids {
    range: Mutex<(i64, i64)>,
}

impl Ids {
    /// `n` fresh ids, ascending.
    pub(crate) async fn draw(
        &self,
        client: &impl tokio_postgres::GenericClient,
        n: usize,
    ) -> Result<Vec<i64>, StoreError> {
        let mut out = Vec::with_capacity(n);
        loop {
            {
                let mut r = self.range.lock().unwrap_or_else(|p| p.into_inner());
                while out.len() < n && r.0 < r.1 {
                    out.push(r.0);
                    r.0 += 1;
                }
            }
            if out.len() == n {
                return Ok(out);
            }
            self.refill(client).await?;
        }
    }

    /// The first of `n` consecutive fresh ids (`n` at most [`ID_BLOCK`]), for a pack. The
    /// rest of a block too short for them is left unused.
    pub(crate) async fn draw_run(
        &self,
        client: &impl tokio_postgres::GenericClient,
        n: usize,
    ) -> Result<i64, StoreError> {
        let n = i64::try_from(n).unwrap_or(i64::MAX).clamp(1, ID_BLOCK);
        loop {
            {
                let mut r = self.range.lock().unwrap_or_else(|p| p.into_inner());
                if r.1 - r.0 >= n {
                    let first = r.0;
                    r.0 += n;
                    return Ok(first);
                }
            }
            self.refill(client).await?;
        }
    }

    /// Replaces the current block with a fresh one.
    async fn refill(&self, client: &impl tokio_postgres::GenericClient) -> Result<(), StoreError> {
        let row = client
            .query_one("SELECT nextval('id_blocks')", &[])
            .await
            .map_err(|e| db(&e))?;
        let block: i64 = row.get(0);
        let mut r = self.range.lock().unwrap_or_else(|p| p.into_inner());
        *r = (block * ID_BLOCK, (block + 1) * ID_BLOCK);
        Ok(())
    }
}
