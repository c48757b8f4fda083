//! The operations of a differential scenario, and the proptest strategies that draw them.
//!
//! Everything an operation names is an index into what the scenario has made so far
//! (messages by send order, deliveries by receive order, redrive jobs by creation order), taken
//! modulo the count when it runs: so a shrunk scenario stays meaningful, and the same
//! operations mean the same things on every engine whatever ids the engine assigns.

use proptest::prelude::*;

/// The queue names a scenario uses, by index: three work queues, their default dead-letter
/// queues, and a shared dead-letter queue `dl` that a queue may be configured with.
pub const QUEUES: [&str; 7] = ["a", "b", "c", "a.dlq", "b.dlq", "c.dlq", "dl"];

/// The name of queue index `i` (modulo the list).
pub fn queue_name(i: u8) -> &'static str {
    QUEUES[i as usize % QUEUES.len()]
}

/// The schedule names a scenario uses.
pub const SCHEDULES: [&str; 2] = ["s1", "s2"];

/// The actors of the audit entries a scenario appends (never the broker's own).
pub const AUDIT_ACTORS: [&str; 3] = ["ops", "deploy", "sqs:AKIA1"];

/// The actions of the audit entries a scenario appends.
pub const AUDIT_ACTIONS: [&str; 3] = ["queue.purge", "queue.update", "redrive.create"];

/// A body as drawn: each kind of [`sluice_core::message::Body`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodySpec {
    /// A JSON body `{"n":N}`.
    Json(u32),
    /// A text body.
    Text(String),
    /// Raw bytes (any, including NUL and invalid UTF-8).
    Binary(Vec<u8>),
}

/// One message of a send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsgSpec {
    /// The body.
    pub body: BodySpec,
    /// Attributes (keys and values from all of Unicode).
    pub attributes: Vec<(String, String)>,
    /// An explicit delay in ms; `None` takes the queue's default.
    pub delay_ms: Option<u64>,
    /// A dedup id.
    pub dedup_id: Option<String>,
    /// A FIFO group (names with control characters cannot be expressed and are dropped).
    pub group: Option<String>,
    /// A key (keys that are not valid are dropped, as groups are).
    pub key: Option<String>,
    /// A priority; 10 is out of range, for the refusal.
    pub priority: Option<u8>,
    /// A trace context: the last byte of its span id, and whether it has a `tracestate`.
    pub trace: Option<(u8, bool)>,
}

/// A queue configuration change as drawn: `None` leaves the field out of the patch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatchSpec {
    /// `visibility_timeout` in ms.
    pub visibility_ms: Option<u64>,
    /// `max_receive_count`.
    pub max_receive_count: Option<u32>,
    /// `dead_letter_queue`: `Some(None)` clears it, `Some(Some(i))` names queue `i`.
    pub dead_letter_queue: Option<Option<u8>>,
    /// Default `delay` in ms.
    pub delay_ms: Option<u64>,
    /// `dedup_window` in ms.
    pub dedup_window_ms: Option<u64>,
    /// `result_ttl` in ms.
    pub result_ttl_ms: Option<u64>,
    /// `paused`.
    pub paused: Option<bool>,
    /// `max_depth` (`Some(None)` clears).
    pub max_depth: Option<Option<u64>>,
    /// `max_in_flight` (`Some(None)` clears).
    pub max_in_flight: Option<Option<u32>>,
    /// `max_message_bytes`.
    pub max_message_bytes: Option<u32>,
    /// `max_in_flight_per_group`.
    pub max_in_flight_per_group: Option<u32>,
    /// `rate_limit`, that many per [`RATE_PERIOD_MS`] (`Some(None)` clears). One period for
    /// every queue: how events older than a shorter earlier period are forgotten is the
    /// engine's choice.
    pub rate_limit: Option<Option<u32>>,
    /// `default_priority`.
    pub default_priority: Option<u8>,
    /// `key_weights`, replaced whole: key `k1` weighs this much (`Some(None)`: no weights).
    pub key_weights: Option<Option<u32>>,
    /// `key_limits`, replaced whole: every key at most this many in flight, `k1` one more
    /// (0: no in-flight limit, for `key_rate` alone; `Some(None)`: no limits).
    pub key_limits: Option<Option<u32>>,
    /// The `burst` of a `rate_limit` the patch sets (above the limit: refused).
    pub rate_burst: Option<u32>,
    /// With `key_limits` set: every key at most this many deliveries per
    /// [`RATE_PERIOD_MS`] (its default burst), `k1` one more.
    pub key_rate: Option<u32>,
    /// A breaker per key (`Some(true)`), one for the queue (`Some(false)`), or none
    /// (`None` inside: `Some(None)`). Its `min_calls` is more than a scenario makes, so a
    /// breaker here opens only when forced ([`Op::ForceKeyBreaker`]): how failures open one is
    /// `sluice_core::adaptive`'s, tested there; here what a forced key does to deliveries,
    /// attempts, restarts and reconfiguration.
    pub breaker: Option<Option<bool>>,
    /// An adaptive rate per key (`Some(true)`, with a `key_idle_ms`), one for the queue
    /// (`Some(false)`), or none (`Some(None)`). Its rate is pinned at the most a queue may
    /// have (`min_per_min` = `max_per_min`), and no nack here carries a Retry-After, so it
    /// never holds a delivery back: what is compared is the setting itself (kept across
    /// restarts and reconfiguration) and each key's rate in the keys listing (the ceiling of
    /// `rate_limit` and `key_limits`, as `sluice_core::adaptive` computes it). How congestion
    /// moves a rate is `sluice_core::adaptive`'s, tested there in virtual time.
    pub adaptive: Option<Option<bool>>,
}

/// The period of every `rate_limit` the differential test sets.
pub const RATE_PERIOD_MS: u64 = 10_000;

/// Which delivery a settling operation names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The n-th (modulo) live delivery; falls back to any delivery when none is live.
    Live(usize),
    /// The n-th (modulo) delivery ever made, live or over.
    Any(usize),
}

/// How a summary groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupBySpec {
    /// By last error.
    Error,
    /// By dead-letter reason.
    Reason,
    /// By source queue.
    Source,
    /// By message key.
    Key,
    /// By an attribute.
    Attribute(String),
}

/// A redrive job control.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlSpec {
    /// Cancel.
    Cancel,
    /// Pause with a reason.
    Pause(String),
    /// Resume.
    Resume,
}

/// One step of a scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Op {
    /// `put_queue` (create or update).
    PutQueue { queue: u8, patch: PatchSpec },
    /// `create_queue` (create only).
    CreateQueue { queue: u8, patch: PatchSpec },
    /// `delete_queue`.
    DeleteQueue { queue: u8 },
    /// `send` of a batch.
    Send { queue: u8, messages: Vec<MsgSpec> },
    /// `receive`.
    Receive {
        queue: u8,
        max: u32,
        visibility_ms: Option<u64>,
        consumer: Option<String>,
    },
    /// `ack` of one delivery, with an optional result.
    Ack {
        pick: Pick,
        result: Option<BodySpec>,
    },
    /// `nack` with an explicit delay (backoff jitter is random).
    Nack {
        pick: Pick,
        delay_ms: u64,
        error: Option<String>,
        consumer: Option<String>,
    },
    /// `reject`.
    Reject { pick: Pick, error: Option<String> },
    /// `move_message` to queue `to`.
    Move {
        pick: Pick,
        to: u8,
        error: Option<String>,
    },
    /// `extend`.
    Extend { pick: Pick, visibility_ms: u64 },
    /// `release`.
    Release { pick: Pick },
    /// `purge`.
    Purge { queue: u8 },
    /// `delete_message` of the n-th message sent.
    DeleteMessage { msg: usize },
    /// `cancel` of the n-th message sent.
    Cancel { msg: usize },
    /// `summarize` a queue.
    Summarize {
        queue: u8,
        group_by: GroupBySpec,
        error_contains: Option<String>,
        /// Only messages sent with this key.
        key: Option<String>,
    },
    /// `keys` of a queue, walked page by page in one order (`0` backlog, `1` in flight, `2`
    /// oldest, `3` breaker), `limit` keys a page (0 is refused).
    Keys { queue: u8, order: u8, limit: u32 },
    /// `create_redrive` from a queue.
    CreateRedrive {
        source: u8,
        destination: Option<u8>,
        limit: Option<u64>,
        error_contains: Option<String>,
        /// Only messages sent with this key.
        key: Option<String>,
        reset_receive_count: bool,
        dry_run: bool,
    },
    /// `redrive_step` of the n-th job.
    RedriveStep { job: usize, max: u32 },
    /// `control_redrive` of the n-th job.
    ControlRedrive { job: usize, control: ControlSpec },
    /// `put_schedule` (an `every_ms` trigger).
    PutSchedule {
        name: u8,
        every_ms: u64,
        queue: u8,
        body: BodySpec,
        attributes: Vec<(String, String)>,
        /// The key and priority of its messages (priority 10 is refused).
        tag: (Option<String>, Option<u8>),
    },
    /// `delete_schedule`.
    DeleteSchedule { name: u8 },
    /// `step_schedule` from the schedule's current `last_fired` (or a stale one).
    StepSchedule {
        name: u8,
        ahead_ms: u64,
        fire: bool,
        missed: u64,
        stale: bool,
    },
    /// `idempotency_put`.
    IdemPut { key: String, body: Vec<u8> },
    /// `idempotency_get`.
    IdemGet { key: String },
    /// `idempotency_claim` by one of a few request tokens, with a lease in ms (0 is refused).
    IdemClaim {
        key: String,
        token: u64,
        lease_ms: u64,
    },
    /// `idempotency_release` by one of a few request tokens.
    IdemRelease { key: String, token: u64 },
    /// Two receives of one queue at the same moment (on two nodes where there are two).
    ConcurrentReceive { queue: u8, max: u32 },
    /// Two sends of one dedup id at the same moment (on two nodes where there are two).
    ConcurrentDedupSend { queue: u8, dedup_id: String },
    /// `audit_append` of an operator's entry: `AUDIT_ACTORS[actor]` did `AUDIT_ACTIONS[action]`
    /// on `queue`.
    AuditAppend { actor: u8, action: u8, queue: u8 },
    /// `audit_query` with the given conditions. `kind` 0 is `operator`, which the model answers
    /// (it knows every entry not by the broker); 1 (`message`) and 2 (`broker`) ask for the
    /// engine's own entries, which are checked for their kind and count.
    AuditQuery {
        kind: Option<u8>,
        actor: Option<u8>,
        actions: Vec<u8>,
        queue: Option<u8>,
        limit: u8,
    },
    /// `force_key_breaker` of key `k1`, `k2` or the implicit key (`key` 0, 1, 2) of a queue,
    /// open or closed.
    ForceKeyBreaker { queue: u8, key: u8, open: bool },
    /// Moves the shared clock forward.
    Advance { ms: u64 },
    /// Drops the store(s) and opens the same data again.
    Restart,
    /// Runs the engine's compaction (embedded: maintenance after a restart starts a new
    /// segment, so the old one can be compacted); a restart elsewhere.
    Compact,
    /// Kills the store (embedded: drops it and appends these bytes, a torn record, past the
    /// end of the newest log segment) and recovers.
    Crash { junk: Vec<u8> },
}

/// A string from the whole of Unicode: a few short ASCII values (so that values collide and
/// filters match), and arbitrary characters including NUL, control characters and astral
/// planes.
pub fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["x", "y", "boom", "é✓", "𝄞"]).prop_map(str::to_owned),
        2 => prop::collection::vec(any::<char>(), 1..5).prop_map(|v| v.into_iter().collect()),
        1 => prop::collection::vec(
            prop_oneof![
                Just('\u{0}'),
                Just('\u{1}'),
                Just('\u{1b}'),
                Just('\u{7f}'),
                Just('\u{fffd}'),
                Just('\u{10ffff}'),
                Just('\u{1f600}'),
                Just('a'),
            ],
            1..4
        )
        .prop_map(|v| v.into_iter().collect()),
    ]
}

fn opt_text() -> impl Strategy<Value = Option<String>> {
    prop::option::weighted(0.6, any_text())
}

/// A consumer name: mostly short texts, sometimes one a character past the limit (refused)
/// or exactly at it (kept).
fn opt_consumer() -> impl Strategy<Value = Option<String>> {
    use sluice_core::config::limits::MAX_CONSUMER_CHARS;
    prop_oneof![
        8 => opt_text(),
        1 => Just(Some("é".repeat(MAX_CONSUMER_CHARS + 1))),
        1 => Just(Some("w".repeat(MAX_CONSUMER_CHARS))),
    ]
}

fn body_spec() -> impl Strategy<Value = BodySpec> {
    prop_oneof![
        (0u32..100).prop_map(BodySpec::Json),
        any_text().prop_map(BodySpec::Text),
        prop::collection::vec(any::<u8>(), 0..24).prop_map(BodySpec::Binary),
    ]
}

fn attrs() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec((any_text(), any_text()), 0..3)
}

/// A key filter: mostly none, else one of the keys messages are sent with or one no message
/// has.
fn filter_key() -> impl Strategy<Value = Option<String>> {
    prop::option::weighted(
        0.25,
        prop::sample::select(vec!["k1", "k2", "k9"]).prop_map(str::to_owned),
    )
}

fn msg_spec() -> impl Strategy<Value = MsgSpec> {
    (
        body_spec(),
        attrs(),
        prop::option::weighted(0.3, prop::sample::select(vec![0u64, 1500, 5000, 20_000])),
        prop::option::weighted(0.3, prop_oneof![3 => Just("d".to_owned()), 1 => any_text()]),
        prop::option::weighted(
            0.3,
            prop_oneof![4 => prop::sample::select(vec!["g1", "g2"]).prop_map(str::to_owned), 1 => any_text()],
        ),
        (
            prop::option::weighted(
                0.4,
                prop_oneof![6 => prop::sample::select(vec!["k1", "k2", "k3"]).prop_map(str::to_owned), 1 => any_text()],
            ),
            prop::option::weighted(0.35, prop_oneof![12 => 0u8..10, 1 => Just(10u8)]),
            prop::option::weighted(0.3, (any::<u8>(), any::<bool>())),
        ),
    )
        .prop_map(
            |(body, attributes, delay_ms, dedup_id, group, (key, priority, trace))| MsgSpec {
                body,
                attributes,
                delay_ms,
                dedup_id,
                group,
                key,
                priority,
                trace,
            },
        )
}

fn patch_spec() -> impl Strategy<Value = PatchSpec> {
    let a = (
        prop::option::weighted(0.3, prop::sample::select(vec![0u64, 2000, 10_000, 30_000])),
        prop::option::weighted(0.4, prop::sample::select(vec![0u32, 1, 2, 3])),
        prop::option::weighted(
            0.3,
            prop_oneof![
                Just(None),
                prop::sample::select(vec![3u8, 4, 5, 6]).prop_map(Some)
            ],
        ),
        prop::option::weighted(0.15, prop::sample::select(vec![0u64, 3000])),
        prop::option::weighted(0.2, prop::sample::select(vec![0u64, 4000, 300_000])),
        prop::option::weighted(0.2, prop::sample::select(vec![0u64, 5000, 3_600_000])),
    );
    let b = (
        prop::option::weighted(0.2, any::<bool>()),
        prop::option::weighted(0.15, prop::option::of(1u64..5)),
        prop::option::weighted(0.15, prop::option::of(1u32..3)),
        prop::option::weighted(0.1, prop::sample::select(vec![8u32, 262_144])),
        prop::option::weighted(0.15, 1u32..3),
        prop::option::weighted(0.12, prop::option::of(1u32..4)),
    );
    let c = (
        prop::option::weighted(0.1, prop::sample::select(vec![0u8, 4, 9])),
        prop::option::weighted(0.1, prop::option::of(prop::sample::select(vec![1u32, 3]))),
        prop::option::weighted(0.3, prop::option::of(0u32..3)),
        prop::option::weighted(0.4, 1u32..5),
        prop::option::weighted(0.5, 1u32..4),
        prop::option::weighted(
            0.35,
            prop_oneof![4 => Just(Some(true)), 1 => Just(Some(false)), 1 => Just(None)],
        ),
        prop::option::weighted(
            0.25,
            prop_oneof![3 => Just(Some(true)), 1 => Just(Some(false)), 1 => Just(None)],
        ),
    );
    (a, b, c).prop_map(
        |((v, m, d, de, dw, rt), (p, md, mi, mb, mg, rl), (dp, kw, kl, rb, kr, br, ad))| {
            PatchSpec {
                visibility_ms: v,
                max_receive_count: m,
                dead_letter_queue: d,
                delay_ms: de,
                dedup_window_ms: dw,
                result_ttl_ms: rt,
                paused: p,
                max_depth: md,
                max_in_flight: mi,
                max_message_bytes: mb,
                max_in_flight_per_group: mg,
                rate_limit: rl,
                default_priority: dp,
                key_weights: kw,
                key_limits: kl,
                rate_burst: rb,
                key_rate: kr,
                breaker: br,
                adaptive: ad,
            }
        },
    )
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![4 => (0usize..8).prop_map(Pick::Live), 1 => (0usize..8).prop_map(Pick::Any)]
}

fn queue() -> impl Strategy<Value = u8> {
    // Work queues more often than dead-letter queues.
    prop_oneof![4 => 0u8..3, 1 => 3u8..7]
}

/// One operation. `crashes` allows `Crash` and `Compact` (engines that can be killed).
///
/// Long because the weight of every operation is set in this one place, so the mix the differential
/// test draws is read and tuned as a whole.
pub fn op_strategy() -> impl Strategy<Value = Op> {
    let queues = prop_oneof![
        3 => (queue(), patch_spec()).prop_map(|(queue, patch)| Op::PutQueue { queue, patch }),
        1 => (queue(), patch_spec()).prop_map(|(queue, patch)| Op::CreateQueue { queue, patch }),
        1 => queue().prop_map(|queue| Op::DeleteQueue { queue }),
        1 => queue().prop_map(|queue| Op::Purge { queue }),
        2 => (0u8..3, 0u8..3, prop::bool::weighted(0.7))
            .prop_map(|(queue, key, open)| Op::ForceKeyBreaker { queue, key, open }),
    ];
    let messaging = prop_oneof![
        8 => (queue(), prop::collection::vec(msg_spec(), 1..4))
            .prop_map(|(queue, messages)| Op::Send { queue, messages }),
        8 => (
            queue(),
            1u32..4,
            prop::option::weighted(0.3, prop::sample::select(vec![0u64, 1000, 8000])),
            opt_consumer()
        )
            .prop_map(|(queue, max, visibility_ms, consumer)| Op::Receive {
                queue,
                max,
                visibility_ms,
                consumer
            }),
        4 => (pick(), prop::option::weighted(0.4, body_spec()))
            .prop_map(|(pick, result)| Op::Ack { pick, result }),
        4 => (pick(), prop::sample::select(vec![0u64, 1000, 6000]), opt_text(), opt_consumer())
            .prop_map(|(pick, delay_ms, error, consumer)| Op::Nack {
                pick,
                delay_ms,
                error,
                consumer
            }),
        2 => (pick(), opt_text()).prop_map(|(pick, error)| Op::Reject { pick, error }),
        1 => (pick(), queue(), opt_text()).prop_map(|(pick, to, error)| Op::Move { pick, to, error }),
        1 => (pick(), prop::sample::select(vec![0u64, 3000, 20_000]))
            .prop_map(|(pick, visibility_ms)| Op::Extend { pick, visibility_ms }),
        1 => pick().prop_map(|pick| Op::Release { pick }),
        1 => (0usize..16).prop_map(|msg| Op::DeleteMessage { msg }),
        1 => (0usize..16).prop_map(|msg| Op::Cancel { msg }),
    ];
    let dlq = prop_oneof![
        1 => (queue(), 0u8..4, prop_oneof![1 => Just(0u32), 8 => 1u32..4])
            .prop_map(|(queue, order, limit)| Op::Keys { queue, order, limit }),
        2 => (
            queue(),
            prop::sample::select(vec![
                GroupBySpec::Error,
                GroupBySpec::Reason,
                GroupBySpec::Source,
                GroupBySpec::Key,
                GroupBySpec::Attribute("x".into())
            ]),
            prop::option::weighted(0.2, any_text()),
            filter_key()
        )
            .prop_map(|(queue, group_by, error_contains, key)| Op::Summarize {
                queue,
                group_by,
                error_contains,
                key
            }),
        2 => (
            3u8..7,
            prop::option::weighted(0.3, 0u8..3),
            prop::option::weighted(0.3, 1u64..3),
            (prop::option::weighted(0.2, any_text()), filter_key()),
            any::<bool>(),
            prop::bool::weighted(0.2)
        )
            .prop_map(
                |(source, destination, limit, (error_contains, key), reset_receive_count, dry_run)| {
                    Op::CreateRedrive {
                        source,
                        destination,
                        limit,
                        error_contains,
                        key,
                        reset_receive_count,
                        dry_run,
                    }
                }
            ),
        3 => (0usize..4, 1u32..3).prop_map(|(job, max)| Op::RedriveStep { job, max }),
        1 => (
            0usize..4,
            prop_oneof![
                Just(ControlSpec::Cancel),
                any_text().prop_map(ControlSpec::Pause),
                Just(ControlSpec::Resume)
            ]
        )
            .prop_map(|(job, control)| Op::ControlRedrive { job, control }),
    ];
    let rest = prop_oneof![
        1 => (
            0u8..2,
            prop::sample::select(vec![1000u64, 60_000]),
            queue(),
            body_spec(),
            attrs(),
            (
                prop::option::weighted(0.4, prop::sample::select(vec!["k1", "k2"]).prop_map(str::to_owned)),
                prop::option::weighted(0.3, prop_oneof![8 => 0u8..10, 1 => Just(10u8)]),
            )
        )
            .prop_map(|(name, every_ms, queue, body, attributes, tag)| Op::PutSchedule {
                name,
                every_ms,
                queue,
                body,
                attributes,
                tag
            }),
        1 => (0u8..2).prop_map(|name| Op::DeleteSchedule { name }),
        2 => (0u8..2, prop::sample::select(vec![1u64, 1000, 5000]), any::<bool>(), 0u64..3, prop::bool::weighted(0.15))
            .prop_map(|(name, ahead_ms, fire, missed, stale)| Op::StepSchedule {
                name,
                ahead_ms,
                fire,
                missed,
                stale
            }),
        1 => (any_text(), prop::collection::vec(any::<u8>(), 0..8))
            .prop_map(|(key, body)| Op::IdemPut { key, body }),
        1 => any_text().prop_map(|key| Op::IdemGet { key }),
        1 => (any_text(), 0u64..3, prop::sample::select(vec![0u64, 1000, 60_000]))
            .prop_map(|(key, token, lease_ms)| Op::IdemClaim { key, token, lease_ms }),
        1 => (any_text(), 0u64..3).prop_map(|(key, token)| Op::IdemRelease { key, token }),
        1 => (0u8..3, 0u8..3, queue())
            .prop_map(|(actor, action, queue)| Op::AuditAppend { actor, action, queue }),
        1 => (
            prop::option::weighted(0.8, 0u8..3),
            prop::option::weighted(0.5, 0u8..3),
            prop::collection::vec(0u8..3, 0..3),
            prop::option::weighted(0.3, queue()),
            1u8..5
        )
            .prop_map(|(kind, actor, actions, queue, limit)| Op::AuditQuery {
                kind,
                actor,
                actions,
                queue,
                limit
            }),
        1 => (queue(), 1u32..4).prop_map(|(queue, max)| Op::ConcurrentReceive { queue, max }),
        1 => (queue(), any_text()).prop_map(|(queue, dedup_id)| Op::ConcurrentDedupSend { queue, dedup_id }),
        6 => prop_oneof![
            1u64..3000,
            prop::sample::select(vec![1000u64, 2000, 8000, 10_000, 30_000, 400_000])
        ]
        .prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Restart),
        1 => Just(Op::Compact),
        1 => prop::collection::vec(any::<u8>(), 1..40).prop_map(|junk| Op::Crash { junk }),
    ];
    prop_oneof![3 => queues, 12 => messaging, 3 => dlq, 4 => rest]
}

/// A scenario: queues `a` and `b` exist first (most operations then do something), followed
/// by 1 to `max_len` random operations.
pub fn scenario(max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op_strategy(), 1..=max_len).prop_map(|ops| {
        let mut all = vec![
            Op::PutQueue {
                queue: 0,
                patch: PatchSpec::default(),
            },
            Op::PutQueue {
                queue: 1,
                patch: PatchSpec {
                    max_receive_count: Some(2),
                    dead_letter_queue: Some(Some(6)),
                    ..PatchSpec::default()
                },
            },
        ];
        all.extend(ops);
        all
    })
}
