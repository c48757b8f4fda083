//! Idempotency keys and audit entries with two broker nodes on one PostgreSQL database: a key
//! sent to both nodes at the same moment has one effect and one answer (HTTP sends, schedule
//! triggers, redrive jobs, frame sends), and each redrive milestone is audited once however
//! many nodes run the redrive loop.
//!
//! Skipped with a loud message when PostgreSQL is not running, except under `CI=true`.
#![allow(clippy::unwrap_used)] // test helpers: a failure should panic the test

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::{Value, json};
use sluice_client::frames::{Body, FrameConnection, FrameMessage, GroupedFrameMessage};
use sluice_core::Store;
use sluice_postgres::{PostgresOptions, PostgresStore};
use sluice_server::{Broker, ServerOptions};
use sluice_testkit::postgres;

/// A broker node served on ephemeral loopback ports until dropped.
struct Node {
    url: String,
    frames: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

async fn serve(store: Arc<dyn Store>) -> Node {
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", http.local_addr().unwrap());
    let frames = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let frames_addr = frames.local_addr().unwrap();
    let broker = Broker::new(store, ServerOptions::default()).with_frames(frames);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(broker.serve(http, async {
        let _ = stopped.await;
    }));
    Node {
        url,
        frames: frames_addr,
        stop: Some(stop),
    }
}

/// Two nodes on a schema of their own; `None` (after a loud message) without PostgreSQL.
/// The schema guard comes first, so the schema is dropped after the nodes stop.
async fn two_nodes(prefix: &str) -> Option<(postgres::SchemaGuard, [Node; 2])> {
    if !postgres::available().await {
        return None;
    }
    let schema = postgres::unique_schema(prefix);
    let guard = postgres::SchemaGuard::new(schema.clone());
    let url = postgres::url();
    let open = |node: &str| {
        PostgresStore::open(
            &url,
            PostgresOptions {
                schema: schema.clone(),
                pool_size: 8,
                node_id: Some(node.to_owned()),
                ..PostgresOptions::default()
            },
        )
    };
    let a = open("a").await.unwrap();
    let b = open("b").await.unwrap();
    let nodes = [serve(Arc::new(a)).await, serve(Arc::new(b)).await];
    Some((guard, nodes))
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// One answer: status, body and whether it was marked a replay.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    status: u16,
    body: Value,
    replayed: bool,
}

async fn post(c: &reqwest::Client, url: String, key: Option<&str>, body: Option<Value>) -> Answer {
    let mut req = c.post(url);
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let replayed = resp.headers().get("idempotent-replayed").is_some();
    let text = resp.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap()
    };
    Answer {
        status,
        body,
        replayed,
    }
}

async fn call(c: &reqwest::Client, method: reqwest::Method, url: String, body: Value) -> Value {
    let resp = c
        .request(method, url.clone())
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{url}: {status} {v}");
    v
}

async fn get(c: &reqwest::Client, url: String) -> Value {
    let resp = c.get(url.clone()).send().await.unwrap();
    let status = resp.status();
    let v: Value = resp.json().await.unwrap();
    assert!(status.is_success(), "{url}: {status} {v}");
    v
}

/// Sends each key's request to both nodes at the same moment (every key at once) and checks
/// that each pair of answers is one answer: same status and body, exactly one of the two
/// the first (unmarked), the other its replay. Returns the first answers, by key.
async fn both_at_once(
    c: &reqwest::Client,
    nodes: &[Node; 2],
    path: impl Fn(usize) -> String,
    body: impl Fn(usize) -> Option<Value>,
    keys: usize,
) -> Vec<Answer> {
    let calls = (0..keys).flat_map(|i| {
        let (path, body) = (path(i), body(i));
        nodes.iter().map(move |n| {
            let url = format!("{}{}", n.url, path);
            let body = body.clone();
            async move { post(c, url, Some(&format!("k{i}")), body).await }
        })
    });
    let answers = join_all(calls).await;
    answers
        .chunks(2)
        .enumerate()
        .map(|(i, pair)| {
            let (x, y) = (&pair[0], &pair[1]);
            assert_eq!(
                (x.status, &x.body),
                (y.status, &y.body),
                "key k{i}: the two nodes answered differently"
            );
            assert!(
                x.replayed != y.replayed,
                "key k{i}: exactly one answer is the first, the other its replay: {x:?} {y:?}"
            );
            x.clone()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_sent_to_two_nodes_at_once_stores_one_message() {
    let Some((_guard, nodes)) = two_nodes("idem_send").await else {
        return;
    };
    let c = client();
    let a = &nodes[0].url;
    call(
        &c,
        reqwest::Method::PUT,
        format!("{a}/v1/queues/x5"),
        json!({}),
    )
    .await;
    let keys = 40;
    let answers = both_at_once(
        &c,
        &nodes,
        |_| "/v1/queues/x5/messages".to_owned(),
        |i| Some(json!({ "body": i })),
        keys,
    )
    .await;
    let mut ids = HashSet::new();
    for (i, x) in answers.iter().enumerate() {
        assert_eq!(x.status, 201, "k{i}: {x:?}");
        ids.insert(x.body["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), keys, "one message per key, each its own");
    let stats = get(&c, format!("{a}/v1/queues/x5/stats")).await;
    assert_eq!(stats["visible"], keys, "{stats}");

    // A retry of every key on either node later: the same answers, nothing stored.
    for (i, first) in answers.iter().enumerate() {
        for n in &nodes {
            let x = post(
                &c,
                format!("{}/v1/queues/x5/messages", n.url),
                Some(&format!("k{i}")),
                Some(json!({ "body": i })),
            )
            .await;
            assert!(x.replayed, "k{i}: {x:?}");
            assert_eq!((x.status, &x.body), (first.status, &first.body));
        }
    }
    // The same key with another body, on either node: refused, nothing stored.
    for n in &nodes {
        let x = post(
            &c,
            format!("{}/v1/queues/x5/messages", n.url),
            Some("k0"),
            Some(json!({ "body": "other" })),
        )
        .await;
        assert_eq!(x.status, 422, "{x:?}");
        assert_eq!(x.body["error"]["code"], "idempotency_mismatch");
    }
    let stats = get(&c, format!("{a}/v1/queues/x5/stats")).await;
    assert_eq!(stats["visible"], keys, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_fires_a_schedule_once_and_creates_one_redrive_job_across_nodes() {
    let Some((_guard, nodes)) = two_nodes("idem_sched").await else {
        return;
    };
    let c = client();
    let a = &nodes[0].url;
    let put = reqwest::Method::PUT;
    call(&c, put.clone(), format!("{a}/v1/queues/sweeps"), json!({})).await;
    call(
        &c,
        put.clone(),
        format!("{a}/v1/schedules/nightly"),
        json!({"cron": "30 2 * * *", "timezone": "UTC", "queue": "sweeps", "body": {"task": "x"}}),
    )
    .await;
    let keys = 10;
    let fired = both_at_once(
        &c,
        &nodes,
        |_| "/v1/schedules/nightly/trigger".to_owned(),
        |_| None,
        keys,
    )
    .await;
    let ids: HashSet<&str> = fired
        .iter()
        .map(|x| {
            assert_eq!(x.status, 200, "{x:?}");
            x.body["id"].as_str().unwrap()
        })
        .collect();
    // Triggers by hand within one millisecond are one firing (the schedule's own dedup id),
    // so keys sent at once may share an answer; what must hold is no firing beyond the
    // answers.
    assert!(!ids.is_empty());
    let stats = get(&c, format!("{a}/v1/queues/sweeps/stats")).await;
    assert_eq!(
        stats["visible"],
        ids.len(),
        "one firing per answer, none beyond: {stats}"
    );

    // Dry-run redrives, one source queue per key so that no job is refused for another.
    let sources = 5;
    for i in 0..sources {
        call(&c, put.clone(), format!("{a}/v1/queues/r{i}"), json!({})).await;
    }
    let jobs = both_at_once(
        &c,
        &nodes,
        |_| "/v1/redrives".to_owned(),
        |i| Some(json!({"source": format!("r{i}.dlq"), "dry_run": true})),
        sources,
    )
    .await;
    let ids: HashSet<String> = jobs
        .iter()
        .map(|x| {
            assert_eq!(x.status, 202, "{x:?}");
            x.body["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(ids.len(), sources);
    let listed = get(&c, format!("{a}/v1/redrives")).await;
    let listed = listed["redrives"]
        .as_array()
        .unwrap_or_else(|| panic!("a list of jobs: {listed}"))
        .clone();
    assert_eq!(
        listed.len(),
        sources,
        "one job per key, none more: {listed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_send_under_one_key_on_two_nodes_stores_once() {
    let Some((_guard, nodes)) = two_nodes("idem_frames").await else {
        return;
    };
    let c = client();
    let a = &nodes[0].url;
    call(
        &c,
        reqwest::Method::PUT,
        format!("{a}/v1/queues/f"),
        json!({}),
    )
    .await;
    let keys = 20;
    let batch = |i: usize| {
        vec![GroupedFrameMessage {
            message: FrameMessage::new(Body::text(format!("m{i}"))),
            group: None,
        }]
    };
    let sends = (0..keys).flat_map(|i| {
        nodes.iter().map(move |n| async move {
            let mut conn = FrameConnection::connect(n.frames, None).await.unwrap();
            conn.send_idempotent(&format!("k{i}"), "f", batch(i))
                .await
                .unwrap()
        })
    });
    let answers = join_all(sends).await;
    let mut ids = HashSet::new();
    for (i, pair) in answers.chunks(2).enumerate() {
        assert_eq!(pair[0], pair[1], "k{i}: the nodes answered differently");
        ids.insert(pair[0][0].id);
    }
    assert_eq!(ids.len(), keys);
    let stats = get(&c, format!("{a}/v1/queues/f/stats")).await;
    assert_eq!(stats["visible"], keys, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_milestones_are_audited_once_with_two_nodes() {
    let Some((_guard, nodes)) = two_nodes("idem_audit").await else {
        return;
    };
    let c = client();
    let a = &nodes[0].url;
    let put = reqwest::Method::PUT;
    let post = reqwest::Method::POST;
    call(&c, put.clone(), format!("{a}/v1/queues/dead"), json!({})).await;
    call(&c, put.clone(), format!("{a}/v1/queues/revived"), json!({})).await;
    let dead = 300;
    for chunk in (0..dead).collect::<Vec<_>>().chunks(100) {
        let messages: Vec<Value> = chunk.iter().map(|i| json!({"body": i})).collect();
        call(
            &c,
            post.clone(),
            format!("{a}/v1/queues/dead.dlq/messages"),
            json!({"messages": messages}),
        )
        .await;
    }
    // 100 a second: five per step, about three seconds, long enough for the node that does
    // not own the job to look at it several times.
    let job = call(
        &c,
        post.clone(),
        format!("{a}/v1/redrives"),
        json!({"source": "dead.dlq", "destination": "revived", "rate_per_second": 100, "limit": 280}),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let j = get(&c, format!("{}/v1/redrives/{id}", nodes[1].url)).await;
        if j["state"] == "completed" {
            assert_eq!(j["moved"], 280, "{j}");
            break;
        }
        assert!(Instant::now() < deadline, "the job did not finish: {j}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The nodes' loops may still be looking at the finished job: give them a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let audit = get(&c, format!("{a}/v1/audit?queue=dead.dlq&limit=1000")).await;
    let entries = audit["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("entries: {audit}"));
    let mut milestones: BTreeMap<String, usize> = BTreeMap::new();
    let mut finished = 0;
    for e in entries {
        match e["action"].as_str() {
            Some("redrive.progress") => {
                let mark = e["details"]["milestone"].as_str().unwrap().to_owned();
                *milestones.entry(mark).or_default() += 1;
            }
            Some("redrive.finish") => finished += 1,
            _ => {}
        }
    }
    let expected: BTreeMap<String, usize> = [
        "10",
        "100",
        "25% of limit 280",
        "50% of limit 280",
        "75% of limit 280",
    ]
    .into_iter()
    .map(|m| (m.to_owned(), 1))
    .collect();
    // A step that passes two milestones at once records the furthest: at five a step, none
    // of these are passed together.
    assert_eq!(milestones, expected, "each milestone audited once: {audit}");
    assert_eq!(finished, 1, "the finish audited once: {audit}");
}
