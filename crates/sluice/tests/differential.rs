//! The differential model test of the whole `Store` contract
//! (`sluice_conformance::differential`), run against the embedded engine and the PostgreSQL
//! engine (one node, and two nodes on one schema taking calls in turn and some at once).
//!
//! The fixed-seed runs are part of the ordinary suite. The long run is ignored by default:
//!
//! ```text
//! SLUICE_DIFF_CASES=3000 cargo test -p sluice --test differential -- --ignored --nocapture
//! ```
//!
//! `SLUICE_DIFF_SEED` draws other scenarios, `SLUICE_DIFF_LEN` makes them longer. Tests that
//! need PostgreSQL skip with a loud message when it is unreachable, and fail under `CI=true`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sluice_conformance::differential::{Factory, Plan, Target, check};
use sluice_core::{Checked, ManualClock, Store};
use sluice_embedded::{EmbeddedOptions, EmbeddedStore, OpenError};
use sluice_postgres::{PostgresOptions, PostgresStore};
use sluice_testkit::postgres;

/// The embedded engine in a temporary directory.
struct Embedded {
    _root: tempfile::TempDir,
    dir: PathBuf,
    clock: ManualClock,
    store: Option<Arc<Checked<EmbeddedStore>>>,
}

fn open_embedded(dir: &Path, clock: &ManualClock) -> Arc<Checked<EmbeddedStore>> {
    for _ in 0..250 {
        let options = EmbeddedOptions {
            clock: Arc::new(clock.clone()),
            maintenance_interval: Duration::from_secs(3600),
            ..EmbeddedOptions::default()
        };
        match EmbeddedStore::open(dir, options) {
            Ok((s, _)) => return Arc::new(s),
            Err(OpenError::Locked(_)) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("embedded store did not open: {e}"),
        }
    }
    panic!("data directory still locked after 5 s");
}

impl Embedded {
    fn new(clock: ManualClock) -> Embedded {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("data");
        let store = Some(open_embedded(&dir, &clock));
        Embedded {
            _root: root,
            dir,
            clock,
            store,
        }
    }

    fn reopen(&mut self) {
        self.store = None;
        self.store = Some(open_embedded(&self.dir, &self.clock));
    }
}

#[async_trait]
impl Target for Embedded {
    fn store(&self, _: usize) -> Arc<dyn Store> {
        self.store.clone().expect("open")
    }

    fn nodes(&self) -> usize {
        1
    }

    async fn restart(&mut self) {
        self.reopen();
    }

    async fn compact(&mut self) {
        // A restart starts a new segment, so the old one may be compacted.
        self.reopen();
        self.store
            .as_ref()
            .expect("open")
            .engine()
            .maintain()
            .await
            .expect("maintenance with compaction");
    }

    async fn crash(&mut self, junk: &[u8]) {
        self.store = None;
        let log = self.dir.join("log");
        let newest = std::fs::read_dir(&log)
            .expect("log dir")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .max()
            .expect("a log segment");
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&newest)
            .expect("open newest segment");
        // A torn record: a plausible length, then bytes that do not check.
        let mut torn = vec![
            u8::try_from(junk.len().min(255)).unwrap_or(1).max(1),
            0,
            0,
            0,
        ];
        torn.extend_from_slice(junk);
        f.write_all(&torn).expect("append torn tail");
        drop(f);
        self.store = Some(open_embedded(&self.dir, &self.clock));
    }

    fn claims_survive_restart(&self) -> bool {
        false
    }
}

/// The PostgreSQL engine: `nodes` stores on one schema of their own.
struct Postgres {
    schema: String,
    _guard: postgres::SchemaGuard,
    clock: ManualClock,
    stores: Vec<Arc<dyn Store>>,
    count: usize,
}

async fn open_pg(schema: &str, clock: &ManualClock, node: usize) -> Arc<dyn Store> {
    let options = PostgresOptions {
        clock: Arc::new(clock.clone()),
        schema: schema.to_owned(),
        pool_size: 4,
        maintenance_interval: Duration::from_secs(3600),
        node_id: Some(format!("diff-{node}")),
        ..PostgresOptions::default()
    };
    Arc::new(
        PostgresStore::open(&postgres::url(), options)
            .await
            .expect("open postgres store"),
    )
}

impl Postgres {
    async fn new(clock: ManualClock, count: usize) -> Postgres {
        let schema = postgres::unique_schema("diff");
        let guard = postgres::SchemaGuard::new(schema.clone());
        let mut stores = Vec::new();
        for n in 0..count {
            stores.push(open_pg(&schema, &clock, n).await);
        }
        Postgres {
            schema,
            _guard: guard,
            clock,
            stores,
            count,
        }
    }

    async fn reopen(&mut self) {
        for s in self.stores.drain(..) {
            // What a node holds for itself alone (messages leased ahead) is handed back, as
            // a stopping broker does.
            s.close().await;
        }
        for n in 0..self.count {
            self.stores
                .push(open_pg(&self.schema, &self.clock, n).await);
        }
    }
}

#[async_trait]
impl Target for Postgres {
    fn store(&self, n: usize) -> Arc<dyn Store> {
        self.stores[n % self.stores.len()].clone()
    }

    fn nodes(&self) -> usize {
        self.count
    }

    async fn restart(&mut self) {
        self.reopen().await;
    }

    async fn compact(&mut self) {
        self.reopen().await;
    }

    async fn crash(&mut self, _: &[u8]) {
        self.reopen().await;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn embedded_factory() -> Box<Factory<'static>> {
    Box::new(|clock| Box::pin(async move { Box::new(Embedded::new(clock)) as Box<dyn Target> }))
}

fn postgres_factory(nodes: usize) -> Box<Factory<'static>> {
    Box::new(move |clock| {
        Box::pin(async move { Box::new(Postgres::new(clock, nodes).await) as Box<dyn Target> })
    })
}

/// The seed of the ordinary suite's runs.
const SEED: u64 = 20_260_101;

#[test]
fn differential_embedded_fixed_seed() {
    let rt = runtime();
    check(
        "embedded",
        &rt,
        Plan::from_env(1000, 60, SEED),
        &*embedded_factory(),
    );
}

#[test]
fn differential_postgres_fixed_seed() {
    let rt = runtime();
    if !rt.block_on(postgres::available()) {
        return;
    }
    check(
        "postgres",
        &rt,
        Plan::from_env(10, 40, SEED),
        &*postgres_factory(1),
    );
}

#[test]
fn differential_postgres_two_nodes_fixed_seed() {
    let rt = runtime();
    if !rt.block_on(postgres::available()) {
        return;
    }
    check(
        "postgres (two nodes)",
        &rt,
        Plan::from_env(6, 30, SEED + 1),
        &*postgres_factory(2),
    );
}

/// The long run: every engine, many more and longer scenarios (`SLUICE_DIFF_CASES`, default
/// 20,000 on the embedded engine, a hundredth of that on PostgreSQL with one node and a
/// two-hundredth with two, whose scenarios cost a hundred times more; `SLUICE_DIFF_LEN`,
/// default 80). About 25 minutes on two cores.
#[test]
#[ignore = "long run (20+ minutes); see docs/testing.md"]
fn differential_long_run() {
    let rt = runtime();
    let plan = Plan::from_env(20_000, 80, SEED + 7);
    check("embedded (long)", &rt, plan, &*embedded_factory());
    if rt.block_on(postgres::available()) {
        let one = Plan {
            cases: (plan.cases / 100).max(1),
            ..plan
        };
        check("postgres (long)", &rt, one, &*postgres_factory(1));
        let two = Plan {
            cases: (plan.cases / 200).max(1),
            ..plan
        };
        check("postgres two nodes (long)", &rt, two, &*postgres_factory(2));
    }
}
