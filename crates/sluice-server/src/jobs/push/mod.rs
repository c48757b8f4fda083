//! Push delivery: the broker delivers the messages of queues that have a push target to
//! their HTTP endpoints itself.
//!
//! A supervisor looks at the queues every second and keeps one delivery loop
//! ([`deliver`]) per queue whose target this broker may call (`https`, or `http` on
//! loopback unless plain `http` is allowed; at a public address or one `push_allow` lists,
//! never this broker's own listeners: see [`guard`]) and which is not paused. A loop leases messages
//! exactly as a consumer does, so `rate_limit`, `max_in_flight`, retries with backoff,
//! `max_receive_count` and the DLQ apply unchanged; its leases last the request timeout plus
//! a margin, so a broker that dies mid-push only lets the lease run out and the message is
//! delivered again. Several brokers sharing a PostgreSQL store each run a loop per queue;
//! leases make sure only one of them pushes a given message.

mod deliver;
pub mod guard;
pub mod signature;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::{PushTarget, QueueName};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use guard::{BadPushAllow, PushAllow, PushRules};

use crate::AppState;

/// How often the supervisor looks for queues whose push target appeared, changed or went.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(1);

/// What became of one push request, as counted in `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PushOutcome {
    /// A 2xx answer: the message was acknowledged.
    Delivered,
    /// 429 or 503: delayed by its `Retry-After`, or retried with backoff without one.
    Throttled,
    /// Another 4xx.
    ClientError,
    /// A 5xx.
    ServerError,
    /// A 1xx or 3xx answer (redirects are not followed).
    Unexpected,
    /// No answer within the timeout.
    Timeout,
    /// No connection, or it broke.
    ConnectionError,
}

impl PushOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            PushOutcome::Delivered => "delivered",
            PushOutcome::Throttled => "throttled",
            PushOutcome::ClientError => "client_error",
            PushOutcome::ServerError => "server_error",
            PushOutcome::Unexpected => "unexpected",
            PushOutcome::Timeout => "timeout",
            PushOutcome::ConnectionError => "connection_error",
        }
    }
}

/// The HTTP client push requests to `target` go through: connections are kept and reused,
/// redirects are never followed (a redirect is an answer like any other, so it cannot lead
/// the broker to an address it did not check), names resolve through [`guard`]'s resolver
/// (the address connected to is the one checked), and the request timeout is the target's.
///
/// # Errors
/// When the TLS backend cannot be set up.
pub fn client(rules: Arc<PushRules>, target: &PushTarget) -> reqwest::Result<reqwest::Client> {
    let port = target
        .parsed_url()
        .ok()
        .and_then(|u| u.port_or_known_default())
        .unwrap_or(0);
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("sluice/", env!("CARGO_PKG_VERSION")))
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(60))
        // Straight to the target: a proxy from the environment would carry requests to an
        // address that was never checked.
        .no_proxy()
        .dns_resolver(Arc::new(guard::GuardedResolver::new(rules, port)))
        .build()
}

struct Running {
    target: PushTarget,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Runs push delivery until shutdown; then stops leasing and lets requests in flight finish
/// (each within its timeout) and settle.
pub async fn run(state: AppState, mut shutdown: watch::Receiver<bool>) {
    let mut running: HashMap<QueueName, Running> = HashMap::new();
    // Loops told to stop, still finishing their calls: waited for at shutdown too.
    let mut draining: Vec<JoinHandle<()>> = Vec::new();
    let mut refused: HashMap<QueueName, String> = HashMap::new();
    let mut failing = false;
    loop {
        if *shutdown.borrow() {
            break;
        }
        match state.store.list_queues().await {
            Ok(queues) => {
                if std::mem::take(&mut failing) {
                    tracing::info!("queues can be listed again: push delivery resumes");
                }
                let mut wanted: HashMap<QueueName, PushTarget> = HashMap::new();
                for q in queues {
                    let Some(t) = q.config.push.filter(|_| !q.config.paused) else {
                        continue;
                    };
                    // A target stored before the rules changed (another node, a restart with
                    // other settings) is checked again here; a name on each connection.
                    let why = if state.push.scheme_allowed(&t) {
                        state.push.check_literal(&t).err().map(|e| e.to_string())
                    } else {
                        Some("the target is plain http to a non-loopback host; use https, or start the broker with --push-allow-http".to_owned())
                    };
                    if let Some(why) = why {
                        if refused.get(&q.name) != Some(&t.url) {
                            tracing::warn!(queue = %q.name, url = %t.shown_url(), "not pushing: {why}");
                            refused.insert(q.name.clone(), t.url.clone());
                        }
                        continue;
                    }
                    refused.remove(&q.name);
                    wanted.insert(q.name, t);
                }
                let stale: Vec<QueueName> = running
                    .iter()
                    .filter(|(name, r)| {
                        wanted.get(*name) != Some(&r.target) || r.task.is_finished()
                    })
                    .map(|(name, _)| name.clone())
                    .collect();
                for name in stale {
                    if let Some(r) = running.remove(&name) {
                        r.stop.send_replace(true);
                        draining.push(r.task);
                    }
                }
                draining.retain(|t| !t.is_finished());
                for (name, target) in wanted {
                    if running.contains_key(&name) {
                        continue;
                    }
                    let client = match client(state.push.clone(), &target) {
                        Ok(c) => c,
                        Err(e) => {
                            tracing::error!(queue = %name, error = %e, "cannot set up the HTTP client: not pushing");
                            continue;
                        }
                    };
                    tracing::info!(queue = %name, url = %target.shown_url(), "pushing");
                    let (stop, stop_rx) = watch::channel(false);
                    let task = tokio::spawn(deliver::run(
                        state.clone(),
                        client,
                        name.clone(),
                        target.clone(),
                        stop_rx,
                    ));
                    running.insert(name, Running { target, stop, task });
                }
            }
            Err(e) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(error = %e, "cannot list queues; push delivery keeps its current targets until it can");
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(RECONCILE_EVERY) => {}
            _ = shutdown.changed() => {}
        }
    }
    for r in running.values() {
        r.stop.send_replace(true);
    }
    for (_, r) in running {
        let _ = r.task.await;
    }
    for t in draining {
        let _ = t.await;
    }
}
