//! The permission matrix: every HTTP operation, frame op and SQS action, tried by a key of
//! every role on a queue inside and outside the key's patterns, against one table of what each
//! role may do ([`roles_for`]).
//!
//! Each protocol has a table of its operations ([`http::routes`], [`frames::rule`],
//! [`sqs::actions`]): the actions an operation needs and what it reaches (no queue, a queue it
//! names, an id of something in a queue, or every queue). From those and the role table the
//! test derives, for each key and queue, whether the broker must refuse, answer as for an id
//! that does not exist, or let the request through, and sends the request to a real broker to
//! see. The tables cannot fall behind the broker: an operation of the OpenAPI document, a
//! variant of `Op` or an SQS action the endpoint serves that no table lists fails the test (or
//! the build), and `docs/permissions.md` is generated from the same tables.

mod docs;
mod frames;
mod http;
mod sqs;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use sluice_server::auth::{Action, hash_secret};
use sluice_server::{ApiKeyConfig, KeyRing, Role, ServerOptions};

/// The roles, in the order the tables show them.
pub const ROLES: [Role; 4] = [Role::Admin, Role::Operator, Role::Producer, Role::Consumer];

/// Every action, in the order the tables show them.
pub const ACTIONS: [Action; 9] = [
    Action::ManageQueue,
    Action::ReadQueue,
    Action::Send,
    Action::Consume,
    Action::Inspect,
    Action::Stats,
    Action::ReadTask,
    Action::CancelTask,
    Action::Redrive,
];

/// Who may do what: the roles allowed each action. This is the table every protocol's
/// operations are checked against; `Action::allowed` must agree with it.
pub fn roles_for(action: Action) -> &'static [Role] {
    use Role::*;
    match action {
        Action::ManageQueue => &[Admin, Operator],
        Action::ReadQueue => &[Admin, Operator, Producer, Consumer],
        Action::Send => &[Admin, Producer],
        Action::Consume => &[Admin, Consumer],
        Action::Inspect => &[Admin, Operator],
        Action::Stats => &[Admin, Operator, Producer],
        Action::ReadTask => &[Admin, Operator, Producer, Consumer],
        Action::CancelTask => &[Admin, Operator, Producer],
        Action::Redrive => &[Admin, Operator],
    }
}

/// What an operation reaches, which decides what a key outside its patterns gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach<U> {
    /// Nothing that needs a key (health, readiness, the API document).
    Public,
    /// No queue in particular: anything it lists or counts is limited to the queues the key
    /// covers.
    Global,
    /// The queue or queues the request names: one outside the patterns is refused.
    Queue,
    /// Something in a queue, named by id (a message, task, redrive job or schedule): outside
    /// the patterns it answers `U`, as for an id that does not exist.
    Id(U),
    /// Queues the request does not name (a redrive back to each message's source queue): only
    /// a key whose patterns are `*` may.
    EveryQueue,
}

/// What the broker must answer a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect<U> {
    /// Anything but a refusal.
    Allowed,
    /// A refusal for want of permission.
    Refused,
    /// The answer for an id that does not exist.
    Unknown(U),
}

/// Which side of the key's patterns a case's queue is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A queue the scoped keys cover (`orders*`).
    Inside,
    /// A queue they do not (`billing*`).
    Outside,
}

/// A key the matrix runs as, with its API secret and SQS access key.
#[derive(Debug, Clone)]
pub struct Key {
    /// Its role.
    pub role: Role,
    /// True for the pattern `orders*`, false for `*`.
    pub scoped: bool,
}

impl Key {
    /// Its name in the broker, e.g. `operator-orders`.
    pub fn name(&self) -> String {
        format!(
            "{}-{}",
            self.role.as_str(),
            if self.scoped { "orders" } else { "all" }
        )
    }

    /// Its API key secret.
    pub fn secret(&self) -> String {
        format!("sluice_matrix_{}", self.name())
    }

    /// Its SQS access key id.
    pub fn access_key_id(&self) -> String {
        format!("AKIA{}", self.name().to_uppercase().replace('-', ""))
    }

    /// Its SQS secret access key.
    pub fn sqs_secret(&self) -> String {
        format!("matrix/{}", self.name())
    }

    fn patterns(&self) -> Vec<String> {
        vec![if self.scoped { "orders*" } else { "*" }.to_owned()]
    }

    /// True when the key's patterns match a queue on `side`.
    pub fn covers(&self, side: Side) -> bool {
        !self.scoped || side == Side::Inside
    }
}

/// The keys of the matrix: each role scoped to `orders*`, and an admin of every queue.
pub fn keys() -> Vec<Key> {
    let mut keys: Vec<Key> = ROLES
        .iter()
        .map(|&role| Key { role, scoped: true })
        .collect();
    keys.push(Key {
        role: Role::Admin,
        scoped: false,
    });
    keys
}

/// The admin of every queue, who sets up what the cases act on.
pub fn root() -> Key {
    Key {
        role: Role::Admin,
        scoped: false,
    }
}

/// What `key` must get for an operation that needs `needs` and reaches `reach`, on `side`.
pub fn expect<U: Copy>(needs: &[Action], reach: Reach<U>, key: &Key, side: Side) -> Expect<U> {
    let role_may = needs.iter().all(|a| roles_for(*a).contains(&key.role));
    match reach {
        Reach::Public => Expect::Allowed,
        _ if !role_may => Expect::Refused,
        Reach::Global => Expect::Allowed,
        Reach::Queue if key.covers(side) => Expect::Allowed,
        Reach::Queue => Expect::Refused,
        Reach::Id(_) if key.covers(side) => Expect::Allowed,
        Reach::Id(unknown) => Expect::Unknown(unknown),
        Reach::EveryQueue if key.scoped => Expect::Refused,
        Reach::EveryQueue => Expect::Allowed,
    }
}

/// The cases of one operation: every key on both sides (one side for operations that name no
/// queue), refusals first, so that each refusal meets its fixture as it was set up, before an
/// allowed request (a delete, a purge) changes it.
pub fn cases<U: Copy>(needs: &[Action], reach: Reach<U>) -> Vec<(Key, Side, Expect<U>)> {
    let sides: &[Side] = match reach {
        Reach::Public | Reach::Global => &[Side::Inside],
        _ => &[Side::Outside, Side::Inside],
    };
    let mut out = Vec::new();
    for key in keys() {
        for &side in sides {
            out.push((key.clone(), side, expect(needs, reach, &key, side)));
        }
    }
    out.sort_by_key(|(_, _, e)| matches!(e, Expect::Allowed));
    out
}

/// A broker with keys for every [`Key`], on ephemeral loopback ports: HTTP, frames and SQS.
pub struct Broker {
    /// Base URL of the HTTP API.
    pub http: String,
    /// The frame listener.
    pub frames: SocketAddr,
    /// The SQS listener.
    pub sqs: SocketAddr,
    /// A client for both HTTP listeners.
    pub client: reqwest::Client,
    stop: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Broker {
    /// Starts one over a fresh embedded store.
    pub async fn start() -> Broker {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, _) =
            sluice_embedded::EmbeddedStore::open(dir.path(), Default::default()).expect("store");
        let store: Arc<dyn sluice_core::Store> = Arc::new(store);
        let api_keys = keys()
            .iter()
            .map(|k| ApiKeyConfig {
                name: k.name(),
                role: k.role,
                queues: k.patterns(),
                sha256: hash_secret(&k.secret()),
            })
            .collect();
        let sqs_keys = keys()
            .iter()
            .map(|k| sluice_sqs::SqsKey {
                access_key_id: k.access_key_id(),
                secret_access_key: k.sqs_secret(),
                role: k.role,
                queues: k.patterns(),
            })
            .collect();
        let bind = || tokio::net::TcpListener::bind("127.0.0.1:0");
        let (http, frames, sqs) = (bind().await, bind().await, bind().await);
        let (http, frames, sqs) = (
            http.expect("bind"),
            frames.expect("bind"),
            sqs.expect("bind"),
        );
        let addr = |l: &tokio::net::TcpListener| l.local_addr().expect("address");
        let (http_addr, frames_addr, sqs_addr) = (addr(&http), addr(&frames), addr(&sqs));
        let sqs_router = sluice_sqs::router(
            store.clone(),
            sluice_sqs::SqsOptions {
                keys: sqs_keys,
                ..Default::default()
            },
        );
        let options = ServerOptions {
            keys: KeyRing::new(api_keys).expect("keys"),
            ..ServerOptions::default()
        };
        let broker = sluice_server::Broker::new(store, options)
            .with_frames(frames)
            .with_http("sqs", sqs, sqs_router);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(broker.serve(http, async {
            let _ = stopped.await;
        }));
        Broker {
            http: format!("http://{http_addr}"),
            frames: frames_addr,
            sqs: sqs_addr,
            client: reqwest::Client::new(),
            stop,
            running,
            _dir: dir,
        }
    }

    /// Stops it and waits until it has.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.running.await.expect("broker task").expect("serve");
    }

    /// A request of the all-queues admin that must succeed, for setting cases up.
    pub async fn setup(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let resp = self
            .client
            .request(method.clone(), format!("{}{path}", self.http))
            .bearer_auth(root().secret())
            .json(&body)
            .send()
            .await
            .expect("setup request");
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "setup {method} {path}: {status} {v}");
        v
    }

    /// A fresh queue with its dead-letter queue on `side`, a leased message and a visible
    /// one, a redrive job out of the dead-letter queue and a paused schedule.
    pub async fn fixture(&self, side: Side) -> Fixture {
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let queue = match side {
            Side::Inside => format!("orders-{n}"),
            Side::Outside => format!("billing-{n}"),
        };
        let post = reqwest::Method::POST;
        let path = format!("/v1/queues/{queue}");
        self.setup(reqwest::Method::PUT, &path, json!({})).await;
        let send = format!("{path}/messages");
        self.setup(post.clone(), &send, json!({"body": 1})).await;
        let got = self
            .setup(post.clone(), &format!("{path}/receive"), json!({}))
            .await;
        let receipt = got["messages"][0]["receipt"].as_str().expect("a delivery");
        let sent = self.setup(post.clone(), &send, json!({"body": 2})).await;
        let dlq = format!("{queue}.dlq");
        let job = self
            .setup(
                post,
                "/v1/redrives",
                json!({"source": dlq, "destination": queue, "rate_per_second": 1}),
            )
            .await;
        let schedule = format!("nightly-{n}");
        self.setup(
            reqwest::Method::PUT,
            &format!("/v1/schedules/{schedule}"),
            json!({"queue": queue, "every_ms": 3_600_000, "body": 3, "paused": true}),
        )
        .await;
        Fixture {
            receipt: receipt.to_owned(),
            message: sent["id"].as_str().expect("id").to_owned(),
            job: job["id"].as_str().expect("job id").to_owned(),
            queue,
            dlq,
            schedule,
        }
    }

    /// A fixture on each side.
    pub async fn fixtures(&self) -> Fixtures {
        Fixtures {
            inside: self.fixture(Side::Inside).await,
            outside: self.fixture(Side::Outside).await,
        }
    }
}

/// What one side's cases act on.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// A queue (`orders-7`, `billing-8`).
    pub queue: String,
    /// Its dead-letter queue.
    pub dlq: String,
    /// The receipt of a leased message of `queue`.
    pub receipt: String,
    /// The id of a visible message of `queue`.
    pub message: String,
    /// A redrive job out of `dlq`.
    pub job: String,
    /// A schedule sending to `queue`.
    pub schedule: String,
}

impl Fixture {
    /// The fixture with the ids and names of a message, redrive job and schedule that do not
    /// exist.
    pub fn missing(&self) -> Fixture {
        Fixture {
            message: "0000000000000001".to_owned(),
            job: "0000000000000001".to_owned(),
            schedule: "nightly-0".to_owned(),
            ..self.clone()
        }
    }
}

/// The keys whose role may not do all of `needs`: for an operation on an id, they must be
/// refused whether or not the id exists, or the answer would tell them which ids do.
pub fn refused_by_role(needs: &[Action]) -> Vec<Key> {
    keys()
        .into_iter()
        .filter(|k| expect::<()>(needs, Reach::Queue, k, Side::Inside) == Expect::Refused)
        .collect()
}

/// A fixture inside the scoped keys' patterns and one outside.
pub struct Fixtures {
    /// In `orders*`.
    pub inside: Fixture,
    /// In `billing*`.
    pub outside: Fixture,
}

impl Fixtures {
    /// The one on `side`.
    pub fn on(&self, side: Side) -> &Fixture {
        match side {
            Side::Inside => &self.inside,
            Side::Outside => &self.outside,
        }
    }
}

/// The server's own rules agree with the table.
#[test]
fn the_role_table_is_the_servers() {
    for action in ACTIONS {
        for role in ROLES {
            assert_eq!(
                action.allowed(role),
                roles_for(action).contains(&role),
                "{role:?} {action:?}: the broker and the table disagree"
            );
        }
    }
}

/// The broker's permission table (`sluice_core::access::operations`, where every operation's
/// permission is declared) says what this matrix expects: the same actions for every HTTP
/// route, frame op and SQS action, and no operation the matrix does not try.
#[test]
fn the_declared_permissions_are_the_tested_ones() {
    use sluice_core::access::operations;
    use std::collections::BTreeSet;
    let set = |a: &[Action]| a.iter().map(|x| format!("{x:?}")).collect::<BTreeSet<_>>();
    let mut tried = BTreeSet::new();
    let mut wrong = Vec::new();
    let mut check =
        |what: String, declared: Option<&operations::Operation>, needs: &[Action]| match declared {
            None => wrong.push(format!("{what} is not in the permission table")),
            Some(op) if set(op.actions) != set(needs) => wrong.push(format!(
                "{what}: declared {:?}, tested {:?}",
                op.actions, needs
            )),
            Some(_) => {}
        };
    for r in http::routes() {
        let what = format!("{} {}", r.method, r.path);
        check(what, operations::http(r.method, r.path), r.needs);
        tried.insert(format!("{} {}", r.method, r.path));
    }
    // Requests are built only to be named: any well-formed fixture does.
    let fx = Fixture {
        queue: "q".into(),
        dlq: "q.dlq".into(),
        receipt: sluice_core::Receipt {
            id: sluice_core::MessageId(1),
            token: 1,
        }
        .to_string(),
        message: "1".into(),
        job: "1".into(),
        schedule: "s".into(),
    };
    for (op, _) in frames::requests(&fx, &fx) {
        let (name, needs, _) = frames::rule(&op);
        if name == "Hello" {
            assert!(
                operations::frame(name).is_none(),
                "Hello authenticates, it is no operation"
            );
            continue;
        }
        check(format!("frame op {name}"), operations::frame(name), needs);
        tried.insert(format!("frame {name}"));
    }
    for a in sqs::actions() {
        check(format!("SQS {}", a.name), operations::sqs(a.name), a.needs);
        tried.insert(format!("sqs {}", a.name));
    }
    for op in operations::OPERATIONS {
        let names = op
            .http
            .map(|(m, p)| format!("{m} {p}"))
            .into_iter()
            .chain(op.frames.iter().map(|f| format!("frame {f}")))
            .chain(op.sqs.iter().map(|s| format!("sqs {s}")));
        for n in names {
            if !tried.contains(&n) {
                wrong.push(format!("{} ({n}) is declared but never tried", op.name));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
