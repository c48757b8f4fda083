//! The workload: reservations and their expiry tasks, the injected faults, and the worker
//! that releases expired seats.
//!
//! Each reservation `R0000042` made at scenario time `t` gets an `expire_reservation` task
//! delayed to `t + hold`, payload `{reservation_id, student_id, expires_at}` (`expires_at` in
//! Unix milliseconds, real time). Poison messages carry a malformed id (`R-bad-<n>`); the
//! undecodable bodies are raw bytes that are not JSON. Both are spread evenly among the
//! reservations.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use sluice_client::{
    Client, OutgoingMessage, RateLimiter, TaskContext, TaskEnvelope, TaskError, Worker,
};

use super::scenario::{Clock, Scenario};
use super::upstream::well_formed;

/// The task name.
pub const TASK: &str = "expire_reservation";

/// The payload of an expiry task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Expiry {
    /// The reservation.
    pub reservation_id: String,
    /// Who holds the seat.
    pub student_id: u64,
    /// When the hold ends, Unix ms (real time).
    pub expires_at: i64,
    /// The tenant it belongs to (`sluice drill --tenants`): the message's key, and the
    /// upstream path its release is posted to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// One planned message.
#[derive(Debug, Clone)]
pub enum Item {
    /// A valid or poison expiry task.
    Task(Expiry),
    /// Raw bytes.
    Raw(Vec<u8>),
}

/// The plan: what is sent, and when it becomes due (scenario minutes).
#[derive(Debug, Default)]
pub struct Plan {
    /// (due minute, item).
    pub items: Vec<(f64, Item)>,
    /// Ids of the valid reservations.
    pub valid_ids: Vec<String>,
    /// Ids of the poison messages.
    pub poison_ids: Vec<String>,
    /// The undecodable bodies.
    pub raw_bodies: Vec<Vec<u8>>,
}

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Builds the plan. `epoch` is the wall-clock time of the scenario start.
pub fn plan(sc: &Scenario, clock: &Clock, epoch: SystemTime) -> Plan {
    let mut rng = StdRng::seed_from_u64(sc.seed ^ 0x5eed);
    let hold_min = sc.hold.as_secs_f64() / 60.0;
    let window_min = sc.arrival_window.as_secs_f64() / 60.0;
    let total = sc.reservations + sc.poison + sc.undecodable;
    let mut p = Plan::default();
    // Every (reservations / poison)-th slot is poison, and likewise for the raw bodies.
    let every = |n: u32| total.checked_div(n).map_or(u32::MAX, |e| e.max(1));
    let (pe, re) = (every(sc.poison), every(sc.undecodable));
    let (mut np, mut nr, mut nv) = (0u32, 0u32, 0u32);
    for slot in 0..total {
        let reserved = window_min * (f64::from(slot) + rng.gen_range(0.0..1.0)) / f64::from(total);
        let due = hold_min + reserved;
        let expires_at = unix_ms(epoch + clock.real(Duration::from_secs_f64(due * 60.0)));
        let item = if np < sc.poison && slot % pe == pe / 2 {
            np += 1;
            let id = format!("R-bad-{np}");
            p.poison_ids.push(id.clone());
            Item::Task(Expiry {
                reservation_id: id,
                student_id: u64::from(slot),
                expires_at,
                tenant: None,
            })
        } else if nr < sc.undecodable && slot % re == re / 3 && nv + np + nr < total {
            nr += 1;
            let mut bytes = vec![0xff, 0xfe, b'{', 0x00];
            bytes.extend_from_slice(format!("undecodable #{nr} \u{1}").as_bytes());
            bytes.push(0x80 | (nr as u8 & 0x3f));
            p.raw_bodies.push(bytes.clone());
            Item::Raw(bytes)
        } else if nv < sc.reservations {
            nv += 1;
            let id = format!("R{nv:07}");
            p.valid_ids.push(id.clone());
            Item::Task(Expiry {
                reservation_id: id,
                student_id: 100_000 + u64::from(slot),
                expires_at,
                tenant: None,
            })
        } else if np < sc.poison {
            np += 1;
            let id = format!("R-bad-{np}");
            p.poison_ids.push(id.clone());
            Item::Task(Expiry {
                reservation_id: id,
                student_id: u64::from(slot),
                expires_at,
                tenant: None,
            })
        } else {
            nr += 1;
            let bytes = format!("\u{0}raw-{nr}\u{ff}").into_bytes();
            p.raw_bodies.push(bytes.clone());
            Item::Raw(bytes)
        };
        p.items.push((due, item));
    }
    p
}

/// Sends every planned message, delayed to its due time. Returns how many were sent.
pub async fn enqueue(
    client: &Client,
    queue: &str,
    plan: &Plan,
    clock: &Clock,
) -> anyhow::Result<usize> {
    let mut sent = 0;
    for chunk in plan.items.chunks(500) {
        let now = std::time::Instant::now();
        let mut batch = Vec::with_capacity(chunk.len());
        for (due, item) in chunk {
            let delay = clock.instant_of(*due).saturating_duration_since(now);
            let msg = match item {
                Item::Task(e) => {
                    let m = TaskEnvelope::new(TASK, e)?.to_message()?;
                    match &e.tenant {
                        Some(t) => m.key(t.clone()),
                        None => m,
                    }
                }
                Item::Raw(b) => OutgoingMessage::bytes(b.clone()),
            };
            batch.push(msg.delay(delay));
        }
        sent += client.send_batch(queue, batch).await?.ids.len();
    }
    Ok(sent)
}

/// How the worker behaves.
#[derive(Debug, Clone)]
pub struct WorkerPlan {
    /// Tasks running at once.
    pub concurrency: usize,
    /// The shared limiter; `None`: the worker calls as fast as deliveries come (the queue
    /// paces them).
    pub limiter: Option<RateLimiter>,
    /// The upstream's release URL (a task with a tenant posts to `<url>/<tenant>`).
    pub upstream_url: String,
    /// Send `Idempotency-Key: expire:<id>`.
    pub idempotency_key: bool,
    /// Retry permanent errors (a misconfiguration).
    pub retry_permanent: bool,
    /// Lease length (real).
    pub visibility: Duration,
    /// Long-poll wait (real).
    pub poll_wait: Duration,
}

fn retry_after(h: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok());
    get("retry-after-ms")
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .or_else(|| {
            get("retry-after")
                .and_then(|v| v.parse().ok())
                .map(Duration::from_secs)
        })
}

/// Builds the worker of `queue`.
pub fn worker(client: Client, queue: &str, wp: &WorkerPlan) -> anyhow::Result<Worker> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let wp2 = wp.clone();
    let permanent = move |msg: String| {
        if wp2.retry_permanent {
            TaskError::transient(msg)
        } else {
            TaskError::permanent(msg)
        }
    };
    let (limiter, url, key) = (
        wp.limiter.clone(),
        wp.upstream_url.clone(),
        wp.idempotency_key,
    );
    let w = Worker::builder(client, queue)
        .concurrency(wp.concurrency)
        .batch(u32::try_from(wp.concurrency.min(100)).unwrap_or(100))
        .poll_wait(wp.poll_wait)
        .visibility(wp.visibility)
        .shutdown_grace(Duration::from_secs(2))
        .max_backoff(Duration::from_millis(500))
        .consumer("sluice-drill")
        .handler(TASK, move |_ctx: TaskContext, e: Expiry| {
            let (limiter, http, url, permanent) =
                (limiter.clone(), http.clone(), url.clone(), permanent);
            async move {
                if !well_formed(&e.reservation_id) {
                    return Err(permanent(format!(
                        "malformed reservation id \"{}\"",
                        e.reservation_id
                    )));
                }
                // Re-check the deadline: never release a seat before its hold ends.
                let now = unix_ms(SystemTime::now());
                if now + 1 < e.expires_at {
                    let wait =
                        Duration::from_millis(u64::try_from(e.expires_at - now).unwrap_or(0));
                    return Err(TaskError::retry_in("hold not over yet", wait));
                }
                if let Some(l) = &limiter {
                    l.acquire().await;
                }
                let target = match &e.tenant {
                    Some(t) => format!("{url}/{t}"),
                    None => url.clone(),
                };
                let mut req = http.post(&target).json(&BTreeMap::from([(
                    "reservation_id",
                    e.reservation_id.as_str(),
                )]));
                if key {
                    req = req.header("idempotency-key", format!("expire:{}", e.reservation_id));
                }
                let resp = match req.send().await {
                    Ok(r) => r,
                    Err(err) => {
                        return Err(TaskError::transient(format!(
                            "upstream unavailable ({err})"
                        )));
                    }
                };
                let status = resp.status().as_u16();
                match status {
                    200..=299 => Ok(()),
                    429 => {
                        let wait = retry_after(resp.headers()).unwrap_or(Duration::from_secs(1));
                        if let Some(l) = &limiter {
                            l.hold_off(wait);
                        }
                        Err(TaskError::retry_after("upstream rate limited (429)", wait))
                    }
                    500..=599 => Err(TaskError::transient(format!(
                        "upstream unavailable ({status})"
                    ))),
                    _ => Err(permanent(format!(
                        "upstream refused the release ({status})"
                    ))),
                }
            }
        })
        .build()?;
    Ok(w)
}
