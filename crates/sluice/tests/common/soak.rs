//! Load and its accounting for tests that break things under it (a node killed, a database
//! primary killed): producers send batches of named bodies through any node, consumers on
//! every node receive and ack, abandoning some leases as crashed workers would; afterwards
//! [`Load::settle`] checks that every acknowledged send was delivered and acknowledged, and
//! [`Load::check_leases`] that no message was leased to two consumers at once.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The nodes' current URLs (a restarted node may listen on a new port).
pub trait Nodes: Send + Sync + 'static {
    /// The URL of node `i`, modulo the number of nodes.
    fn url(&self, i: usize) -> String;
}

/// A fixed list of nodes.
impl Nodes for Vec<String> {
    fn url(&self, i: usize) -> String {
        self[i % self.len()].clone()
    }
}

/// A call that fails when the node cannot serve it (connection refused or reset, or a 503
/// or 504). A 500 is a bug, whatever broke: it fails the test.
pub async fn call(
    c: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Value,
) -> Option<Value> {
    let mut req = c.request(method, url);
    if !body.is_null() {
        req = req.json(&body);
    }
    let resp = req.send().await.ok()?;
    if resp.status().is_server_error() {
        let status = resp.status();
        let said = resp.text().await.unwrap_or_default();
        assert!(
            matches!(status.as_u16(), 503 | 504),
            "a {status} instead of a 503: {said}"
        );
        return None;
    }
    assert!(resp.status().is_success(), "unexpected {}", resp.status());
    resp.json().await.ok()
}

/// Every message of queue `q`, in any state.
pub async fn browse(c: &reqwest::Client, base: &str, q: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{base}/v1/queues/{q}/messages?state=all&limit=1000");
        if let Some(cur) = &cursor {
            url.push_str(&format!("&cursor={cur}"));
        }
        let page = call(c, reqwest::Method::GET, url, Value::Null)
            .await
            .expect("browse");
        out.extend(
            page["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .cloned(),
        );
        match page["next_cursor"].as_str() {
            Some(cur) => cursor = Some(cur.to_string()),
            None => break,
        }
    }
    out
}

/// Milliseconds since the epoch of an RFC 3339 time.
pub fn millis(rfc3339: &str) -> i64 {
    let t = time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339)
        .expect("RFC 3339 time");
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).expect("ms")
}

/// One delivery as a consumer saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    body: String,
    receive_count: u64,
    lease_deadline: i64,
    acked: bool,
    /// Its ack was answered, and refused as stale: the lease was no longer current.
    ack_stale: bool,
    /// Its ack was sent but no answer came (the node or its database failed meanwhile): it
    /// may have been made.
    ack_unanswered: bool,
}

/// What the load is: how many producers, their batches, the queue's lease.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub producers: usize,
    pub consumers: usize,
    pub batch: usize,
    /// Batches each producer sends; `None` sends until [`Load::stop_producing`].
    pub batches: Option<usize>,
    /// The pause between a producer's batches.
    pub pause: Duration,
    /// The queue's `visibility_timeout_ms`.
    pub visibility_ms: i64,
    /// Whether each message carries its body as its `dedup_id`, so that a batch retried
    /// after a lost answer stores nothing twice (the queue's `dedup_window` must span the run).
    pub dedup: bool,
}

/// Running load on queue `work`.
pub struct Load {
    c: reqwest::Client,
    nodes: Arc<dyn Nodes>,
    shape: Shape,
    acked_sends: Arc<Mutex<BTreeSet<String>>>,
    seen: Arc<Mutex<HashMap<String, Vec<Seen>>>>,
    sent_batches: Arc<AtomicUsize>,
    stop_producing: Arc<AtomicBool>,
    stop_consuming: Arc<AtomicBool>,
    producers: Vec<tokio::task::JoinHandle<()>>,
    consumers: Vec<tokio::task::JoinHandle<()>>,
}

/// What the checks found, for the test's report.
#[derive(Debug, Default)]
pub struct Tally {
    /// Sends acknowledged (and all delivered and acked).
    pub acked_sends: usize,
    /// Deliveries of a message after an earlier one.
    pub redelivered: usize,
    /// Messages whose first delivery was abandoned on purpose.
    pub abandoned: usize,
    /// Leases the database lost (see [`Load::check_leases`]).
    pub lost_leases: usize,
    /// Acks refused as stale: their lease had ended or was lost.
    pub stale_acks: usize,
}

impl Load {
    /// Starts producers and consumers on queue `work` (which must exist with
    /// `shape.visibility_ms`), spread over `nodes`.
    pub fn start(c: &reqwest::Client, nodes: Arc<dyn Nodes>, shape: Shape) -> Load {
        let mut load = Load {
            c: c.clone(),
            nodes,
            shape,
            acked_sends: Arc::default(),
            seen: Arc::default(),
            sent_batches: Arc::default(),
            stop_producing: Arc::default(),
            stop_consuming: Arc::default(),
            producers: Vec::new(),
            consumers: Vec::new(),
        };
        for p in 0..shape.producers {
            load.producers.push(tokio::spawn(load.producer(p)));
        }
        for k in 0..shape.consumers {
            load.consumers.push(tokio::spawn(load.consumer(k)));
        }
        load
    }

    fn producer(&self, p: usize) -> impl std::future::Future<Output = ()> + use<> {
        let (c, nodes, acked, sent, stop, shape) = (
            self.c.clone(),
            self.nodes.clone(),
            self.acked_sends.clone(),
            self.sent_batches.clone(),
            self.stop_producing.clone(),
            self.shape,
        );
        async move {
            let mut node = p;
            let mut b = 0;
            while shape.batches.is_none_or(|n| b < n) && !stop.load(Ordering::SeqCst) {
                let bodies: Vec<String> = (0..shape.batch)
                    .map(|i| format!("p{p}-b{b}-m{i}"))
                    .collect();
                let messages: Vec<Value> = bodies
                    .iter()
                    .map(|s| match shape.dedup {
                        true => json!({"body": s, "dedup_id": s}),
                        false => json!({"body": s}),
                    })
                    .collect();
                // A batch whose answer was lost may be stored twice (at least once) unless
                // its messages carry dedup ids; only answered batches count as acknowledged.
                loop {
                    let url = format!("{}/v1/queues/work/messages", nodes.url(node));
                    let body = json!({"messages": messages});
                    if call(&c, reqwest::Method::POST, url, body).await.is_some() {
                        acked.lock().expect("acked").extend(bodies.iter().cloned());
                        sent.fetch_add(1, Ordering::SeqCst);
                        break;
                    }
                    node += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                b += 1;
                tokio::time::sleep(shape.pause).await;
            }
        }
    }

    fn consumer(&self, k: usize) -> impl std::future::Future<Output = ()> + use<> {
        let (c, nodes, stop, seen) = (
            self.c.clone(),
            self.nodes.clone(),
            self.stop_consuming.clone(),
            self.seen.clone(),
        );
        async move {
            let mut node = k;
            while !stop.load(Ordering::SeqCst) {
                let base = nodes.url(node);
                let Some(got) = call(
                    &c,
                    reqwest::Method::POST,
                    format!("{base}/v1/queues/work/receive"),
                    json!({"max": 10, "wait_ms": 300}),
                )
                .await
                else {
                    node += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let deliveries = got["messages"].as_array().cloned().unwrap_or_default();
                if deliveries.is_empty() {
                    continue;
                }
                // A consumer that dies mid-task abandons its lease: the first message of each
                // batch is dropped on its first delivery and comes back when the lease ends.
                let abandoned = |d: &Value| {
                    d["receive_count"] == 1
                        && d["body"].as_str().is_some_and(|b| b.ends_with("-m0"))
                };
                let kept: Vec<&Value> = deliveries.iter().filter(|d| !abandoned(d)).collect();
                let receipts: Vec<Value> = kept.iter().map(|d| d["receipt"].clone()).collect();
                let acks = if receipts.is_empty() {
                    None
                } else {
                    call(
                        &c,
                        reqwest::Method::POST,
                        format!("{base}/v1/queues/work/ack"),
                        json!({"receipts": receipts}),
                    )
                    .await
                };
                let mut seen = seen.lock().expect("seen");
                for d in &deliveries {
                    let result = kept
                        .iter()
                        .position(|k| k["id"] == d["id"])
                        .and_then(|i| acks.as_ref().map(|a| a["results"][i].clone()));
                    let acked = result
                        .as_ref()
                        .and_then(|r| r["ok"].as_bool())
                        .unwrap_or(false);
                    let ack_stale = result
                        .as_ref()
                        .is_some_and(|r| r["error"]["code"] == "receipt_stale");
                    seen.entry(d["id"].as_str().expect("id").to_string())
                        .or_default()
                        .push(Seen {
                            body: d["body"].as_str().expect("text body").to_string(),
                            receive_count: d["receive_count"].as_u64().expect("count"),
                            lease_deadline: millis(d["lease_deadline"].as_str().expect("deadline")),
                            acked,
                            ack_stale,
                            ack_unanswered: acks.is_none()
                                && kept.iter().any(|k| k["id"] == d["id"]),
                        });
                }
            }
        }
    }

    /// Batches acknowledged so far.
    pub fn sent_batches(&self) -> usize {
        self.sent_batches.load(Ordering::SeqCst)
    }

    /// Tells producers without a set number of batches to finish theirs.
    pub fn stop_producing(&self) {
        self.stop_producing.store(true, Ordering::SeqCst);
    }

    /// Waits for the producers, then until every acknowledged send has been delivered and
    /// acknowledged (within `within`), then stops the consumers. A message whose ack went
    /// unanswered counts when its task says SUCCESS.
    pub async fn settle(&mut self, within: Duration) -> usize {
        for p in self.producers.drain(..) {
            p.await.expect("producer");
        }
        let acked: BTreeSet<String> = self.acked_sends.lock().expect("acked").clone();
        if let Some(n) = self.shape.batches {
            assert_eq!(acked.len(), self.shape.producers * n * self.shape.batch);
        }
        let deadline = Instant::now() + within;
        loop {
            let received: BTreeSet<String> = self
                .seen
                .lock()
                .expect("seen")
                .values()
                .flatten()
                .filter(|s| s.acked)
                .map(|s| s.body.clone())
                .collect();
            let mut missing = Vec::new();
            for body in acked.difference(&received) {
                let unanswered: Vec<String> = self
                    .seen
                    .lock()
                    .expect("seen")
                    .iter()
                    .filter(|(_, ds)| ds.iter().any(|d| &d.body == body && d.ack_unanswered))
                    .map(|(id, _)| id.clone())
                    .collect();
                let mut done = false;
                for id in unanswered {
                    let url = format!("{}/v1/tasks/{id}", self.nodes.url(1));
                    let task = call(&self.c, reqwest::Method::GET, url, Value::Null).await;
                    done |= task
                        .is_some_and(|t| t["status"] == sluice_core::TaskStatus::Success.as_str());
                }
                if !done {
                    missing.push(body.clone());
                }
            }
            if missing.is_empty() {
                break;
            }
            missing.truncate(5);
            assert!(
                Instant::now() < deadline,
                "acknowledged sends never delivered and acknowledged, e.g. {missing:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.stop_consuming.store(true, Ordering::SeqCst);
        for k in self.consumers.drain(..) {
            k.await.expect("consumer");
        }
        acked.len()
    }

    /// Each body was stored once: every delivery of it is of one message. Meaningful with
    /// [`Shape::dedup`], where a batch retried after a lost answer must store nothing twice.
    pub fn check_stored_once(&self) {
        let seen = self.seen.lock().expect("seen");
        let mut ids: HashMap<&str, BTreeSet<&str>> = HashMap::new();
        for (id, ds) in seen.iter() {
            for d in ds {
                ids.entry(d.body.as_str()).or_default().insert(id.as_str());
            }
        }
        let twice: Vec<_> = ids.iter().filter(|(_, i)| i.len() > 1).take(5).collect();
        assert!(
            twice.is_empty(),
            "bodies stored twice despite their dedup ids: {twice:?}"
        );
    }

    /// No lease held by two consumers at once: a message delivered again was delivered after
    /// its previous lease ended (a lease starts `visibility_ms` before its deadline), and an
    /// acknowledged delivery was its last.
    ///
    /// With `lost_leases`, a database that lost its last moments (a primary killed, whose
    /// leases commit without waiting for the WAL flush) may have lost a lease: the message is
    /// then delivered again with the same receive count while the first lease would still
    /// run, and the first delivery's ack must have been refused as stale — never made.
    pub fn check_leases(&self, lost_leases: bool) -> Tally {
        let seen = self.seen.lock().expect("seen").clone();
        let mut tally = Tally::default();
        let visibility = self.shape.visibility_ms;
        for (id, mut ds) in seen {
            // Abandoned on a first delivery this test saw (a first delivery whose answer was
            // lost with its node shows up here as a second one, and is not abandoned).
            tally.abandoned += usize::from(
                ds.iter()
                    .any(|d| d.receive_count == 1 && d.body.ends_with("-m0")),
            );
            tally.stale_acks += ds.iter().filter(|d| d.ack_stale).count();
            ds.sort_by_key(|d| (d.receive_count, d.lease_deadline));
            for pair in ds.windows(2) {
                tally.redelivered += 1;
                let lost = pair[0].receive_count == pair[1].receive_count;
                if lost {
                    assert!(
                        lost_leases,
                        "message {id} delivered twice with one count: {ds:?}"
                    );
                    assert!(
                        !pair[0].acked,
                        "message {id}: a lost lease's ack was made: {ds:?}"
                    );
                    tally.lost_leases += 1;
                    continue;
                }
                assert!(
                    !pair[0].acked,
                    "message {id} delivered again after an ack: {ds:?}"
                );
                assert!(
                    pair[1].lease_deadline - visibility >= pair[0].lease_deadline,
                    "message {id} leased again before its previous lease ended: {ds:?}"
                );
            }
        }
        tally
    }
}
