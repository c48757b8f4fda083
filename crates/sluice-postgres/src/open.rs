//! Opening the engine: options, the node's connection pools, migrations and background work.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use sluice_core::{Checked, Clock, StoreError, SystemClock};

use crate::db::ids::Ids;
use crate::error::OpenError;
use crate::hosts::{Hosts, PoolConnect};
use crate::hot::wake::Wakers;
use crate::local::Locals;
use crate::store::{Inner, PostgresStore};

/// Options of a PostgreSQL store.
#[derive(Clone)]
pub struct PostgresOptions {
    /// Where time comes from. Every node's clock decides leases and delays, so nodes sharing
    /// a database need synchronised clocks (NTP), as with any lease-based queue.
    pub clock: Arc<dyn Clock>,
    /// The schema holding Sluice's tables (created if missing). Several Sluice deployments
    /// can share one database in different schemas. A `schema=` parameter of the connection
    /// string overrides it.
    pub schema: String,
    /// Most connections in each of this node's three pools: general work, leases and acks
    /// (the last two open about one per busy queue, as a queue's leases and acks are
    /// combined). One more listens for other nodes' wake-ups.
    pub pool_size: usize,
    /// How long a call waits for a connection before answering `unavailable`; with several
    /// hosts in the connection string, each host's attempt gets a share of it (at least a
    /// second) unless the string gives `connect_timeout`.
    pub connect_timeout: Duration,
    /// How often this node ends expired leases, expires old messages and forgets kept
    /// records past their time.
    pub maintenance_interval: Duration,
    /// This node's name in redrive ownership. A node restarted under the same name takes its
    /// jobs back at once; a new name waits for the previous owner's heartbeat to run out.
    pub node_id: Option<String>,
    /// Sends of at least this many messages (all visible at once, without dedup ids) are
    /// stored as one row, a pack, until their members need rows of their own; 0 stores every
    /// message as a row, 1 every plain send. Large batches cost the database a row and a few
    /// index entries per batch instead of per message (see the `hot::packs` module).
    pub pack_min: usize,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            clock: Arc::new(SystemClock),
            schema: "sluice".to_string(),
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            maintenance_interval: Duration::from_millis(500),
            node_id: None,
            pack_min: 10,
        }
    }
}

/// A connection pool that waits at most `timeout` for a connection, so a lost database
/// answers `unavailable` quickly, and replaces broken connections by itself.
fn pool_of(
    (config, hosts): (tokio_postgres::Config, &Hosts),
    setup: String,
    size: usize,
    (timeout, create_timeout): (Duration, Duration),
) -> Result<Pool, OpenError> {
    let manager = Manager::from_connect(
        config,
        PoolConnect(hosts.clone()),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let setup = Arc::new(setup);
    Pool::builder(manager)
        .max_size(size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(timeout))
        .create_timeout(Some(create_timeout))
        .recycle_timeout(Some(timeout))
        .post_create(Hook::async_fn(move |client, _| {
            let setup = setup.clone();
            Box::pin(async move {
                client
                    .batch_execute(&setup)
                    .await
                    .map_err(HookError::Backend)
            })
        }))
        .build()
        .map_err(|e| OpenError::Pool(e.to_string()))
}

/// Sets how long a connection attempt waits for each host of `config`, and returns that and
/// how long creating a connection may take in all. A host that does not answer at all (a dead
/// machine, a network that drops packets) costs its whole timeout before the next host is
/// tried, so with several hosts each gets a share of `total` (at least a second) unless the
/// connection string says (`connect_timeout`), and creating a connection may take long enough
/// to try every host: a dead former primary first in the list must not hide the new one.
fn per_host_timeout(config: &mut tokio_postgres::Config, total: Duration) -> (Duration, Duration) {
    let hosts = u32::try_from(config.get_hosts().len().max(1)).unwrap_or(u32::MAX);
    let each = match config.get_connect_timeout() {
        Some(given) => *given,
        None => (total / hosts).max(Duration::from_secs(1)),
    };
    config.connect_timeout(each);
    if hosts == 1 {
        return (each, total.max(each));
    }
    (each, total.max(each * hosts + Duration::from_secs(1)))
}

/// The `SET` statements a new connection runs before its first use: the schema, then the
/// `settings` of its pool. They are set after connecting rather than passed as the startup
/// `options` parameter, which connection poolers such as PgBouncer refuse or drop.
fn session_setup(schema: &str, settings: &[(&str, &str)]) -> String {
    let mut sql = format!(
        "SET search_path TO {}",
        crate::db::schema::quote_ident(schema)
    );
    for (name, value) in settings {
        sql.push_str(&format!("; SET {name} TO {value}"));
    }
    sql
}

/// Splits Sluice's own `schema` parameter off a connection string.
fn split_schema(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), None);
    };
    let mut schema = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|kv| match kv.strip_prefix("schema=") {
            Some(s) => {
                schema = Some(s.to_string());
                false
            }
            None => true,
        })
        .collect();
    if rest.is_empty() {
        (base.to_string(), schema)
    } else {
        (format!("{base}?{}", rest.join("&")), schema)
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user@host:port/db`, optionally `?schema=name`),
    /// creates or migrates the schema, and starts the node's background work. The store
    /// comes wrapped in the contract's checking layer, the only form in which it is a
    /// [`Store`](sluice_core::Store); its own methods (`send_in`, `maintain`, …) are reached
    /// through [`Checked::engine`].
    ///
    /// Must be called inside a Tokio runtime.
    ///
    /// # Errors
    /// [`OpenError`] when the string is invalid, the database cannot be reached, or the schema
    /// belongs to a newer Sluice.
    pub async fn open(url: &str, options: PostgresOptions) -> Result<Checked<Self>, OpenError> {
        let (url, schema_param) = split_schema(url);
        let schema = schema_param.unwrap_or(options.schema.clone());
        if schema.is_empty()
            || schema.len() > 40
            || !schema
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(OpenError::Url(format!(
                "schema \"{schema}\" must be 1 to 40 letters, digits or underscores"
            )));
        }
        let mut config =
            tokio_postgres::Config::from_str(&url).map_err(|e| OpenError::Url(e.to_string()))?;
        let (per_host, create_timeout) = per_host_timeout(&mut config, options.connect_timeout);
        config.application_name("sluice");
        let hosts = Hosts::of(&url, &config, per_host);
        let (mut client, conn) = hosts.connect().await?;
        let driver = tokio::spawn(conn);
        crate::db::schema::migrate(&mut client, &schema).await?;
        drop(client);
        driver.abort();

        let pool = pool_of(
            (config.clone(), &hosts),
            session_setup(&schema, &[]),
            options.pool_size,
            (options.connect_timeout, create_timeout),
        )?;
        // Leases commit without waiting for the WAL flush (see `hot/leases.rs`): their own
        // connections have that as their session default, so a lease is one statement. And
        // without JIT compilation: a receive's statements run in well under a millisecond, and
        // compiling one whose estimated cost crossed `jit_above_cost` (the skip scan over a
        // large queue's group lines, planned for the worst case) took 10 – 25 ms each time.
        let lease_pool = pool_of(
            (config.clone(), &hosts),
            session_setup(&schema, &[("synchronous_commit", "off"), ("jit", "off")]),
            options.pool_size,
            (options.connect_timeout, create_timeout),
        )?;
        // Acks plan their statements once per connection (see `hot/ack_combine.rs`).
        let ack_pool = pool_of(
            (config.clone(), &hosts),
            session_setup(
                &schema,
                &[
                    ("plan_cache_mode", "force_generic_plan"),
                    ("enable_seqscan", "off"),
                ],
            ),
            options.pool_size,
            (options.connect_timeout, create_timeout),
        )?;
        let channel = crate::hot::wake::channel(&schema);
        let locals = Arc::new(Locals::default());
        let (coverage, coverage_requests) = crate::coverage::Signals::new();
        let wakers = Arc::new(Wakers::new(locals.clone(), coverage.clone()));
        let node = options.node_id.clone().unwrap_or_else(|| {
            format!("node-{}-{:08x}", std::process::id(), rand::random::<u32>())
        });
        let (announce, to_announce) = tokio::sync::mpsc::unbounded_channel();
        // Tells this store's notifications from other nodes' (node ids may repeat).
        let origin = crate::hot::wake::new_origin();
        tokio::spawn(crate::hot::wake::announce(
            pool.clone(),
            channel.clone(),
            origin,
            to_announce,
        ));
        let inner = Arc::new(Inner {
            announce,
            pool,
            lease_pool,
            ack_pool,
            clock: options.clock.clone(),
            schema,
            channel: channel.clone(),
            wakers: wakers.clone(),
            ids: Ids::default(),
            pending: std::sync::Mutex::default(),
            flushing: tokio::sync::Mutex::new(()),
            counting: tokio::sync::RwLock::new(()),
            coverage,
            origin,
            locals,
            flow: crate::flow::Pending::default(),
            node,
            pack_min: options.pack_min,
        });
        tokio::spawn(crate::hot::wake::listen(
            hosts,
            channel,
            origin,
            Arc::downgrade(&wakers),
        ));
        tokio::spawn(crate::db::counters::run(Arc::downgrade(&inner)));
        tokio::spawn(crate::coverage::answer_requests(
            Arc::downgrade(&inner),
            coverage_requests,
        ));
        tokio::spawn(crate::flow::run(Arc::downgrade(&inner)));
        tokio::spawn(crate::expiry::run(
            Arc::downgrade(&inner),
            options.maintenance_interval,
        ));
        Ok(Checked::new(PostgresStore { inner }))
    }

    /// The schema this store uses.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// This node's name in redrive ownership.
    pub fn node_id(&self) -> &str {
        &self.inner.node
    }

    /// Runs one round of background maintenance now.
    ///
    /// # Errors
    /// `Unavailable` when the database cannot be reached.
    pub async fn maintain(&self) -> Result<(), StoreError> {
        crate::expiry::round(&self.inner).await
    }
}
