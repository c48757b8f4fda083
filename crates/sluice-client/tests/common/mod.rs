//! A real broker on an ephemeral loopback port over an embedded store in a temp dir, and a
//! client of it.
#![allow(dead_code)]

use std::time::Duration;

use sluice_client::{Client, RetryPolicy};
use sluice_testkit::InProcessBroker;

pub struct TestServer {
    pub base: String,
    /// The frame protocol's listener.
    pub frames: std::net::SocketAddr,
    pub client: Client,
    broker: InProcessBroker,
}

pub async fn start() -> TestServer {
    let broker = InProcessBroker::start().await;
    let base = broker.url.clone();
    let frames = broker.frames;
    let client = Client::builder(&base)
        .retry(fast_retries())
        .build()
        .expect("client");
    TestServer {
        base,
        frames,
        client,
        broker,
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
    pub async fn shutdown(self) {
        self.broker.shutdown().await;
    }
}

/// A broker that can be stopped and started again on the same address and data directory,
/// as a real restart would.
pub struct RestartableServer {
    pub base: String,
    /// The frame protocol's listener (the same after a restart).
    pub frames: std::net::SocketAddr,
    broker: InProcessBroker,
}

impl RestartableServer {
    pub async fn start() -> RestartableServer {
        let broker = InProcessBroker::start().await;
        RestartableServer {
            base: broker.url.clone(),
            frames: broker.frames,
            broker,
        }
    }

    /// Stops the broker (gracefully, as on SIGTERM) and waits until it is gone.
    pub async fn stop(&mut self) {
        self.broker.stop().await;
    }

    /// Starts the broker again on the same address over the same data directory.
    pub async fn restart(&mut self) {
        self.broker.restart().await;
    }
}
