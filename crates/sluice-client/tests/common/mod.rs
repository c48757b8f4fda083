//! A real broker on an ephemeral loopback port over an embedded store in a temp dir, and a
//! client of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use sluice_client::{Client, RetryPolicy};
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};
use sluice_server::{Broker, ServerOptions};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub struct TestServer {
    pub base: String,
    pub client: Client,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

pub async fn start() -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = EmbeddedOptions {
        maintenance_interval: Duration::from_millis(50),
        ..EmbeddedOptions::default()
    };
    let (store, _) = EmbeddedStore::open(dir.path(), opts).expect("open store");
    let broker = Broker::new(Arc::new(store), ServerOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(broker.serve(listener, async {
        let _ = rx.await;
    }));
    let base = format!("http://{addr}");
    let client = Client::builder(&base)
        .retry(fast_retries())
        .build()
        .expect("client");
    TestServer {
        base,
        client,
        stop: Some(tx),
        handle: Some(handle),
        _dir: dir,
    }
}

pub fn fast_retries() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        max_retry_after: Duration::from_secs(2),
    }
}

impl TestServer {
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            tokio::time::timeout(Duration::from_secs(5), h)
                .await
                .expect("server stops within 5 s")
                .expect("server task")
                .expect("serve");
        }
    }
}

/// A broker that can be stopped and started again on the same address and data directory,
/// as a real restart would.
pub struct RestartableServer {
    pub base: String,
    addr: std::net::SocketAddr,
    dir: tempfile::TempDir,
    running: Option<(oneshot::Sender<()>, JoinHandle<std::io::Result<()>>)>,
}

impl RestartableServer {
    pub async fn start() -> RestartableServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut s = RestartableServer {
            base: format!("http://{addr}"),
            addr,
            dir,
            running: None,
        };
        s.serve(listener);
        s
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let opts = EmbeddedOptions {
            maintenance_interval: Duration::from_millis(50),
            ..EmbeddedOptions::default()
        };
        let (store, _) = EmbeddedStore::open(self.dir.path(), opts).expect("open store");
        let broker = Broker::new(Arc::new(store), ServerOptions::default());
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(broker.serve(listener, async {
            let _ = rx.await;
        }));
        self.running = Some((tx, handle));
    }

    /// Stops the broker (gracefully, as on SIGTERM) and waits until it is gone.
    pub async fn stop(&mut self) {
        if let Some((tx, h)) = self.running.take() {
            let _ = tx.send(());
            tokio::time::timeout(Duration::from_secs(10), h)
                .await
                .expect("server stops within 10 s")
                .expect("server task")
                .expect("serve");
        }
    }

    /// Starts the broker again on the same address over the same data directory.
    pub async fn restart(&mut self) {
        let mut tries = 0;
        let listener = loop {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(e) if tries < 100 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("rebinding {}: {e}", self.addr),
            }
        };
        // The old store releases its directory lock once its last handle is gone.
        for _ in 0..100 {
            let probe = std::fs::OpenOptions::new()
                .write(true)
                .open(self.dir.path().join("LOCK"))
                .expect("lock file");
            if probe.try_lock().is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.serve(listener);
    }
}
