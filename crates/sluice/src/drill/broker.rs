//! The broker a drill runs against: the one given by `--broker`, or one started in-process
//! on a temporary data dir, which stops (and whose data dir is removed) when the drill ends.

use std::sync::Arc;

use anyhow::Context;
use sluice_client::Client;
use tokio::sync::watch;

use super::DrillArgs;

/// The drill's broker and a client of it.
pub struct DrillBroker {
    /// Its URL.
    pub url: String,
    /// A client with idempotent sends, and the token and TLS of the flags.
    pub client: Client,
    stop: watch::Sender<bool>,
    _data_dir: Option<tempfile::TempDir>,
}

impl DrillBroker {
    /// Connects to `--broker`, or starts one on a temporary data dir; checks it answers.
    pub async fn start(args: &DrillArgs) -> anyhow::Result<Self> {
        let (stop, mut stop_rx) = watch::channel(false);
        let mut data_dir = None;
        let url = match &args.broker {
            Some(u) => u.clone(),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("sluice-drill-")
                    .tempdir()
                    .context("creating a temporary data dir")?;
                let (store, _) = sluice_embedded::EmbeddedStore::open(
                    dir.path(),
                    sluice_embedded::EmbeddedOptions::default(),
                )
                .context("opening the temporary store")?;
                let store: Arc<dyn sluice_core::Store> = Arc::new(store);
                let broker =
                    sluice_server::Broker::new(store, sluice_server::ServerOptions::default());
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                let addr = listener.local_addr()?;
                tokio::spawn(async move {
                    let stopped = async move {
                        let _ = stop_rx.wait_for(|v| *v).await;
                    };
                    if let Err(e) = broker.serve(listener, stopped).await {
                        tracing::error!(error = %e, "drill broker stopped");
                    }
                });
                data_dir = Some(dir);
                format!("http://{addr}")
            }
        };
        let mut cb = Client::builder(&url)
            .idempotent_sends(true)
            .tls(args.tls.options().map_err(anyhow::Error::msg)?);
        if let Some(t) = &args.token {
            cb = cb.token(t.clone());
        }
        let client = cb.build()?;
        client
            .healthz()
            .await
            .with_context(|| format!("reaching the broker at {url}"))?;
        Ok(DrillBroker {
            url,
            client,
            stop,
            _data_dir: data_dir,
        })
    }

    /// Stops a broker started here (a given one is left running).
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}
