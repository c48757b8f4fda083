//! `PostgresStore`: opening the engine and the `Store` contract, call by call.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{
    Hook, HookError, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime,
};
use sluice_core::stats::StatsSample;
use sluice_core::store::{IdempotentResponse, LeaseState};
use sluice_core::{
    AckRequest, AuditEvent, AuditQuery, BrowsePage, BrowseRequest, Clock, Delivery, Failure,
    Message, MessageId, NackOutcome, NewMessage, Progress, PutQueueOutcome, QueueConfig,
    QueueConfigPatch, QueueInfo, QueueName, QueueStats, Receipt, ReceiveRequest, RedriveId,
    RedriveJob, RedriveSpec, RedriveStep, SendOutcome, Store, StoreError, SystemClock, Timestamp,
};
use tokio_postgres::NoTls;

use crate::error::{OpenError, db, pool};
use crate::ids::Ids;
use crate::wake::Wakers;

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
    /// How long a call waits for a connection before answering `unavailable`.
    pub connect_timeout: Duration,
    /// How often this node ends expired leases, expires old messages and forgets kept
    /// records past their time.
    pub maintenance_interval: Duration,
    /// This node's name in redrive ownership. A node restarted under the same name takes its
    /// jobs back at once; a new name waits for the previous owner's heartbeat to run out.
    pub node_id: Option<String>,
    /// Sends of at least this many messages (all visible at once, without dedup ids) are
    /// stored as one row, a pack, until their members need rows of their own; 0 stores every
    /// message as a row, 1 every plain send. Large batches cost the database a row and a few index entries per
    /// batch instead of per message (see the `pack` module).
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

/// The PostgreSQL engine. Cloning is cheap and shares the pool; background work stops when
/// the last clone is dropped.
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: Pool,
    /// Connections whose commits do not wait for the WAL flush, for leases only.
    pub(crate) lease_pool: Pool,
    /// Connections that plan each statement once and never scan a table sequentially, for
    /// the ack statements written for that (see `ack.rs`).
    pub(crate) ack_pool: Pool,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) schema: String,
    pub(crate) channel: String,
    pub(crate) wakers: Arc<Wakers>,
    pub(crate) announce: tokio::sync::mpsc::UnboundedSender<String>,
    pub(crate) ids: Ids,
    pub(crate) pending: std::sync::Mutex<crate::counters::Counts>,
    pub(crate) configs: crate::queues::ConfigCache,
    pub(crate) node: String,
    /// [`PostgresOptions::pack_min`].
    pub(crate) pack_min: usize,
    /// Plain sends gathering for their queue's next write.
    pub(crate) sends: crate::combine::Combiner<crate::send::SendJob>,
    /// Receives gathering for their queue's next lease.
    pub(crate) leases: crate::combine::Lanes<crate::lease_combine::LeaseJob>,
    /// Queues whose last large receive on this node was served by packs.
    pub(crate) served_by_packs: QueueMarks,
    /// Queues whose consumers on this node are behind, and where the next lease of each
    /// starts (`crate::backlog`).
    pub(crate) backlogged: crate::backlog::Backlogs,
    /// Per queue, the size of the packs its last pack lease took (`crate::pack_sizes`).
    pub(crate) pack_sizes: crate::pack_sizes::PackSizes,
    /// Per queue, when this node last looked for leases that ran out (`crate::lapsed`).
    pub(crate) lapse_checks: crate::lapsed::LapseChecks,
    /// Receives long-polling on this node, for sends to hand messages to (`crate::handoff`).
    pub(crate) handoff: crate::handoff::Waiting,
    /// Messages leased ahead of this node's receives (`crate::read_ahead`).
    pub(crate) read_ahead: crate::read_ahead::ReadAhead,
    /// Acks gathering for their queue's next ack statement.
    pub(crate) acks: crate::combine::Combiner<crate::ack::AckJob>,
}

impl Inner {
    /// The node's hot-path counts not yet written.
    pub(crate) fn pending(&self) -> std::sync::MutexGuard<'_, crate::counters::Counts> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `n` to a hot-path counter of `queue` (written by the next flush).
    pub(crate) fn tally(&self, queue: &str, counter: crate::counters::Counter, n: i64) {
        self.pending().add(queue, counter, n);
    }

    /// A queue's configuration for the hot paths: from the cache, taking a connection only
    /// when it must read the database.
    pub(crate) async fn config(&self, queue: &str) -> Result<QueueConfig, StoreError> {
        match self.configs.cached(queue) {
            Some(cfg) => Ok(cfg),
            None => self.configs.get(&**self.conn().await?, queue).await,
        }
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now().as_millis()
    }

    /// Wakes receives waiting on `queue`: this node's at once, other nodes' through a NOTIFY
    /// sent after the change committed (when there may be other nodes).
    pub(crate) fn wake(&self, queue: &str) {
        self.wake_some(queue, usize::MAX);
    }

    /// As [`Inner::wake`] after `n` messages became visible: at most `n` local waiters.
    pub(crate) fn wake_some(&self, queue: &str, n: usize) {
        self.wakers.wake_some(queue, n);
        if self.wakers.others_may_listen() {
            let _ = self.announce.send(queue.to_string());
        }
    }

    pub(crate) async fn conn(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(|e| pool(&e))
    }
}

/// Queues this node has marked for one of its hot-path choices, each as its last lease of
/// the queue showed.
#[derive(Default)]
pub(crate) struct QueueMarks(std::sync::Mutex<std::collections::HashSet<String>>);

impl QueueMarks {
    /// Whether `queue` is marked.
    pub(crate) fn has(&self, queue: &str) -> bool {
        self.set().contains(queue)
    }

    /// Marks `queue` or clears its mark.
    pub(crate) fn mark(&self, queue: &str, on: bool) {
        let mut set = self.set();
        if !on {
            set.remove(queue);
        } else if !set.contains(queue) {
            set.insert(queue.to_string());
        }
    }

    fn set(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A connection pool that waits at most `timeout` for a connection, so a lost database
/// answers `unavailable` quickly, and replaces broken connections by itself.
fn pool_of(
    config: tokio_postgres::Config,
    setup: String,
    size: usize,
    timeout: Duration,
) -> Result<Pool, OpenError> {
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let setup = Arc::new(setup);
    Pool::builder(manager)
        .max_size(size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(timeout))
        .create_timeout(Some(timeout))
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

/// The `SET` statements a new connection runs before its first use: the schema, then the
/// `settings` of its pool. They are set after connecting rather than passed as the startup
/// `options` parameter, which connection poolers such as PgBouncer refuse or drop.
fn session_setup(schema: &str, settings: &[(&str, &str)]) -> String {
    let mut sql = format!("SET search_path TO {}", crate::schema::quote_ident(schema));
    for (name, value) in settings {
        sql.push_str(&format!("; SET {name} TO {value}"));
    }
    sql
}

impl Drop for Inner {
    /// Writes the counts still pending, so a store closed on purpose (a broker shutting down,
    /// a restart) loses none. Needs a multi-threaded Tokio runtime; elsewhere they are lost.
    /// The write runs on a thread of its own and is waited for at most
    /// [`CLOSE_FLUSH_WAIT`]: a store dropped while its runtime shuts down (its last handle
    /// held by a task being cancelled) cannot reach the database any more, and must not hang.
    fn drop(&mut self) {
        let pending = std::mem::take(&mut *self.pending());
        if pending.is_empty() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return;
        }
        let pool = self.pool.clone();
        let (done, written) = std::sync::mpsc::channel();
        let flush = std::thread::Builder::new()
            .name("sluice-close-counts".into())
            .spawn(move || {
                let out = handle.block_on(async move {
                    let conn = pool.get().await.map_err(|e| crate::error::pool(&e))?;
                    pending.flush(&**conn).await
                });
                let _ = done.send(out);
            });
        let out = match flush {
            Ok(_) => written
                .recv_timeout(CLOSE_FLUSH_WAIT)
                .map_err(|_| StoreError::unavailable("the runtime is shutting down")),
            Err(e) => Err(StoreError::unavailable(e.to_string())),
        }
        .and_then(|r| r);
        if let Err(e) = out {
            tracing::warn!(error = %e, "counters of the last moments before closing were not written");
        }
    }
}

/// How long a store being dropped waits to write its last counts.
const CLOSE_FLUSH_WAIT: Duration = Duration::from_secs(5);

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
    /// creates or migrates the schema, and starts the node's background work.
    ///
    /// Must be called inside a Tokio runtime.
    ///
    /// # Errors
    /// [`OpenError`] when the string is invalid, the database cannot be reached, or the schema
    /// belongs to a newer Sluice.
    pub async fn open(url: &str, options: PostgresOptions) -> Result<Self, OpenError> {
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
        config.connect_timeout(options.connect_timeout);
        config.application_name("sluice");
        let (mut client, conn) = config.connect(NoTls).await?;
        let driver = tokio::spawn(conn);
        crate::schema::migrate(&mut client, &schema).await?;
        drop(client);
        driver.abort();

        let pool = pool_of(
            config.clone(),
            session_setup(&schema, &[]),
            options.pool_size,
            options.connect_timeout,
        )?;
        // Leases commit without waiting for the WAL flush (see `lease.rs`): their own
        // connections have that as their session default, so a lease is one statement.
        let lease_pool = pool_of(
            config.clone(),
            session_setup(&schema, &[("synchronous_commit", "off")]),
            options.pool_size,
            options.connect_timeout,
        )?;
        // Acks plan their statements once per connection (see `ack.rs`).
        let ack_pool = pool_of(
            config.clone(),
            session_setup(
                &schema,
                &[
                    ("plan_cache_mode", "force_generic_plan"),
                    ("enable_seqscan", "off"),
                ],
            ),
            options.pool_size,
            options.connect_timeout,
        )?;
        let channel = crate::wake::channel(&schema);
        let wakers = Arc::new(Wakers::default());
        let node = options.node_id.clone().unwrap_or_else(|| {
            format!("node-{}-{:08x}", std::process::id(), rand::random::<u32>())
        });
        let (announce, to_announce) = tokio::sync::mpsc::unbounded_channel();
        // Tells this store's notifications from other nodes' (node ids may repeat).
        let origin = crate::wake::new_origin();
        tokio::spawn(crate::wake::announce(
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
            configs: crate::queues::ConfigCache::default(),
            node,
            pack_min: options.pack_min,
            sends: crate::combine::Combiner::new(crate::send::SENDS_IN_FLIGHT),
            leases: crate::combine::Lanes::new(
                crate::lease_combine::LEASES_IN_FLIGHT,
                crate::lease_combine::LARGE_LEASES_IN_FLIGHT,
                crate::lease_combine::PACKED_LEASES_IN_FLIGHT,
            ),
            served_by_packs: QueueMarks::default(),
            backlogged: crate::backlog::Backlogs::default(),
            pack_sizes: crate::pack_sizes::PackSizes::default(),
            lapse_checks: crate::lapsed::LapseChecks::default(),
            handoff: crate::handoff::Waiting::default(),
            read_ahead: crate::read_ahead::ReadAhead::default(),
            acks: crate::combine::Combiner::new(crate::ack::ACKS_IN_FLIGHT),
        });
        tokio::spawn(crate::wake::listen(
            config,
            channel,
            origin,
            Arc::downgrade(&wakers),
        ));
        tokio::spawn(crate::counters::run(Arc::downgrade(&inner)));
        tokio::spawn(crate::maintenance::run(
            Arc::downgrade(&inner),
            options.maintenance_interval,
        ));
        Ok(PostgresStore { inner })
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
        crate::maintenance::once(&self.inner).await
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn put_queue(
        &self,
        name: &QueueName,
        patch: &QueueConfigPatch,
    ) -> Result<PutQueueOutcome, StoreError> {
        crate::queues::put(&self.inner, name, patch, false).await
    }

    async fn create_queue(
        &self,
        name: &QueueName,
        patch: &QueueConfigPatch,
    ) -> Result<PutQueueOutcome, StoreError> {
        crate::queues::put(&self.inner, name, patch, true).await
    }

    async fn get_queue(&self, name: &QueueName) -> Result<QueueInfo, StoreError> {
        let conn = self.inner.conn().await?;
        crate::queues::info(&**conn, name).await
    }

    async fn list_queues(&self) -> Result<Vec<QueueInfo>, StoreError> {
        let conn = self.inner.conn().await?;
        crate::queues::list(&**conn).await
    }

    async fn delete_queue(&self, name: &QueueName) -> Result<(), StoreError> {
        crate::queues::delete(&self.inner, name).await
    }

    async fn send(
        &self,
        queue: &QueueName,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<SendOutcome>, StoreError> {
        sluice_core::store::validate_send_batch(&messages)?;
        let cfg = self.inner.config(queue.as_str()).await?;
        let (out, wake) = if crate::send::is_plain(&cfg, &messages) {
            crate::send::send_plain(&self.inner, queue, &cfg, messages).await?
        } else {
            let mut conn = self.inner.conn().await?;
            transaction(&mut conn, async |tx| {
                crate::send::send(&self.inner, tx, queue, messages).await
            })
            .await?
        };
        let fresh = out.iter().filter(|o| !o.duplicate).count();
        self.inner
            .tally(queue.as_str(), crate::counters::Counter::Sent, fresh as i64);
        if wake {
            self.inner.wake_some(queue.as_str(), fresh);
        }
        Ok(out)
    }

    async fn receive(
        &self,
        queue: &QueueName,
        req: ReceiveRequest,
    ) -> Result<Vec<Delivery>, StoreError> {
        crate::lease::receive(&self.inner, queue, req).await
    }

    async fn ack(
        &self,
        queue: &QueueName,
        acks: Vec<AckRequest>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        crate::ack::ack(&self.inner, queue, acks).await
    }

    async fn lease_may_overlap_ack(&self, queue: &QueueName) -> bool {
        // The ack commits on its own connection, so a lease may not see it yet; only a
        // queue's `max_in_flight` makes a lease depend on it. An unknown queue fails in both.
        self.inner
            .config(queue.as_str())
            .await
            .is_ok_and(|cfg| cfg.max_in_flight.is_none())
    }

    async fn nack(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        delay: Option<Duration>,
        failure: Failure,
    ) -> Result<NackOutcome, StoreError> {
        crate::lease::nack(&self.inner, queue, receipt, delay, failure).await
    }

    async fn reject(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        failure: Failure,
    ) -> Result<QueueName, StoreError> {
        crate::lease::reject(&self.inner, queue, receipt, failure).await
    }

    async fn move_message(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        to: &QueueName,
        failure: Failure,
    ) -> Result<(), StoreError> {
        crate::lease::move_to(&self.inner, queue, receipt, to, failure).await
    }

    async fn release(&self, queue: &QueueName, receipt: Receipt) -> Result<(), StoreError> {
        crate::lease::release(&self.inner, queue, receipt).await
    }

    async fn extend(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        visibility: Duration,
    ) -> Result<LeaseState, StoreError> {
        crate::lease::extend(&self.inner, queue, receipt, visibility).await
    }

    async fn progress(
        &self,
        queue: &QueueName,
        receipt: Receipt,
        progress: Progress,
    ) -> Result<LeaseState, StoreError> {
        crate::lease::progress(&self.inner, queue, receipt, progress).await
    }

    async fn cancel(&self, id: MessageId) -> Result<Message, StoreError> {
        crate::lease::cancel(&self.inner, id).await
    }

    async fn create_redrive(&self, spec: RedriveSpec) -> Result<RedriveJob, StoreError> {
        crate::redrive::create(&self.inner, spec).await
    }

    async fn get_redrive(&self, id: RedriveId) -> Result<RedriveJob, StoreError> {
        let conn = self.inner.conn().await?;
        crate::redrive::get(&**conn, id).await
    }

    async fn list_redrives(&self) -> Result<Vec<RedriveJob>, StoreError> {
        let conn = self.inner.conn().await?;
        crate::redrive::list(&**conn).await
    }

    async fn control_redrive(
        &self,
        id: RedriveId,
        control: sluice_core::RedriveControl,
    ) -> Result<RedriveJob, StoreError> {
        crate::redrive::control(&self.inner, id, &control).await
    }

    async fn redrive_step(&self, id: RedriveId, max: u32) -> Result<RedriveStep, StoreError> {
        crate::redrive::step(&self.inner, id, max).await
    }

    async fn record_stats(&self, samples: Vec<(QueueName, StatsSample)>) -> Result<(), StoreError> {
        crate::records::record_stats(&self.inner, samples).await
    }

    async fn audit_append(&self, events: Vec<AuditEvent>) -> Result<(), StoreError> {
        let conn = self.inner.conn().await?;
        crate::records::audit_insert(&**conn, &events).await
    }

    async fn audit_query(&self, query: AuditQuery) -> Result<Vec<AuditEvent>, StoreError> {
        crate::records::audit_query(&self.inner, query).await
    }

    async fn stats_history(
        &self,
        queue: &QueueName,
        since: Timestamp,
    ) -> Result<Vec<StatsSample>, StoreError> {
        crate::records::stats_history(&self.inner, queue, since).await
    }

    async fn browse(
        &self,
        queue: &QueueName,
        req: BrowseRequest,
    ) -> Result<BrowsePage, StoreError> {
        crate::view::browse(&self.inner, queue, req).await
    }

    async fn get_message(&self, id: MessageId) -> Result<Message, StoreError> {
        crate::view::get(&self.inner, id).await
    }

    async fn delete_message(&self, id: MessageId) -> Result<(), StoreError> {
        crate::view::delete(&self.inner, id).await
    }

    async fn close(&self) {
        crate::read_ahead::release_all(&self.inner).await;
    }

    async fn purge(&self, queue: &QueueName) -> Result<u64, StoreError> {
        crate::view::purge(&self.inner, queue).await
    }

    async fn stats(&self, queue: &QueueName) -> Result<QueueStats, StoreError> {
        crate::view::stats(&self.inner, queue).await
    }

    async fn summarize(
        &self,
        queue: &QueueName,
        req: sluice_core::summary::SummaryRequest,
    ) -> Result<sluice_core::summary::Summary, StoreError> {
        crate::summary::summarize(&self.inner, queue, req).await
    }

    async fn idempotency_get(&self, key: &str) -> Result<Option<IdempotentResponse>, StoreError> {
        crate::records::idempotency_get(&self.inner, key).await
    }

    async fn idempotency_put(
        &self,
        key: &str,
        response: IdempotentResponse,
    ) -> Result<Option<IdempotentResponse>, StoreError> {
        crate::records::idempotency_put(&self.inner, key, response).await
    }
}

/// Opens a transaction on a pooled connection.
pub(crate) async fn begin(
    conn: &mut Object,
) -> Result<tokio_postgres::Transaction<'_>, tokio_postgres::Error> {
    let client: &mut tokio_postgres::Client = conn;
    client.transaction().await
}

/// Runs `body` in a transaction on `conn`: commits when it succeeds, and otherwise rolls back
/// before the connection goes back to the pool, so row locks taken by a failed call never
/// outlive it (a dropped transaction would roll back only later, in the background, while
/// another connection could already be skipping the rows it still holds).
pub(crate) async fn transaction<T>(
    conn: &mut Object,
    body: impl AsyncFnOnce(&tokio_postgres::Transaction<'_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let tx = begin(conn).await.map_err(|e| db(&e))?;
    match body(&tx).await {
        Ok(v) => {
            tx.commit().await.map_err(|e| db(&e))?;
            Ok(v)
        }
        Err(e) => {
            if let Err(re) = tx.rollback().await {
                tracing::debug!(error = %re, "rollback after a failed call");
            }
            Err(e)
        }
    }
}
