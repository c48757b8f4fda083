//! A pool of frame connections to one broker, for a program with many tasks talking to it at
//! once.

use std::time::Duration;

use super::{FrameClientError, FrameConnection};
use crate::tls::TlsOptions;

/// Connections to one broker, opened when needed and reused: for a program with many tasks
/// talking to the broker at once (a worker's leases, acks and lease extensions), since one
/// [`FrameConnection`] carries one request at a time.
///
/// ```no_run
/// # async fn run() -> Result<(), sluice_client::frames::FrameClientError> {
/// use sluice_client::frames::FramePool;
///
/// let pool = FramePool::new("127.0.0.1:7879", None);
/// let got = pool.get().await?.receive("jobs", 10, std::time::Duration::ZERO).await?;
/// # Ok(()) }
/// ```
pub struct FramePool {
    addr: String,
    key: Option<String>,
    tls: Option<TlsOptions>,
    idle: std::sync::Mutex<Vec<(FrameConnection, std::time::Instant)>>,
}

impl std::fmt::Debug for FramePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FramePool")
            .field("addr", &self.addr)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// Idle connections a pool keeps; more are closed when handed back.
const MAX_IDLE: usize = 64;

/// How long a pool reuses an idle connection: below the broker's default idle timeout.
const MAX_IDLE_TIME: Duration = Duration::from_secs(50);

impl FramePool {
    /// A pool of plain TCP connections to `addr`, authenticated with `key` when given.
    pub fn new(addr: impl Into<String>, key: Option<&str>) -> Self {
        FramePool {
            addr: addr.into(),
            key: key.map(str::to_owned),
            tls: None,
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Connects over TLS instead (see [`FrameConnection::connect_tls`]).
    #[must_use]
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// An idle connection, or a new one. It goes back to the pool when dropped, unless a
    /// call on it failed in a way that leaves it unusable.
    ///
    /// # Errors
    /// Connecting failed, or the broker refused the key.
    pub async fn get(&self) -> Result<PooledFrameConnection<'_>, FrameClientError> {
        let idle = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            // The broker closes connections idle for its idle timeout (75 s by default): one
            // idle about that long is not worth a failed call.
            idle.retain(|(_, since)| since.elapsed() < MAX_IDLE_TIME);
            idle.pop()
        };
        let conn = match idle {
            Some((c, _)) => c,
            None => match &self.tls {
                None => FrameConnection::connect(self.addr.as_str(), self.key.as_deref()).await?,
                Some(tls) => {
                    FrameConnection::connect_tls(&self.addr, tls, self.key.as_deref()).await?
                }
            },
        };
        Ok(PooledFrameConnection {
            pool: self,
            conn: Some(conn),
        })
    }
}

/// A connection borrowed from a [`FramePool`]; use it as a [`FrameConnection`].
pub struct PooledFrameConnection<'p> {
    pool: &'p FramePool,
    conn: Option<FrameConnection>,
}

impl std::ops::Deref for PooledFrameConnection<'_> {
    type Target = FrameConnection;

    fn deref(&self) -> &FrameConnection {
        self.conn.as_ref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for PooledFrameConnection<'_> {
    fn deref_mut(&mut self) -> &mut FrameConnection {
        self.conn.as_mut().expect("present until dropped")
    }
}

impl Drop for PooledFrameConnection<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take().filter(|c| !c.broken) {
            let mut idle = self.pool.idle.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < MAX_IDLE {
                idle.push((conn, std::time::Instant::now()));
            }
        }
    }
}
