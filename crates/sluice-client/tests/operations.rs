//! Every operation of the broker's OpenAPI document has a method of this client, named as
//! the Python SDK names it.
//!
//! `operations.json` (beside this file) maps each operation, by method and path, to the
//! method of each SDK that calls it; `python/tests/test_operations.py` holds the Python SDK
//! to the same file. Here the file is compared with the document both ways, and each Rust
//! name in it with [`METHODS`], a list that names every method as `Client::name`, so it
//! stops compiling when one is renamed or removed.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use sluice_client::Client;

/// Lists client methods by path, so each must exist (a missing one fails to compile), and
/// answers their names.
macro_rules! methods {
    ($($name:ident $(::<$($g:ty),*>)?),* $(,)?) => {
        &[$({
            let _exists = Client::$name $(::<$($g),*>)?;
            stringify!($name)
        }),*]
    };
}

/// Every method of `sluice_client::Client` that `operations.json` names.
fn methods() -> &'static [&'static str] {
    methods![
        healthz,
        readyz,
        metrics_text,
        openapi,
        audit,
        get_message,
        delete_message,
        list_queues,
        get_queue,
        put_queue,
        delete_queue,
        pause_queue,
        resume_queue,
        purge_queue,
        force_breaker,
        force_key_breaker,
        send,
        browse,
        receive,
        ack,
        nack,
        reject,
        release,
        move_message,
        extend,
        progress,
        scaling,
        stats,
        stats_history,
        keys,
        summary,
        overview,
        whoami,
        list_redrives,
        create_redrive,
        get_redrive,
        cancel_redrive,
        pause_redrive,
        resume_redrive,
        list_schedules,
        get_schedule,
        put_schedule,
        delete_schedule,
        pause_schedule,
        resume_schedule,
        trigger_schedule,
        task_status,
        cancel,
        task_events,
    ]
}

#[derive(Deserialize)]
struct Mapping {
    operations: Vec<Operation>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Operation {
    method: String,
    path: String,
    operation_id: String,
    python: Option<String>,
    rust: Option<String>,
    why: Option<String>,
}

fn mapping() -> Vec<Operation> {
    let text = include_str!("operations.json");
    serde_json::from_str::<Mapping>(text)
        .expect("operations.json parses")
        .operations
}

/// The document's operations: (method, path) → operationId.
fn document() -> BTreeMap<(String, String), String> {
    let doc = sluice_server::openapi::openapi();
    let mut ops = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().expect("the document has paths") {
        for (method, op) in item.as_object().expect("a path item is an object") {
            if let Some(id) = op.get("operationId").and_then(|v| v.as_str()) {
                ops.insert((method.to_uppercase(), path.clone()), id.to_owned());
            }
        }
    }
    ops
}

#[test]
fn every_operation_of_the_document_has_a_mapping_and_every_mapping_an_operation() {
    let doc = document();
    let map = mapping();
    let mut mapped = BTreeMap::new();
    for op in &map {
        let key = (op.method.clone(), op.path.clone());
        assert!(
            mapped.insert(key, op.operation_id.clone()).is_none(),
            "operations.json maps {} {} twice",
            op.method,
            op.path
        );
    }
    let unmapped: Vec<_> = doc.keys().filter(|k| !mapped.contains_key(*k)).collect();
    assert!(
        unmapped.is_empty(),
        "operations of the OpenAPI document without an SDK mapping in \
         crates/sluice-client/tests/operations.json: {unmapped:?}"
    );
    let gone: Vec<_> = mapped.keys().filter(|k| !doc.contains_key(*k)).collect();
    assert!(
        gone.is_empty(),
        "operations.json maps operations the document does not have: {gone:?}"
    );
    for (key, id) in &doc {
        assert_eq!(
            &mapped[key], id,
            "{} {}: operationId in operations.json",
            key.0, key.1
        );
    }
}

#[test]
fn every_mapped_rust_method_exists_and_every_listed_method_is_mapped() {
    let listed: BTreeSet<&str> = methods().iter().copied().collect();
    let mut named = BTreeSet::new();
    for op in mapping() {
        match (&op.rust, &op.why) {
            (Some(name), _) => {
                assert!(
                    listed.contains(name.as_str()),
                    "{} {}: operations.json names Client::{name}, which this test does not \
                     list (add it to methods![] so the compiler checks it exists)",
                    op.method,
                    op.path
                );
                named.insert(name.clone());
            }
            (None, Some(why)) => assert!(
                !why.trim().is_empty(),
                "{} {}: an empty why",
                op.method,
                op.path
            ),
            (None, None) => panic!(
                "{} {}: no Rust method and no why in operations.json",
                op.method, op.path
            ),
        }
    }
    let unused: Vec<_> = listed.iter().filter(|n| !named.contains(**n)).collect();
    assert!(
        unused.is_empty(),
        "methods![] lists methods no operation maps to: {unused:?}"
    );
}

#[test]
fn both_sdks_name_each_operation_alike() {
    for op in mapping() {
        if let (Some(py), Some(rs)) = (&op.python, &op.rust) {
            assert_eq!(
                py, rs,
                "{} {}: the Python and Rust SDKs name it differently",
                op.method, op.path
            );
        }
        if op.python.is_none() || op.rust.is_none() {
            assert!(
                op.why.is_some(),
                "{} {}: an SDK without a method needs a why",
                op.method,
                op.path
            );
        }
    }
}

/// The methods the Rust client gained or split to match the Python SDK, against a broker.
#[tokio::test]
async fn overview_whoami_metrics_openapi_and_schedule_pause_resume_answer() {
    let srv = common::start().await;
    let c = &srv.client;
    c.put_queue("ov-jobs", &Default::default()).await.unwrap();
    let rows = c.overview(Some("ov-")).await.unwrap();
    let row = rows
        .iter()
        .find(|r| r.stats.queue == "ov-jobs")
        .expect("the queue is in the overview");
    assert!(!row.paused && !row.is_dead_letter_queue);
    assert!(rows.iter().all(|r| r.stats.queue.starts_with("ov-")));

    let me = c.whoami().await.unwrap();
    assert!(!me.auth);
    assert_eq!(me.role, "admin");

    assert!(c.metrics_text().await.unwrap().contains("sluice_"));
    let doc = c.openapi().await.unwrap();
    assert!(doc["paths"]["/v1/whoami"]["get"].is_object());

    let req = serde_json::from_value(serde_json::json!({
        "queue": "ov-jobs", "every_ms": 60_000, "body": {"tick": true}
    }))
    .unwrap();
    c.put_schedule("ov-tick", &req).await.unwrap();
    assert!(c.pause_schedule("ov-tick").await.unwrap().paused);
    assert!(!c.resume_schedule("ov-tick").await.unwrap().paused);
    srv.shutdown().await;
}
