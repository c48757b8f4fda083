//! Test support: a real Sluice broker — the HTTP server over the embedded engine in a
//! temporary data directory — served in-process on an ephemeral loopback port, which can be
//! stopped and started again on the same address and data, as a restart would.
//!
//! The server's, the client's and the benchmarks' tests all start brokers through this, so
//! they exercise the same thing the binary serves.

#[cfg(feature = "browser")]
pub mod browser;
pub mod faults;
pub mod host;
pub mod patroni;
pub mod pgbouncer;
pub mod postgres;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::Store;
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};
use sluice_server::{Broker, ServerOptions};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

type Running = (oneshot::Sender<()>, JoinHandle<std::io::Result<()>>);

/// A broker served by this process.
pub struct InProcessBroker {
    /// Its base URL, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    /// Its frame protocol listener (`sluice_wire::frame`).
    pub frames: SocketAddr,
    addr: SocketAddr,
    dir: tempfile::TempDir,
    options: ServerOptions,
    sync_interval: Option<Duration>,
    store: Option<Arc<dyn Store>>,
    running: Option<Running>,
}

fn try_open(
    dir: &std::path::Path,
    sync_interval: Option<Duration>,
) -> Result<Arc<dyn Store>, sluice_embedded::OpenError> {
    let options = EmbeddedOptions {
        // Lease expiry and retention are noticed quickly, so tests need not wait.
        maintenance_interval: Duration::from_millis(50),
        sync_interval,
        ..EmbeddedOptions::default()
    };
    let (store, _) = EmbeddedStore::open(dir, options)?;
    Ok(Arc::new(store))
}

impl InProcessBroker {
    /// Starts a broker with default options (no API keys).
    pub async fn start() -> Self {
        Self::start_with(ServerOptions::default()).await
    }

    /// Starts a broker with relaxed durability (`sluice serve --sync-interval`).
    pub async fn start_relaxed(sync_interval: Duration) -> Self {
        Self::start_on(ServerOptions::default(), Some(sync_interval)).await
    }

    /// Starts a broker with `options`.
    pub async fn start_with(options: ServerOptions) -> Self {
        Self::start_on(options, None).await
    }

    async fn start_on(options: ServerOptions, sync_interval: Option<Duration>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind an ephemeral loopback port");
        let addr = listener.local_addr().expect("local address");
        let frames = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind an ephemeral loopback port");
        let frames_addr = frames.local_addr().expect("local address");
        let store = try_open(dir.path(), sync_interval).expect("open the embedded store");
        let mut broker = InProcessBroker {
            url: format!("http://{addr}"),
            frames: frames_addr,
            addr,
            dir,
            options,
            sync_interval,
            store: Some(store),
            running: None,
        };
        broker.serve(listener, frames);
        broker
    }

    fn serve(&mut self, listener: tokio::net::TcpListener, frames: tokio::net::TcpListener) {
        let broker = Broker::new(self.store(), self.options.clone()).with_frames(frames);
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(broker.serve(listener, async {
            let _ = rx.await;
        }));
        self.running = Some((tx, handle));
    }

    /// The store behind the broker, for tests that set up state or look at it directly.
    ///
    /// # Panics
    /// While the broker is between a stop and a restart.
    pub fn store(&self) -> Arc<dyn Store> {
        self.store.clone().expect("the broker is running")
    }

    /// Stops serving (gracefully, as on SIGTERM), waits until it has, and closes the store.
    pub async fn stop(&mut self) {
        if let Some((tx, handle)) = self.running.take() {
            let _ = tx.send(());
            tokio::time::timeout(Duration::from_secs(10), handle)
                .await
                .expect("the broker stops within 10 s")
                .expect("the broker task")
                .expect("serve");
        }
    }

    /// Starts the broker again on the same address over the same data directory.
    pub async fn restart(&mut self) {
        self.stop().await;
        let listener = rebind(self.addr).await;
        let frames = rebind(self.frames).await;
        // The old store releases its directory lock once its last handle is gone; a test
        // must not keep handles across a restart.
        self.store = None;
        let mut tries = 0;
        let store = loop {
            match try_open(self.dir.path(), self.sync_interval) {
                Ok(s) => break s,
                Err(sluice_embedded::OpenError::Locked(_)) if tries < 100 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("reopening the store: {e}"),
            }
        };
        self.store = Some(store);
        self.serve(listener, frames);
    }

    /// Stops the broker for good.
    pub async fn shutdown(mut self) {
        self.stop().await;
    }
}

/// Binds `addr` again, waiting (up to 5 s) for the stopped broker to release it.
async fn rebind(addr: SocketAddr) -> tokio::net::TcpListener {
    let mut tries = 0;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) if tries >= 100 => panic!("rebinding {addr}: {e}"),
            Err(_) => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
