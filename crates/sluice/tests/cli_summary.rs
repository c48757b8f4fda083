//! `sluice dlq summary` and `sluice dlq list --group-by` of the built binary against a live
//! `sluice serve`: the counts are of the whole DLQ, not of a first page of it.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use sluice_client::wire::QueueConfigRequest;
use sluice_client::{Client, OutgoingMessage, ReceiveOptions};

mod common;

use common::{BIN, broker};

fn sluice(url: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("SLUICE_URL", url)
        .env_remove("SLUICE_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run sluice")
}

fn ok2(url: &str, args: &[&str]) -> (String, String) {
    let out = sluice(url, args);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "sluice {args:?} failed with {:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    (stdout, stderr)
}

fn json(url: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = ok2(url, &all).0;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

/// `n` messages sent to `queue` and rejected with `error` into its DLQ, through the API.
async fn reject_many(c: &Client, queue: &str, n: usize, error: &str) {
    let mut left = n;
    while left > 0 {
        let batch = left.min(500);
        let msgs = (0..batch)
            .map(|i| OutgoingMessage::json(&i).expect("json"))
            .collect();
        c.send_batch(queue, msgs).await.expect("send");
        let got = c
            .receive(queue, &ReceiveOptions::new(batch as u32, Duration::ZERO))
            .await
            .expect("receive");
        assert_eq!(got.len(), batch);
        for d in got {
            c.reject(queue, &d.receipt, Some(error))
                .await
                .expect("reject");
        }
        left -= batch;
    }
}

/// `(key, count)` of each row of a summary table.
fn rows(table: &str) -> Vec<(String, u64)> {
    let mut lines = table.lines();
    let header = lines.next().expect("header");
    for col in ["KEY", "COUNT", "FIRST", "LAST", "SAMPLE"] {
        assert!(header.contains(col), "{table}");
    }
    lines
        .map(|l| {
            // KEY may hold spaces: COUNT is the first field after it that is a number
            // followed by the two times and the id.
            let fields: Vec<&str> = l.split_whitespace().collect();
            let n = fields.len();
            // ... COUNT FIRST-DATE FIRST-TIME LAST-DATE LAST-TIME SAMPLE
            let count = fields[n - 6].parse().unwrap_or_else(|_| panic!("{l}"));
            (fields[..n - 6].join(" "), count)
        })
        .collect()
}

#[test]
fn summary_and_grouped_list_count_the_whole_dlq() {
    let b = broker();
    let u = b.url.as_str();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let c = Client::new(u).expect("client");
        c.put_queue("jobs", &QueueConfigRequest::default())
            .await
            .expect("queue");
        reject_many(&c, "jobs", 1000, "upstream timeout").await;
        reject_many(&c, "jobs", 500, "HTTP 429 Too Many Requests").await;
    });
    let want = vec![
        ("upstream timeout".to_owned(), 1000),
        ("HTTP 429 Too Many Requests".to_owned(), 500),
    ];

    // More than the 1,000 a listing would page through first: every one is counted.
    let (table, err) = ok2(u, &["dlq", "list", "jobs", "--group-by", "error"]);
    assert_eq!(rows(&table), want, "{table}");
    assert!(err.contains("1500 messages in 2 groups"), "{err}");
    let (table, _) = ok2(u, &["dlq", "summary", "jobs.dlq", "--group-by", "error"]);
    assert_eq!(rows(&table), want, "{table}");
    let (table, _) = ok2(u, &["dlq", "summary", "jobs"]);
    assert_eq!(
        rows(&table),
        want,
        "error is the default grouping:\n{table}"
    );

    let v = json(u, &["dlq", "summary", "jobs", "--group-by", "reason"]);
    assert_eq!(
        (v["total"].as_u64(), v["group_count"].as_u64()),
        (Some(1500), Some(1))
    );
    assert_eq!(v["groups"][0]["key"], "rejected");
    let v = json(u, &["dlq", "list", "jobs", "--group-by", "source"]);
    assert_eq!(v["groups"][0]["key"], "jobs");
    assert_eq!(v["groups"][0]["count"], 1500);
    assert!(v["groups"][0]["sample_id"].as_str().is_some(), "{v}");

    // The shared filter flags, old redrive spellings included.
    let v = json(
        u,
        &["dlq", "summary", "jobs", "--error", "429", "--since", "1h"],
    );
    assert_eq!(v["total"], 500);
    let v = json(u, &["dlq", "summary", "jobs", "--before", "1h"]);
    assert_eq!(v["total"], 0);
    let dry = json(u, &["redrive", "jobs", "--dry-run", "--error", "429"]);
    assert_eq!(dry["matched"], 500);
    let dry = json(
        u,
        &[
            "redrive",
            "jobs",
            "--dry-run",
            "--filter-error",
            "timeout",
            "--after",
            "1h",
        ],
    );
    assert_eq!(dry["matched"], 1000);

    // The group limit cuts the groups shown, never the counts.
    let (table, err) = ok2(u, &["dlq", "summary", "jobs", "--limit", "1"]);
    assert_eq!(rows(&table), want[..1], "{table}");
    assert!(err.contains("raise --limit"), "{err}");

    // Bad groupings are usage errors that say what is allowed.
    let out = sluice(u, &["dlq", "summary", "jobs", "--group-by", "colour"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error, reason, source, key or attribute:NAME"),
        "{err}"
    );
    let out = sluice(u, &["dlq", "summary", "nope"]);
    assert_eq!(out.status.code(), Some(3), "a missing queue is not found");
}

#[test]
fn dead_letters_counted_listed_and_redriven_by_key() {
    let b = broker();
    let u = b.url.as_str();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let c = Client::new(u).expect("client");
        c.put_queue("tenants", &QueueConfigRequest::default())
            .await
            .expect("queue");
        let msgs = ["acme", "acme", "globex"]
            .into_iter()
            .map(|k| OutgoingMessage::json(&k).expect("json").key(k))
            .chain([OutgoingMessage::json(&"none").expect("json")])
            .collect();
        c.send_batch("tenants", msgs).await.expect("send");
        let got = c
            .receive("tenants", &ReceiveOptions::new(4, Duration::ZERO))
            .await
            .expect("receive");
        for d in got {
            c.reject("tenants", &d.receipt, Some("refused"))
                .await
                .expect("reject");
        }
    });
    let (table, _) = ok2(u, &["dlq", "summary", "tenants", "--group-by", "key"]);
    assert_eq!(
        rows(&table),
        [
            ("acme".to_owned(), 2),
            ("globex".to_owned(), 1),
            ("(no key)".to_owned(), 1)
        ],
        "{table}"
    );
    let v = json(u, &["dlq", "summary", "tenants", "--key", "globex"]);
    assert_eq!(v["total"], 1);
    let v = json(u, &["dlq", "list", "tenants", "--key", "acme"]);
    let listed = v["messages"].as_array().map_or(0, Vec::len);
    assert_eq!(listed, 2, "{v}");
    let dry = json(u, &["redrive", "tenants", "--dry-run", "--key", "acme"]);
    assert_eq!(dry["matched"], 2, "{dry}");
    assert_eq!(dry["filter"]["key"], "acme", "{dry}");
}
