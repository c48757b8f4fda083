//! The partner API of `sluice drill --tenants`: one real HTTP server on a loopback port that
//! serves many tenants, each with its own credentials and so its own quota.
//!
//! `POST /release/{tenant}` with `{"reservation_id": ...}` releases a seat of that tenant. It
//! behaves as the single-tenant upstream of the drill ([`super::super::upstream`]) does, per
//! tenant: `quota` calls in any sliding scenario minute, 429 with `Retry-After` beyond, a share
//! of calls refused with 429 at random, 422 for a malformed id, at most one release per
//! `Idempotency-Key`, a share of replies lost (502 after applying). One tenant can be down
//! (503 to its calls only) and a tenant's quota can be raised while it runs. Every call is
//! recorded with its tenant, and the first release of each id with its time.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::super::operator::Watched;
use super::super::upstream::{CallKind, Ledger, QuotaWindow, Terms, serve};

/// One recorded call.
#[derive(Debug, Clone, Copy)]
pub struct TenantCall {
    /// When it arrived.
    pub at: Instant,
    /// Whose it was (index into the tenant table).
    pub tenant: usize,
    /// What it got.
    pub kind: CallKind,
}

/// One tenant's account at the partner.
#[derive(Debug)]
struct Account {
    quota: u32,
    window: QuotaWindow,
    down: bool,
}

/// The server's books.
#[derive(Debug)]
pub struct Books {
    /// Every call, in arrival order.
    pub calls: Vec<TenantCall>,
    /// The releases applied, over all tenants (reservation ids are unique).
    pub ledger: Ledger,
    accounts: Vec<Account>,
    rng: StdRng,
}

/// The partner's settings.
#[derive(Debug, Clone)]
pub struct PartnerConfig {
    /// Tenant names, in table order.
    pub tenants: Vec<String>,
    /// Each tenant's quota per window at the start.
    pub quotas: Vec<u32>,
    /// Its quota window and faults, the same for every tenant.
    pub terms: Terms,
    /// Seed.
    pub seed: u64,
}

/// A running partner API.
#[derive(Clone)]
pub struct Partner {
    books: Arc<Mutex<Books>>,
    index: Arc<HashMap<String, usize>>,
    cfg: Arc<PartnerConfig>,
    /// Its address.
    pub addr: SocketAddr,
}

impl std::fmt::Debug for Partner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partner").field("addr", &self.addr).finish()
    }
}

impl Partner {
    /// Starts the server on 127.0.0.1 (a free port); it runs until `shutdown` resolves.
    pub async fn start(
        cfg: PartnerConfig,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<Partner> {
        let accounts = cfg
            .quotas
            .iter()
            .map(|&quota| Account {
                quota,
                window: QuotaWindow::default(),
                down: false,
            })
            .collect();
        let books = Arc::new(Mutex::new(Books {
            calls: Vec::new(),
            ledger: Ledger::default(),
            accounts,
            rng: StdRng::seed_from_u64(cfg.seed),
        }));
        let index = cfg
            .tenants
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i))
            .collect();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let partner = Partner {
            books,
            index: Arc::new(index),
            cfg: Arc::new(cfg),
            addr,
        };
        let app = axum::Router::new()
            .route("/release/{tenant}", post(release))
            .with_state(partner.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %e, "drill partner API stopped");
            }
        });
        Ok(partner)
    }

    /// The release URL; a tenant's is this plus `/<tenant>`.
    pub fn url(&self) -> String {
        format!("http://{}/release", self.addr)
    }

    /// The books, locked.
    pub fn books(&self) -> MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a tenant's account down (503 to its calls) or back up.
    pub fn set_down(&self, tenant: usize, down: bool) {
        if let Some(a) = self.books().accounts.get_mut(tenant) {
            a.down = down;
        }
    }

    /// Gives a tenant a new quota, from now on.
    pub fn set_quota(&self, tenant: usize, quota: u32) {
        if let Some(a) = self.books().accounts.get_mut(tenant) {
            a.quota = quota;
        }
    }
}

impl Watched for Partner {
    fn recent_429_share(&self, window: Duration) -> f64 {
        let b = self.books();
        let now = Instant::now();
        let (mut n, mut n429) = (0usize, 0usize);
        for c in b
            .calls
            .iter()
            .rev()
            .take_while(|c| now.duration_since(c.at) < window)
        {
            n += 1;
            n429 += usize::from(c.kind.is_429());
        }
        if n == 0 { 0.0 } else { n429 as f64 / n as f64 }
    }
}

async fn release(
    State(p): State<Partner>,
    Path(tenant): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let now = Instant::now();
    let Some(&t) = p.index.get(&tenant) else {
        return (StatusCode::NOT_FOUND, "no such tenant").into_response();
    };
    let mut b = p.books();
    let b = &mut *b;
    let account = &mut b.accounts[t];
    let (kind, response) = if account.down {
        (
            CallKind::Unavailable,
            (StatusCode::SERVICE_UNAVAILABLE, "account suspended").into_response(),
        )
    } else {
        serve(
            &p.cfg.terms,
            &mut b.rng,
            (account.quota, &mut account.window),
            &mut b.ledger,
            &headers,
            &body,
            now,
        )
    };
    b.calls.push(TenantCall {
        at: now,
        tenant: t,
        kind,
    });
    response
}
