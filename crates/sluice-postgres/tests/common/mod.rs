//! Set-up shared by the multi-node tests: two stores (two nodes) on one fresh schema.

#![allow(dead_code)] // each test file uses its own part of this

use sluice_core::store::prelude::*;
use sluice_core::{AckRequest, Checked, QueueConfigPatch, QueueName, Receipt, ReceiveRequest};
use sluice_postgres::{PostgresOptions, PostgresStore};
use sluice_testkit::postgres;

pub struct Nodes {
    /// First, so the schema is dropped while the stores are still open (a store closing
    /// waits for its runtime, which the drop blocks).
    _drop: postgres::SchemaGuard,
    pub a: Checked<PostgresStore>,
    pub b: Checked<PostgresStore>,
    pub schema: String,
}

/// Nodes `a` and `b` on a schema of their own named after `prefix`, with `options` besides
/// the schema, pool and node name; `None` (after a loud message) when PostgreSQL is missing.
pub async fn nodes(prefix: &str, options: PostgresOptions) -> Option<Nodes> {
    if !postgres::available().await {
        return None;
    }
    Some(nodes_at(&postgres::url(), prefix, options).await)
}

/// As [`nodes`], connecting to `url` (the test server, or something in front of it).
pub async fn nodes_at(url: &str, prefix: &str, options: PostgresOptions) -> Nodes {
    let schema = postgres::unique_schema(prefix);
    let open = |node: &str| {
        let options = PostgresOptions {
            schema: schema.clone(),
            pool_size: 4,
            node_id: Some(node.to_string()),
            ..options.clone()
        };
        PostgresStore::open(url, options)
    };
    let a = open("a").await.expect("open node a");
    let b = open("b").await.expect("open node b");
    Nodes {
        _drop: postgres::SchemaGuard::new(schema.clone()),
        a,
        b,
        schema,
    }
}

impl Nodes {
    /// One more node named `node` on the nodes' schema (default options); drop it before the
    /// nodes.
    pub async fn another(&self, node: &str) -> Checked<PostgresStore> {
        let options = PostgresOptions {
            schema: self.schema.clone(),
            pool_size: 4,
            node_id: Some(node.to_string()),
            ..PostgresOptions::default()
        };
        PostgresStore::open(&postgres::url(), options)
            .await
            .expect("open another node")
    }

    /// A connection of its own, with the nodes' schema on its search path.
    pub async fn db(&self) -> tokio_postgres::Client {
        let (db, conn) = tokio_postgres::connect(&postgres::url(), tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        db.batch_execute(&format!("SET search_path TO \"{}\"", self.schema))
            .await
            .expect("search path");
        db
    }
}

pub fn q(name: &str) -> QueueName {
    QueueName::new(name).expect("queue name")
}

/// Creates queue `name` (default configuration) through `node`.
pub async fn created(node: &Checked<PostgresStore>, name: &str) -> QueueName {
    let queue = q(name);
    node.put_queue(&queue, &QueueConfigPatch::default())
        .await
        .expect("create");
    queue
}

/// A receive of up to `max` messages that does not wait.
pub fn recv(max: u32) -> ReceiveRequest {
    ReceiveRequest {
        max,
        ..ReceiveRequest::default()
    }
}

/// Acks of `receipts`, without results.
pub fn acks(receipts: impl IntoIterator<Item = Receipt>) -> Vec<AckRequest> {
    receipts
        .into_iter()
        .map(|receipt| AckRequest {
            receipt,
            result: None,
        })
        .collect()
}
