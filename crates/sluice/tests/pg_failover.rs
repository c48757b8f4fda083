//! Two broker nodes on a highly available PostgreSQL lose their primary, several times.
//!
//! The database is two Patroni-managed servers with synchronous replication and one etcd
//! member (`sluice_testkit::patroni`); the nodes reach it through a multi-host connection
//! string with `target_session_attrs=read-write`, node 0 through the test kit's fault proxies.
//! Under load — producers and consumers spread over both nodes, some leases abandoned, a
//! redrive job moving dead letters at a bounded rate, a schedule firing every second:
//!
//! - the synchronous standby's machine dies once in strict synchronous mode: the primary
//!   commits nothing until the standby is back, and sends answer 503 by their deadline,
//!   never hang, while `/readyz` says not ready;
//! - node 0's network to the database blackholes, then goes half-open, for 8 s each;
//! - the primary's machine (SIGKILL of its Patroni and postmaster) dies three times, back and
//!   forth.
//!
//! Afterwards, with the soak's accounting: every acknowledged send was delivered and
//! acknowledged, no acknowledged ack came back, no message was leased to two consumers at once
//! except where the dead primary lost a lease (leases commit without waiting for the WAL: the
//! message comes back and the lost lease's ack is refused as stale), the redrive moved every
//! dead letter exactly once, and the schedule fired each second once, none twice and none
//! skipped.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::soak::call;
use serde_json::{Value, json};
use sluice_testkit::faults::{Fault, FaultProxy};
use sluice_testkit::patroni::HaPostgres;

mod common;

const FAILOVERS: usize = 3;
const DEAD: usize = 400;
const VISIBILITY_MS: i64 = 5_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_failovers_cost_seconds_of_503_and_nothing_else() {
    let Some(mut db) = HaPostgres::start().await else {
        return;
    };
    // Node 0 reaches the members through fault proxies, node 1 directly.
    let mut proxies = Vec::new();
    for addr in db.addrs() {
        proxies.push(FaultProxy::start(addr).await.expect("proxy"));
    }
    let proxied: Vec<_> = proxies.iter().map(FaultProxy::addr).collect();
    let stores = [db.url_via(&proxied), db.url()];
    let nodes: Vec<(common::Served, String)> = stores
        .iter()
        .map(|url| {
            let store = format!("{url}&schema=failover");
            common::serve_store_and(&store, Stdio::null(), &["--request-timeout", "3s"])
        })
        .collect();
    let urls: Vec<String> = nodes.iter().map(|(_, u)| u.clone()).collect();
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let (put, post, get) = (
        reqwest::Method::PUT,
        reqwest::Method::POST,
        reqwest::Method::GET,
    );
    let n0 = &urls[0];
    for (q, cfg) in [
        (
            "work",
            json!({"visibility_timeout_ms": VISIBILITY_MS, "dedup_window_ms": 3_600_000}),
        ),
        ("dead", json!({})),
        ("revived", json!({})),
        ("ticks", json!({})),
    ] {
        call(&c, put.clone(), format!("{n0}/v1/queues/{q}"), cfg)
            .await
            .expect("create queue");
    }
    for chunk in (0..DEAD).collect::<Vec<_>>().chunks(100) {
        let messages: Vec<Value> = chunk.iter().map(|i| json!({"body": {"dead": i}})).collect();
        let url = format!("{n0}/v1/queues/dead.dlq/messages");
        call(&c, post.clone(), url, json!({"messages": messages}))
            .await
            .expect("fill the DLQ");
    }
    let schedule = json!({"every_ms": 1000, "queue": "ticks", "body": "tick", "catch_up": "all"});
    call(&c, put.clone(), format!("{n0}/v1/schedules/tick"), schedule)
        .await
        .expect("schedule");
    // Slow enough to span the failovers.
    let redrive = json!({"source": "dead.dlq", "destination": "revived", "rate_per_second": 4});
    let job = call(&c, post.clone(), format!("{n0}/v1/redrives"), redrive)
        .await
        .expect("create redrive");
    let job_id = job["id"].as_str().expect("job id").to_string();

    let shape = common::soak::Shape {
        producers: 2,
        consumers: 2,
        batch: 10,
        batches: None,
        pause: Duration::from_millis(50),
        visibility_ms: VISIBILITY_MS,
        dedup: true,
    };
    let mut load = common::soak::Load::start(&c, Arc::new(urls.clone()), shape);

    // The synchronous standby dies first, in strict synchronous mode: the primary accepts
    // connections and commits nothing until a standby is back. Meanwhile every send answers
    // 503 by its deadline (3 s here), never hangs, and /readyz says not ready.
    tokio::time::sleep(Duration::from_secs(3)).await;
    db.set_strict(true);
    let leader = db.leader().await.expect("a leader");
    let standby = 1 - leader;
    let killed = Instant::now();
    db.kill(standby);
    let (mut longest, mut refused) = (Duration::ZERO, 0);
    let mut restarted = None;
    let stalled = loop {
        let sent = Instant::now();
        let url = format!("{}/v1/queues/work/messages", urls[0]);
        let probe = json!({"messages": [{"body": format!("probe-standby-{refused}")}]});
        let ok = call(&c, post.clone(), url, probe).await.is_some();
        longest = longest.max(sent.elapsed());
        if ok {
            break killed.elapsed();
        }
        refused += 1;
        if restarted.is_none() && killed.elapsed() > Duration::from_secs(8) {
            let ready = c.get(format!("{}/readyz", urls[1])).send().await;
            let ready = ready.expect("readyz answers").status().as_u16();
            assert_eq!(
                ready, 503,
                "a node whose database cannot commit is not ready"
            );
            db.restart(standby);
            restarted = Some(killed.elapsed());
        }
        assert!(
            killed.elapsed() < Duration::from_secs(120),
            "no commit 120 s after the standby died"
        );
    };
    assert!(
        refused >= 2,
        "sends were refused while nothing could commit"
    );
    assert!(
        longest < Duration::from_secs(6),
        "a send took {longest:?}: the request deadline is 3 s"
    );
    db.wait_healthy(Duration::from_secs(120)).await;
    db.set_strict(false);
    eprintln!(
        "standby killed (strict synchronous mode): {refused} sends answered 503, the longest \
         after {longest:?}; standby restarted after {restarted:?}, commits resumed after \
         {stalled:?}"
    );

    // Node 0's network to the database blackholes, then goes half-open, for a while each:
    // it answers 503 by its deadline and is not ready; the load goes on through node 1.
    for fault in [Fault::Blackhole, Fault::HalfOpen] {
        let before = load.sent_batches();
        for p in &proxies {
            p.set(fault);
        }
        tokio::time::sleep(Duration::from_secs(4)).await;
        let ready = c.get(format!("{}/readyz", urls[0])).send().await;
        let ready = ready.expect("readyz answers").status().as_u16();
        assert_eq!(ready, 503, "node 0 behind a {fault:?} is not ready");
        tokio::time::sleep(Duration::from_secs(4)).await;
        for p in &proxies {
            p.set(Fault::None);
        }
        let healed = Instant::now();
        loop {
            let ready = c.get(format!("{}/readyz", urls[0])).send().await;
            if ready.is_ok_and(|r| r.status() == 200) {
                break;
            }
            assert!(
                healed.elapsed() < Duration::from_secs(30),
                "node 0 did not rejoin"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "node 0 behind a {fault:?} for 8 s: {} batches acknowledged meanwhile (through \
             node 1); ready again {:?} after the network returned",
            load.sent_batches() - before,
            healed.elapsed()
        );
    }

    let mut outages = Vec::new();
    for round in 0..FAILOVERS {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let leader = db.leader().await.expect("a leader before the kill");
        let before = load.sent_batches();
        let killed = Instant::now();
        db.kill(leader);
        // Service is back when a send through a node is acknowledged again; the database is
        // back when a member other than the dead one takes writes.
        let mut promoted = None;
        let mut attempt = 0;
        let back = loop {
            attempt += 1;
            if promoted.is_none() && db.leader().await.is_some_and(|l| l != leader) {
                promoted = Some(killed.elapsed());
            }
            let url = format!("{}/v1/queues/work/messages", urls[round % 2]);
            let probe = json!({"messages": [{"body": format!("probe-{round}-{attempt}")}]});
            if call(&c, post.clone(), url, probe).await.is_some() {
                break killed.elapsed();
            }
            assert!(
                killed.elapsed() < Duration::from_secs(90),
                "no service 90 s after the primary died"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let promoted = promoted.unwrap_or(back);
        let new_leader = db.leader().await.expect("a new leader");
        assert_ne!(new_leader, leader, "the other member took over");
        db.restart(leader);
        db.wait_healthy(Duration::from_secs(120)).await;
        outages.push((back, back.saturating_sub(promoted)));
        eprintln!(
            "failover {}: member {leader} killed, new primary took writes after {promoted:?}, \
             service back after {back:?}; {} batches acknowledged during and since",
            round + 1,
            load.sent_batches() - before
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    load.stop_producing();
    let acked = load.settle(Duration::from_secs(120)).await;
    let tally = load.check_leases(true);
    load.check_stored_once();
    assert!(
        tally.redelivered >= tally.abandoned,
        "abandoned leases were delivered again ({tally:?})"
    );

    // Wake-ups between nodes came back with the new primary: a long poll on one node is
    // woken by a send on the other at once (NOTIFY), not at the one-second fallback poll.
    call(&c, put.clone(), format!("{n0}/v1/queues/wake"), json!({}))
        .await
        .expect("create queue");
    let mut woken = Vec::new();
    for trial in 0..6 {
        let (waiter, sender) = (&urls[trial % 2], urls[(trial + 1) % 2].clone());
        let receive = call(
            &c,
            post.clone(),
            format!("{waiter}/v1/queues/wake/receive"),
            json!({"wait_ms": 10_000}),
        );
        let send = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let url = format!("{sender}/v1/queues/wake/messages");
            call(&c, post.clone(), url, json!({"body": trial}))
                .await
                .expect("send");
            Instant::now()
        };
        let (got, sent_at) = tokio::join!(receive, send);
        woken.push(sent_at.elapsed());
        let got = got.expect("receive");
        let receipt = got["messages"][0]["receipt"].clone();
        call(
            &c,
            post.clone(),
            format!("{waiter}/v1/queues/wake/ack"),
            json!({"receipt": receipt}),
        )
        .await
        .expect("ack");
    }
    assert!(
        woken.iter().all(|w| *w < Duration::from_millis(400)),
        "long polls woken by the other node's sends after {woken:?}: LISTEN not back"
    );

    // The redrive finished, each dead letter moved once.
    let deadline = Instant::now() + Duration::from_secs(180);
    let job = loop {
        let url = format!("{}/v1/redrives/{job_id}", urls[1]);
        let j = call(&c, get.clone(), url, Value::Null).await;
        if let Some(j) = j.filter(|j| j["state"] == "completed") {
            break j;
        }
        assert!(Instant::now() < deadline, "the redrive never finished");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(job["moved"].as_u64(), Some(DEAD as u64), "{job}");
    let revived = common::soak::browse(&c, &urls[0], "revived").await;
    let mut moved = BTreeMap::new();
    for m in &revived {
        *moved.entry(m["body"]["dead"].to_string()).or_insert(0) += 1;
    }
    assert_eq!(moved.len(), DEAD, "every dead letter in the destination");
    assert!(moved.values().all(|n| *n == 1), "each exactly once");

    // The schedule fired every second once: no firing twice, none skipped.
    call(
        &c,
        post.clone(),
        format!("{n0}/v1/schedules/tick/pause"),
        Value::Null,
    )
    .await
    .expect("pause the schedule");
    let ticks = common::soak::browse(&c, &urls[0], "ticks").await;
    let mut fired: Vec<String> = ticks
        .iter()
        .map(|m| {
            m["attributes"]["scheduled_for"]
                .as_str()
                .expect("scheduled_for")
                .to_string()
        })
        .collect();
    fired.sort();
    let distinct: std::collections::BTreeSet<&String> = fired.iter().collect();
    assert_eq!(
        distinct.len(),
        fired.len(),
        "a firing enqueued twice: {fired:?}"
    );
    let times: Vec<i64> = fired.iter().map(|t| common::soak::millis(t)).collect();
    let gaps: Vec<i64> = times
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|d| *d != 1000)
        .collect();
    assert!(
        gaps.is_empty(),
        "firings skipped or doubled (gaps in ms: {gaps:?})"
    );

    eprintln!(
        "{FAILOVERS} primary failovers under load: (service back after the kill, after the \
         promotion) {outages:?}; {acked} \
         acknowledged sends all delivered, {} redeliveries, {} leases lost with a primary \
         (their acks refused as stale), {} stale acks in all; redrive moved {DEAD} once each; \
         {} schedule firings, one a second, none twice; long polls woken across nodes after \
         {woken:?}",
        tally.redelivered,
        tally.lost_leases,
        tally.stale_acks,
        fired.len()
    );
    drop(nodes);
    drop(proxies);
    drop(db);
}
