//! Crash safety, for real: the engine runs in a child process that is killed with SIGKILL at
//! random moments while it sends, leases and acknowledges at load. After each kill the data
//! directory is reopened and checked against what the child reported as acknowledged:
//! - every send that returned Ok is present (or was acknowledged), byte-exact;
//! - nothing whose ack returned Ok comes back;
//! - a lease granted before the crash keeps its receipt: acking with it still works.
//!
//! The child is this same test binary, re-run with `SLUICE_CRASH_CHILD` set.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use sluice_core::store::prelude::*;
use sluice_core::{
    AckRequest, Body, Checked, MessageId, MessageState, NewMessage, QueueConfigPatch, QueueName,
    Receipt, ReceiveRequest, StoreError,
};
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};

const CHILD_ENV: &str = "SLUICE_CRASH_CHILD";
const KILLS: usize = 25;

fn queue() -> QueueName {
    QueueName::new("crash").expect("valid name")
}

fn open(dir: &std::path::Path) -> Checked<EmbeddedStore> {
    for _ in 0..200 {
        match EmbeddedStore::open(dir, EmbeddedOptions::default()) {
            Ok((s, _)) => return s,
            Err(sluice_embedded::OpenError::Locked(_)) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("recovery failed: {e}"),
        }
    }
    panic!("data directory still locked");
}

/// The child: load until killed, reporting each acknowledged operation on stdout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = Arc::new(open(std::path::Path::new(&dir)));
    let q = queue();
    store
        .put_queue(&q, &QueueConfigPatch::default())
        .await
        .expect("create queue");
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let say = {
        let out = out.clone();
        move |line: String| {
            let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
            writeln!(o, "{line}").expect("stdout");
            o.flush().expect("flush");
        }
    };
    let mut tasks = Vec::new();
    for p in 0..4u32 {
        let (store, q, say) = (store.clone(), q.clone(), say.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0u64.. {
                let batch = 1 + (n % 20) as usize;
                let bodies: Vec<String> = (0..batch).map(|i| format!("p{p}-{n}-{i}")).collect();
                let msgs = bodies
                    .iter()
                    .map(|b| NewMessage::new(Body::text(b.clone())))
                    .collect();
                let ids = store.send(&q, msgs).await.expect("send");
                for (b, o) in bodies.iter().zip(ids) {
                    say(format!("SENT {} {b}", o.id));
                }
            }
        }));
    }
    for _ in 0..2 {
        let (store, q, say) = (store.clone(), q.clone(), say.clone());
        tasks.push(tokio::spawn(async move {
            let req = ReceiveRequest {
                max: 25,
                visibility: Some(Duration::from_secs(600)),
                ..Default::default()
            };
            loop {
                let got = store.receive(&q, req.clone()).await.expect("receive");
                let mut acks = Vec::new();
                for d in got {
                    say(format!("LEASE {} {}", d.id, d.receipt));
                    // Keep one in ten leased, to check receipts across the crash.
                    if d.id.0 % 10 != 0 {
                        acks.push(AckRequest {
                            receipt: d.receipt,
                            result: None,
                        });
                    }
                }
                if acks.is_empty() {
                    continue;
                }
                let ids: Vec<MessageId> = acks.iter().map(|a| a.receipt.id).collect();
                for (id, r) in ids.iter().zip(store.ack(&q, acks).await.expect("ack")) {
                    r.expect("fresh receipt acks");
                    say(format!("ACKED {id}"));
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

#[derive(Default)]
struct Reported {
    sent: HashMap<MessageId, String>,
    leased: HashMap<MessageId, Receipt>,
    acked: HashSet<MessageId>,
}

fn parse(line: &str, r: &mut Reported) {
    let mut parts = line.split(' ');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("SENT"), Some(id), Some(body)) => {
            r.sent.insert(id.parse().expect("id"), body.to_string());
        }
        (Some("LEASE"), Some(id), Some(receipt)) => {
            r.leased
                .insert(id.parse().expect("id"), receipt.parse().expect("receipt"));
        }
        (Some("ACKED"), Some(id), None) => {
            r.acked.insert(id.parse().expect("id"));
        }
        _ => {} // a line cut by the kill, or test-harness chatter
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_nothing_acknowledged() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = std::env::current_exe().expect("test binary path");
    let mut rng = rand::thread_rng();
    let mut reported = Reported::default();
    let child_log = dir.path().join("child-stderr.log");
    for round in 0..KILLS {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(
                std::fs::File::create(&child_log).expect("child log"),
            ))
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("piped stdout");
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => lines.push(l),
                    Err(_) => break,
                }
            }
            lines
        });
        let run = Duration::from_millis(rng.gen_range(150..600));
        std::thread::sleep(run);
        // SIGKILL: no destructor, no flush, no goodbye.
        child.kill().expect("SIGKILL the child");
        child.wait().expect("reap child");
        for line in reader.join().expect("reader thread") {
            parse(&line, &mut reported);
        }
        verify(dir.path(), &reported, round).await;
    }
    assert!(
        reported.sent.len() > 1000,
        "the load was too light to prove much: {} sends; the last child said:\n{}",
        reported.sent.len(),
        std::fs::read_to_string(&child_log).unwrap_or_default()
    );
    assert!(!reported.acked.is_empty(), "no acks observed");
    eprintln!(
        "{KILLS} kills: {} sends, {} leases, {} acks checked",
        reported.sent.len(),
        reported.leased.len(),
        reported.acked.len()
    );
}

async fn verify(dir: &std::path::Path, r: &Reported, round: usize) {
    let store = open(dir);
    for (id, body) in &r.sent {
        match store.get_message(*id).await {
            Ok(m) if m.state == MessageState::Completed => {}
            Ok(m) => {
                assert!(
                    !r.acked.contains(id),
                    "round {round}: acked message {id} came back as {:?}",
                    m.state
                );
                assert_eq!(
                    m.body.as_ref().map(|b| b.bytes.as_ref()),
                    Some(body.as_bytes()),
                    "round {round}: body of {id} changed"
                );
            }
            Err(e) => panic!("round {round}: acknowledged send {id} ({body}) lost: {e}"),
        }
    }
    for id in &r.acked {
        let m = store
            .get_message(*id)
            .await
            .expect("completed record kept for result_ttl");
        assert_eq!(
            m.state,
            MessageState::Completed,
            "round {round}: acked {id} is {:?}",
            m.state
        );
    }
    // Leases still open at the crash keep working receipts (the child leases for 10 minutes).
    let q = queue();
    let mut checked = 0;
    for (id, receipt) in &r.leased {
        if r.acked.contains(id) {
            continue;
        }
        let Ok(m) = store.get_message(*id).await else {
            continue;
        };
        if m.state != MessageState::InFlight {
            continue;
        }
        // Only the newest lease of a message is current; an older receipt must be stale.
        let res = store
            .ack(
                &q,
                vec![AckRequest {
                    receipt: *receipt,
                    result: None,
                }],
            )
            .await
            .expect("ack call");
        match &res[0] {
            Ok(()) => checked += 1,
            Err(StoreError::ReceiptStale) => {
                panic!("round {round}: receipt of {id} leased before the crash went stale")
            }
            Err(e) => panic!("round {round}: ack failed: {e}"),
        }
        if checked >= 20 {
            break;
        }
    }
    // Make the receive side able to continue: nothing else to do; drop releases the lock.
    drop(store);
    let _ = ReceiveRequest::default();
}
