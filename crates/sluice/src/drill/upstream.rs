//! The simulated dependency: a real HTTP server on a loopback port.
//!
//! `POST /release` with `{"reservation_id": ...}` releases a seat. The server allows
//! `quota` calls in any sliding scenario minute and answers 429 beyond it, with `Retry-After`
//! (whole real seconds, rounded up) and `Retry-After-Ms` (exact, since a compressed minute can
//! be shorter than a second); it also answers 429 to a share of calls at random (its quota is
//! shared with callers we cannot see). A malformed id is answered 422. With an
//! `Idempotency-Key` it applies a release at most once per key and counts the repeats; without
//! one every call applies. A share of applied releases lose their reply (the server answers
//! 502 after applying, as a proxy would after a timeout). While paused (the outage) it answers
//! 503 to everything. Every call is recorded.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;

/// What a call got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// Released now.
    Applied,
    /// A repeat of a key already applied: a no-op.
    Repeat,
    /// Applied, but the reply was lost (502).
    LostReply,
    /// 429: over the quota.
    Quota429,
    /// 429: at random.
    Random429,
    /// 503: the outage.
    Unavailable,
    /// 422: malformed id.
    Malformed,
}

impl CallKind {
    /// Whether the call was answered 429.
    pub fn is_429(self) -> bool {
        matches!(self, CallKind::Quota429 | CallKind::Random429)
    }

    /// Whether the dependency counted the call against its quota: every call but the
    /// injected random 429s and the outage's 503s (a call refused for the quota counts: it
    /// was one too many).
    pub fn counts_against_quota(self) -> bool {
        !matches!(self, CallKind::Random429 | CallKind::Unavailable)
    }

    /// Whether the call got through to the account (it was not refused or unavailable).
    pub fn got_through(self) -> bool {
        self.counts_against_quota() && self != CallKind::Quota429
    }
}

/// One recorded call.
#[derive(Debug, Clone, Copy)]
pub struct CallRecord {
    /// When it arrived.
    pub at: Instant,
    /// What it got.
    pub kind: CallKind,
}

/// The server's books.
#[derive(Debug)]
pub struct Books {
    /// Every call, in arrival order.
    pub calls: Vec<CallRecord>,
    /// The releases applied.
    pub ledger: Ledger,
    window: QuotaWindow,
    paused: bool,
    rng: StdRng,
}

/// How a dependency serves calls (real time): its quota window and its faults.
#[derive(Debug, Clone, Copy)]
pub struct Terms {
    /// The quota window (a scenario minute in real time).
    pub window: Duration,
    /// Probability of a random 429.
    pub random_429: f64,
    /// Every how many applied releases one loses its reply (0: never).
    pub lost_every: u64,
    /// Retry-After of a random 429 (real).
    pub random_retry_after: Duration,
}

/// Every how many applied releases one loses its reply, for a percentage (0: never).
pub fn lost_every(pct: f64) -> u64 {
    if pct > 0.0 {
        (100.0 / pct).round().max(1.0) as u64
    } else {
        0
    }
}

/// The upstream's settings.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamConfig {
    /// Calls allowed per window.
    pub quota: u32,
    /// Its window and faults.
    pub terms: Terms,
    /// Seed.
    pub seed: u64,
}

/// The calls an account accepted over its last quota window.
#[derive(Debug, Default)]
pub struct QuotaWindow(VecDeque<Instant>);

impl QuotaWindow {
    /// Counts a call at `now` against `quota` calls per `window`: accepted, or refused with
    /// the wait until the oldest accepted call leaves the window.
    pub fn admit(&mut self, quota: u32, window: Duration, now: Instant) -> Result<(), Duration> {
        while self
            .0
            .front()
            .is_some_and(|t| now.duration_since(*t) >= window)
        {
            self.0.pop_front();
        }
        if self.0.len() >= quota as usize {
            return Err(self
                .0
                .front()
                .map_or(window, |t| window.saturating_sub(now.duration_since(*t))));
        }
        self.0.push_back(now);
        Ok(())
    }
}

/// Releases applied, and the idempotency keys seen.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Releases applied per reservation id.
    pub applied: HashMap<String, u32>,
    /// When each reservation was first released.
    pub first_applied: HashMap<String, Instant>,
    /// Repeats absorbed by an idempotency key.
    pub repeats: u64,
    keys: HashSet<String>,
    applies: u64,
}

/// Serves a call that reached a working account, with its quota and the dependency's
/// faults: a random 429, a 429 for the quota, a 422 for a malformed id, a repeat absorbed
/// by its idempotency key, a release whose reply is lost (502 after applying), or a release.
pub fn serve(
    terms: &Terms,
    rng: &mut StdRng,
    quota: (u32, &mut QuotaWindow),
    ledger: &mut Ledger,
    headers: &HeaderMap,
    body: &str,
    now: Instant,
) -> (CallKind, Response) {
    if terms.random_429 > 0.0 && rng.gen_bool(terms.random_429) {
        return (CallKind::Random429, too_many(terms.random_retry_after));
    }
    if let Err(wait) = quota.1.admit(quota.0, terms.window, now) {
        return (CallKind::Quota429, too_many(wait));
    }
    let id = match serde_json::from_str::<Release>(body) {
        Ok(r) if well_formed(&r.reservation_id) => r.reservation_id,
        _ => {
            return (
                CallKind::Malformed,
                (StatusCode::UNPROCESSABLE_ENTITY, "malformed reservation id").into_response(),
            );
        }
    };
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(k) = key
        && !ledger.keys.insert(k)
    {
        ledger.repeats += 1;
        return (
            CallKind::Repeat,
            (StatusCode::OK, "already released").into_response(),
        );
    }
    *ledger.applied.entry(id.clone()).or_insert(0) += 1;
    ledger.first_applied.entry(id).or_insert(now);
    ledger.applies += 1;
    let every = terms.lost_every;
    if every > 0 && ledger.applies % every == every / 2 {
        return (
            CallKind::LostReply,
            (StatusCode::BAD_GATEWAY, "reply lost").into_response(),
        );
    }
    (
        CallKind::Applied,
        (StatusCode::OK, "released").into_response(),
    )
}

/// A running upstream.
#[derive(Clone)]
pub struct Upstream {
    books: Arc<Mutex<Books>>,
    cfg: UpstreamConfig,
    /// Its address.
    pub addr: SocketAddr,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("addr", &self.addr)
            .finish()
    }
}

#[derive(Deserialize)]
struct Release {
    reservation_id: String,
}

/// Whether `id` is a well-formed reservation id: `R` and seven digits.
pub fn well_formed(id: &str) -> bool {
    id.len() == 8 && id.starts_with('R') && id[1..].bytes().all(|b| b.is_ascii_digit())
}

impl Upstream {
    /// Starts the server on 127.0.0.1 (a free port); it runs until `shutdown` resolves.
    pub async fn start(
        cfg: UpstreamConfig,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<Upstream> {
        let books = Arc::new(Mutex::new(Books {
            calls: Vec::new(),
            ledger: Ledger::default(),
            window: QuotaWindow::default(),
            paused: false,
            rng: StdRng::seed_from_u64(cfg.seed),
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let up = Upstream { books, cfg, addr };
        let app = axum::Router::new()
            .route("/release", post(release))
            .with_state(up.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %e, "drill upstream stopped");
            }
        });
        Ok(up)
    }

    /// The release URL.
    pub fn url(&self) -> String {
        format!("http://{}/release", self.addr)
    }

    /// The books, locked.
    pub fn books(&self) -> MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts or ends the outage.
    pub fn set_paused(&self, paused: bool) {
        self.books().paused = paused;
    }

    /// 429 share among the calls that arrived in the last `window` (0 when none).
    pub fn recent_429_share(&self, window: Duration) -> f64 {
        let b = self.books();
        let now = Instant::now();
        let recent: Vec<_> = b
            .calls
            .iter()
            .rev()
            .take_while(|c| now.duration_since(c.at) < window)
            .collect();
        if recent.is_empty() {
            return 0.0;
        }
        recent.iter().filter(|c| c.kind.is_429()).count() as f64 / recent.len() as f64
    }
}

/// A 429 asking to wait `wait`, in whole seconds and in milliseconds.
pub fn too_many(wait: Duration) -> Response {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    let ms = (wait.as_millis() as u64).max(1);
    (
        StatusCode::TOO_MANY_REQUESTS,
        [
            ("retry-after", secs.to_string()),
            ("retry-after-ms", ms.to_string()),
        ],
        "slow down",
    )
        .into_response()
}

async fn release(State(up): State<Upstream>, headers: HeaderMap, body: String) -> Response {
    let now = Instant::now();
    let cfg = up.cfg;
    let mut b = up.books();
    let b = &mut *b;
    let (kind, response) = if b.paused {
        (
            CallKind::Unavailable,
            (StatusCode::SERVICE_UNAVAILABLE, "down for maintenance").into_response(),
        )
    } else {
        serve(
            &cfg.terms,
            &mut b.rng,
            (cfg.quota, &mut b.window),
            &mut b.ledger,
            &headers,
            &body,
            now,
        )
    };
    b.calls.push(CallRecord { at: now, kind });
    response
}
