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

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;

use super::super::operator::Watched;
use super::super::upstream::{CallKind, too_many, well_formed};

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
    accepted: VecDeque<Instant>,
    down: bool,
}

/// The server's books.
#[derive(Debug)]
pub struct Books {
    /// Every call, in arrival order.
    pub calls: Vec<TenantCall>,
    /// Releases applied per reservation id.
    pub applied: HashMap<String, u32>,
    /// When each reservation was first released.
    pub first_applied: HashMap<String, Instant>,
    /// Repeats absorbed by an idempotency key.
    pub repeats: u64,
    /// Quota changes: (when, tenant, new quota).
    pub quota_changes: Vec<(Instant, usize, u32)>,
    accounts: Vec<Account>,
    keys: HashSet<String>,
    applies: u64,
    rng: StdRng,
}

/// The partner's settings (real time).
#[derive(Debug, Clone)]
pub struct PartnerConfig {
    /// Tenant names, in table order.
    pub tenants: Vec<String>,
    /// Each tenant's quota per window at the start.
    pub quotas: Vec<u32>,
    /// The quota window (a scenario minute in real time).
    pub window: Duration,
    /// Probability of a random 429.
    pub random_429: f64,
    /// Every how many applied releases one loses its reply (0: never).
    pub lost_every: u64,
    /// Retry-After of a random 429 (real).
    pub random_retry_after: Duration,
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

#[derive(Deserialize)]
struct Release {
    reservation_id: String,
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
                accepted: VecDeque::new(),
                down: false,
            })
            .collect();
        let books = Arc::new(Mutex::new(Books {
            calls: Vec::new(),
            applied: HashMap::new(),
            first_applied: HashMap::new(),
            repeats: 0,
            quota_changes: Vec::new(),
            accounts,
            keys: HashSet::new(),
            applies: 0,
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
        let mut b = self.books();
        if let Some(a) = b.accounts.get_mut(tenant) {
            a.quota = quota;
            b.quota_changes.push((Instant::now(), tenant, quota));
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
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let cfg = &p.cfg;
    let mut b = p.books();
    let record = |b: &mut Books, kind| {
        b.calls.push(TenantCall {
            at: now,
            tenant: t,
            kind,
        });
    };
    if b.accounts[t].down {
        record(&mut b, CallKind::Unavailable);
        return (StatusCode::SERVICE_UNAVAILABLE, "account suspended").into_response();
    }
    if cfg.random_429 > 0.0 && b.rng.gen_bool(cfg.random_429) {
        record(&mut b, CallKind::Random429);
        return too_many(cfg.random_retry_after);
    }
    let account = &mut b.accounts[t];
    while account
        .accepted
        .front()
        .is_some_and(|at| now.duration_since(*at) >= cfg.window)
    {
        account.accepted.pop_front();
    }
    if account.accepted.len() >= account.quota as usize {
        let wait = account.accepted.front().map_or(cfg.window, |at| {
            cfg.window.saturating_sub(now.duration_since(*at))
        });
        record(&mut b, CallKind::Quota429);
        return too_many(wait);
    }
    account.accepted.push_back(now);
    let id = match serde_json::from_str::<Release>(&body) {
        Ok(r) if well_formed(&r.reservation_id) => r.reservation_id,
        _ => {
            record(&mut b, CallKind::Malformed);
            return (StatusCode::UNPROCESSABLE_ENTITY, "malformed reservation id").into_response();
        }
    };
    if let Some(k) = key
        && !b.keys.insert(k)
    {
        b.repeats += 1;
        record(&mut b, CallKind::Repeat);
        return (StatusCode::OK, "already released").into_response();
    }
    *b.applied.entry(id.clone()).or_insert(0) += 1;
    b.first_applied.entry(id).or_insert(now);
    b.applies += 1;
    let lost = cfg.lost_every > 0 && b.applies % cfg.lost_every == cfg.lost_every / 2;
    if lost {
        record(&mut b, CallKind::LostReply);
        return (StatusCode::BAD_GATEWAY, "reply lost").into_response();
    }
    record(&mut b, CallKind::Applied);
    (StatusCode::OK, "released").into_response()
}
