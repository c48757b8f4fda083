//! The reference model of the whole `Store` contract, as plain data.
//!
//! Messages are named by model ids (their send order); a view of a message is a [`View`],
//! the engine's [`Message`](sluice_core::message::Message) with model ids and plain types, so
//! that the two compare field by field. Time is the shared clock's: the model is brought up to
//! `now` ([`Model::settle`]) before every operation and before every comparison, as engines
//! bring a queue up to `now` on the first call that looks at it.
//!
//! The rules are those of `docs`/SPEC section 2 with the team's decisions written into the
//! brief of this suite: every delivery that ends (acked, nacked, rejected, moved, lease
//! expired) appends one attempt (the last 20 kept), an ack's outcome is `acked`, release
//! appends nothing; a completed record keeps `enqueued_at` and `entered_at`; a string field
//! holding U+0000 is refused with `invalid_argument`. Where the contract leaves a choice
//! (which visible messages a receive hands out, which dead letters a redrive step moves) the
//! runner checks the engine's choice is allowed and the model follows it.

mod delivery;
mod keys;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use sluice_core::config::{QueueConfig, QueueConfigPatch};
use sluice_core::message::{Body, DeadLetterReason};
use sluice_core::name::QueueName;
use sluice_core::redrive::RedriveState;
use sluice_core::stats::Totals;

/// Attempts kept per message.
const ATTEMPTS_KEPT: usize = 20;

/// One attempt, as compared: time, outcome (its `Debug` name), error, consumer, lease start.
pub type AttemptView = (i64, String, Option<String>, Option<String>, Option<i64>);

/// A message as browse and get show it, with model ids and plain types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// Model id (send order).
    pub id: usize,
    /// Its queue.
    pub queue: String,
    /// `delayed`, `visible`, `in_flight` or `completed`.
    pub state: &'static str,
    /// The body (none for a completed record).
    pub body: Option<Body>,
    /// Attributes.
    pub attributes: BTreeMap<String, String>,
    /// Send time.
    pub enqueued_at: i64,
    /// When it entered its queue.
    pub entered_at: i64,
    /// Due time or lease end.
    pub visible_at: Option<i64>,
    /// Deliveries so far.
    pub receive_count: u32,
    /// Last error.
    pub last_error: Option<String>,
    /// Attempts, oldest first (`None`: not compared, see [`Msg::attempts_unknown`]).
    pub attempts: Option<Vec<AttemptView>>,
    /// Dedup id.
    pub dedup_id: Option<String>,
    /// Source queue.
    pub source_queue: Option<String>,
    /// Dead-letter reason and time.
    pub dead_letter: Option<(&'static str, i64)>,
    /// Result of a completed message.
    pub result: Option<Body>,
    /// Completion time.
    pub completed_at: Option<i64>,
    /// Cancelled.
    pub cancelled: bool,
    /// FIFO group.
    pub group: Option<String>,
    /// Key.
    pub key: Option<String>,
    /// The priority it was sent with.
    pub priority: Option<u8>,
    /// The trace context it was sent with: `traceparent` and `tracestate`.
    pub trace: Option<(String, Option<String>)>,
}

/// Where a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Waiting until `at` (visible once `now >= at`).
    Waiting {
        /// Due time.
        at: i64,
    },
    /// Leased until `until` by delivery `delivery`.
    InFlight {
        /// Lease end.
        until: i64,
        /// Index of the delivery in [`Model::deliveries`].
        delivery: usize,
    },
    /// Completed at `at`, kept until `keep_until`.
    Completed {
        /// Ack time.
        at: i64,
        /// When the record is forgotten.
        keep_until: i64,
    },
}

/// One message of the model.
#[derive(Debug, Clone)]
pub struct Msg {
    /// Its queue.
    pub queue: String,
    /// Where it is.
    pub place: Place,
    /// Body.
    pub body: Body,
    /// Attributes.
    pub attributes: BTreeMap<String, String>,
    /// Send time.
    pub enqueued_at: i64,
    /// When it entered its queue.
    pub entered_at: i64,
    /// Order of entry into its queue (its place in its group's line).
    pub entry: u64,
    /// Deliveries.
    pub receive_count: u32,
    /// Last error.
    pub last_error: Option<String>,
    /// Attempts.
    pub attempts: Vec<AttemptView>,
    /// Set when the attempts are not compared: a cancelled task's end, which the team's
    /// decision on attempts does not cover.
    pub attempts_unknown: bool,
    /// Dedup id.
    pub dedup_id: Option<String>,
    /// Source queue.
    pub source_queue: Option<String>,
    /// Dead letter.
    pub dead_letter: Option<(DeadLetterReason, i64)>,
    /// Result.
    pub result: Option<Body>,
    /// Cancel requested / ended cancelled.
    pub cancelled: bool,
    /// Group.
    pub group: Option<String>,
    /// Key.
    pub key: Option<String>,
    /// The priority it was sent with (`None`: the queue's default when delivered).
    pub priority: Option<u8>,
    /// The trace context it was sent with.
    pub trace: Option<sluice_core::TraceContext>,
}

/// A queue of the model.
#[derive(Debug, Clone)]
pub struct Queue {
    /// Its configuration.
    pub config: QueueConfig,
    /// When it was created.
    pub created_at: i64,
    /// Event totals.
    pub totals: Totals,
    /// Dedup ids: id → (first message, expiry).
    pub dedup: BTreeMap<String, (usize, i64)>,
    /// When each delivery made while it had a `rate_limit` was made: its sliding window.
    pub rate_events: Vec<i64>,
    /// The rate limit's pace: when (ns) the next delivery is due at the even spacing, once
    /// one was made.
    pub rate_due: Option<i64>,
    /// Each key's window and pace while `key_limits` has rates (`None`: the implicit key),
    /// as `rate_events` and `rate_due` are the queue's.
    pub key_rates: BTreeMap<Option<String>, (Vec<i64>, Option<i64>)>,
    /// The keys whose own breaker an operator forced open (`None`: the implicit key), while
    /// the queue's breaker is per key.
    pub forced_keys: BTreeSet<Option<String>>,
}

/// One delivery (receive) made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The message.
    pub msg: usize,
    /// The queue it was leased from.
    pub queue: u8,
    /// When it was leased.
    pub at: i64,
    /// The name its receiver gave.
    pub consumer: Option<String>,
}

/// The conditions of a summary or a redrive the test uses: every given one must hold.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// `last_error` contains this text.
    pub error_contains: Option<String>,
    /// Sent with this key.
    pub key: Option<String>,
}

/// A redrive job as the model follows it.
#[derive(Debug, Clone)]
pub struct Job {
    /// Source queue.
    pub source: String,
    /// Destination, if given.
    pub destination: Option<String>,
    /// Limit.
    pub limit: Option<u64>,
    /// Which dead letters it moves.
    pub filter: Filter,
    /// Reset receive counts.
    pub reset: bool,
    /// Dry run.
    pub dry_run: bool,
    /// State.
    pub state: RedriveState,
    /// Moved so far.
    pub moved: u64,
}

/// A schedule as the model follows it.
#[derive(Debug, Clone)]
pub struct Sched {
    /// Interval.
    pub every_ms: u64,
    /// Target queue.
    pub queue: String,
    /// Body.
    pub body: Body,
    /// Attributes.
    pub attributes: BTreeMap<String, String>,
    /// The key of its messages.
    pub key: Option<String>,
    /// The priority of its messages.
    pub priority: Option<u8>,
    /// Created.
    pub created_at: i64,
    /// Updated.
    pub updated_at: i64,
    /// Anchor.
    pub anchor: i64,
    /// Last fired.
    pub last_fired: Option<i64>,
    /// Fired count.
    pub fired: u64,
    /// Missed count.
    pub missed: u64,
}

/// The whole model.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// Queues by name.
    pub queues: BTreeMap<String, Queue>,
    /// Every message ever stored, by model id; `None` once gone.
    pub msgs: Vec<Option<Msg>>,
    /// Every delivery made, in order.
    pub deliveries: Vec<Delivery>,
    /// Redrive jobs, in creation order.
    pub jobs: Vec<Job>,
    /// Schedules by name.
    pub schedules: BTreeMap<String, Sched>,
    /// Idempotent responses: key → (body, expiry).
    pub idem: BTreeMap<String, (Vec<u8>, i64)>,
    /// The audit entries the scenario appended, oldest first: (actor, action, queue), as
    /// indexes into `AUDIT_ACTORS`, `AUDIT_ACTIONS` and `QUEUES`.
    pub audit: Vec<(u8, u8, u8)>,
    /// Pending claims on idempotency keys: key → (token, fingerprint byte, expiry).
    pub claims: BTreeMap<String, (u64, u8, i64)>,
    /// Entry counter for group lines.
    pub entries: u64,
}

/// A string field holds U+0000: refused by the checking layer.
pub fn has_nul(s: &str) -> bool {
    s.contains('\0')
}

/// Whether a consumer name is refused: a NUL, or longer than the limit in characters.
pub fn bad_consumer(s: &str) -> bool {
    has_nul(s) || s.chars().count() > sluice_core::config::limits::MAX_CONSUMER_CHARS
}

/// The name of a dead-letter reason as the wire says it.
pub fn reason_str(r: DeadLetterReason) -> &'static str {
    r.as_str()
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Model {
    /// The live message `id` (not completed, not gone).
    pub fn live(&self, id: usize) -> Option<&Msg> {
        self.msgs
            .get(id)
            .and_then(Option::as_ref)
            .filter(|m| !matches!(m.place, Place::Completed { .. }))
    }

    /// Whether delivery `d` is still the message's current lease.
    pub fn is_live(&self, d: usize) -> bool {
        let Some(del) = self.deliveries.get(d) else {
            return false;
        };
        self.msgs
            .get(del.msg)
            .and_then(Option::as_ref)
            .is_some_and(|m| matches!(m.place, Place::InFlight { delivery, .. } if delivery == d))
    }

    /// The delivery a pick names.
    pub fn pick(&self, pick: super::ops::Pick) -> Option<usize> {
        use super::ops::Pick;
        if self.deliveries.is_empty() {
            return None;
        }
        let live: Vec<usize> = (0..self.deliveries.len())
            .filter(|d| self.is_live(*d))
            .collect();
        match pick {
            Pick::Live(n) if !live.is_empty() => Some(live[n % live.len()]),
            Pick::Live(n) | Pick::Any(n) => Some(n % self.deliveries.len()),
        }
    }

    fn next_entry(&mut self) -> u64 {
        self.entries += 1;
        self.entries
    }

    /// Appends an attempt, keeping the newest 20.
    fn attempt(m: &mut Msg, a: AttemptView) {
        m.attempts.push(a);
        if m.attempts.len() > ATTEMPTS_KEPT {
            let extra = m.attempts.len() - ATTEMPTS_KEPT;
            m.attempts.drain(..extra);
        }
    }

    /// Brings every queue up to `now`: leases that ran out end (retry, or dead letter on the
    /// last attempt), completed records and dedup ids past their time are forgotten.
    pub fn settle(&mut self, now: i64) {
        for id in 0..self.msgs.len() {
            let Some(m) = self.msgs[id].as_ref() else {
                continue;
            };
            match m.place {
                Place::InFlight { until, .. } if until <= now => {
                    let cfg = self.queues[&m.queue].config.clone();
                    let m = self.msgs[id].as_mut().expect("message");
                    if m.cancelled {
                        self.end_cancelled(id, now);
                        continue;
                    }
                    let Place::InFlight { delivery, .. } = m.place else {
                        unreachable!("matched in flight")
                    };
                    let held = &self.deliveries[delivery];
                    let attempt = (
                        until,
                        "LeaseExpired".into(),
                        None,
                        held.consumer.clone(),
                        Some(held.at),
                    );
                    let m = self.msgs[id].as_mut().expect("message");
                    Self::attempt(m, attempt);
                    if sluice_core::lifecycle::is_exhausted(cfg.max_receive_count, m.receive_count)
                    {
                        self.dead_letter(id, DeadLetterReason::LeaseExpired, now);
                    } else {
                        let m = self.msgs[id].as_mut().expect("message");
                        m.place = Place::Waiting { at: now };
                    }
                }
                Place::Completed { keep_until, .. } if keep_until <= now => {
                    self.msgs[id] = None;
                }
                _ => {}
            }
        }
        for q in self.queues.values_mut() {
            q.dedup.retain(|_, (_, until)| *until > now);
        }
        self.idem.retain(|_, (_, until)| *until > now);
    }

    /// Moves message `id` to its queue's dead-letter queue. The caller has checked there is
    /// one.
    pub fn dead_letter(&mut self, id: usize, reason: DeadLetterReason, now: i64) {
        let entry = self.next_entry();
        let m = self.msgs[id].as_mut().expect("message");
        let from = m.queue.clone();
        let q = self.queues.get_mut(&from).expect("queue");
        let dlq = q
            .config
            .dead_letter_queue
            .as_ref()
            .expect("a dead-letter queue")
            .to_string();
        q.totals.dead_lettered += 1;
        m.queue = dlq;
        m.place = Place::Waiting { at: now };
        m.entered_at = now;
        m.entry = entry;
        m.source_queue = Some(from);
        m.dead_letter = Some((reason, now));
    }

    /// Ends a cancelled task: a completed record marked cancelled, kept `result_ttl`.
    pub fn end_cancelled(&mut self, id: usize, now: i64) {
        let m = self.msgs[id].as_mut().expect("message");
        let ttl = ms(self.queues[&m.queue].config.result_ttl);
        if ttl == 0 {
            self.msgs[id] = None;
            return;
        }
        m.place = Place::Completed {
            at: now,
            keep_until: now + ttl,
        };
        m.cancelled = true;
        m.attempts_unknown = true;
        m.result = None;
    }

    /// Whether `cfg` gives queue `name` a dead-letter queue that exists.
    pub fn has_dlq(&self, name: &str) -> bool {
        self.queues[name]
            .config
            .dead_letter_queue
            .as_ref()
            .is_some_and(|d| self.queues.contains_key(d.as_str()))
    }

    /// Messages in queue `q` (not completed), by model id.
    pub fn in_queue(&self, q: &str) -> Vec<usize> {
        (0..self.msgs.len())
            .filter(|id| self.live(*id).is_some_and(|m| m.queue == q))
            .collect()
    }

    /// The state name of live message `m` at `now`.
    pub fn state_of(m: &Msg, now: i64) -> &'static str {
        match m.place {
            Place::Waiting { at } if at <= now => "visible",
            Place::Waiting { .. } => "delayed",
            Place::InFlight { .. } => "in_flight",
            Place::Completed { .. } => "completed",
        }
    }

    /// Messages counted against `max_depth`: visible, delayed and in flight.
    pub fn depth(&self, q: &str) -> usize {
        self.in_queue(q).len()
    }

    /// Stores a new message (after dedup), returning its model id.
    #[allow(clippy::too_many_arguments)]
    pub fn store_message(
        &mut self,
        queue: &str,
        body: Body,
        attributes: BTreeMap<String, String>,
        delay: i64,
        dedup_id: Option<String>,
        (group, key, priority, trace): (
            Option<String>,
            Option<String>,
            Option<u8>,
            Option<sluice_core::TraceContext>,
        ),
        now: i64,
    ) -> usize {
        let entry = self.next_entry();
        let id = self.msgs.len();
        self.msgs.push(Some(Msg {
            queue: queue.to_owned(),
            place: Place::Waiting { at: now + delay },
            body,
            attributes,
            enqueued_at: now,
            entered_at: now,
            entry,
            receive_count: 0,
            last_error: None,
            attempts: Vec::new(),
            attempts_unknown: false,
            dedup_id: dedup_id.clone(),
            source_queue: None,
            dead_letter: None,
            result: None,
            cancelled: false,
            group,
            key,
            priority,
            trace,
        }));
        let q = self.queues.get_mut(queue).expect("queue");
        q.totals.sent += 1;
        if let Some(d) = dedup_id {
            let window = ms(q.config.dedup_window);
            if window > 0 {
                q.dedup.insert(d, (id, now + window));
            }
        }
        id
    }

    /// Leases message `id` at `now` as a new delivery from queue index `queue` to the
    /// receiver that named itself `consumer`.
    pub fn lease(
        &mut self,
        id: usize,
        queue: u8,
        until: i64,
        now: i64,
        consumer: Option<String>,
    ) -> usize {
        let d = self.deliveries.len();
        self.deliveries.push(Delivery {
            msg: id,
            queue,
            at: now,
            consumer,
        });
        let m = self.msgs[id].as_mut().expect("message");
        m.receive_count += 1;
        m.place = Place::InFlight { until, delivery: d };
        let q = self.queues.get_mut(&m.queue).expect("queue");
        q.totals.received += 1;
        if let Some(rl) = q.config.rate_limit {
            delivery::count_delivery(&rl, &mut q.rate_events, &mut q.rate_due, now);
        }
        let key_rate = q
            .config
            .key_limits
            .as_ref()
            .and_then(|l| l.of(m.key.as_deref()).rate_limit);
        if let Some(rl) = key_rate {
            let (events, due) = q.key_rates.entry(m.key.clone()).or_default();
            delivery::count_delivery(&rl, events, due, now);
        }
        d
    }

    /// Completes message `id` (an ack).
    pub fn ack(&mut self, id: usize, result: Option<Body>, now: i64) {
        let m = self.msgs[id].as_mut().expect("message");
        if m.cancelled {
            self.end_cancelled(id, now);
            return;
        }
        let (consumer, start) = self.holder(id);
        let m = self.msgs[id].as_mut().expect("message");
        Self::attempt(m, (now, "Acked".into(), None, consumer, start));
        let q = self.queues.get_mut(&m.queue).expect("queue");
        q.totals.acked += 1;
        let ttl = ms(q.config.result_ttl);
        if ttl == 0 {
            self.msgs[id] = None;
            return;
        }
        m.place = Place::Completed {
            at: now,
            keep_until: now + ttl,
        };
        m.result = result;
    }

    /// Records a failed delivery on `id` (nack, reject, move).
    pub fn fail(
        &mut self,
        id: usize,
        outcome: &str,
        error: Option<String>,
        consumer: Option<String>,
        now: i64,
    ) {
        let (receiver, start) = self.holder(id);
        let m = self.msgs[id].as_mut().expect("message");
        if error.is_some() {
            m.last_error.clone_from(&error);
        }
        let consumer = consumer.or(receiver);
        Self::attempt(m, (now, outcome.to_owned(), error, consumer, start));
    }

    /// The receiver's name and the lease start of message `id`'s current delivery.
    fn holder(&self, id: usize) -> (Option<String>, Option<i64>) {
        match self.msgs[id].as_ref().map(|m| m.place) {
            Some(Place::InFlight { delivery, .. }) => {
                let d = &self.deliveries[delivery];
                (d.consumer.clone(), Some(d.at))
            }
            _ => (None, None),
        }
    }

    /// Moves `id` to queue `to` as a fresh visible message there.
    pub fn move_to(&mut self, id: usize, to: &str, now: i64) {
        let entry = self.next_entry();
        let m = self.msgs[id].as_mut().expect("message");
        m.source_queue = Some(m.queue.clone());
        m.dead_letter = None;
        m.queue = to.to_owned();
        m.place = Place::Waiting { at: now };
        m.entered_at = now;
        m.entry = entry;
        m.receive_count = 0;
    }

    /// Redrives dead letter `id` to `to`.
    pub fn redrive(&mut self, id: usize, to: &str, reset: bool, now: i64) {
        let entry = self.next_entry();
        let m = self.msgs[id].as_mut().expect("message");
        m.dead_letter = None;
        m.queue = to.to_owned();
        m.place = Place::Waiting { at: now };
        m.entered_at = now;
        m.entry = entry;
        if reset {
            m.receive_count = 0;
        }
        self.queues.get_mut(to).expect("queue").totals.redriven += 1;
    }

    /// Whether message `m` passes a summary's or a redrive's filter.
    pub fn matches(m: &Msg, f: &Filter) -> bool {
        f.error_contains
            .as_deref()
            .is_none_or(|n| m.last_error.as_deref().is_some_and(|e| e.contains(n)))
            && f.key.as_ref().is_none_or(|k| m.key.as_ref() == Some(k))
    }

    /// The view of message `id` at `now`, if it exists.
    pub fn view(&self, id: usize, now: i64) -> Option<View> {
        let m = self.msgs.get(id)?.as_ref()?;
        let done = matches!(m.place, Place::Completed { .. });
        Some(View {
            id,
            queue: m.queue.clone(),
            state: Self::state_of(m, now),
            body: (!done).then(|| m.body.clone()),
            attributes: if done {
                BTreeMap::new()
            } else {
                m.attributes.clone()
            },
            enqueued_at: m.enqueued_at,
            entered_at: m.entered_at,
            visible_at: match m.place {
                Place::Waiting { at } => Some(at),
                Place::InFlight { until, .. } => Some(until),
                Place::Completed { .. } => None,
            },
            receive_count: m.receive_count,
            last_error: m.last_error.clone(),
            attempts: (!m.attempts_unknown).then(|| m.attempts.clone()),
            dedup_id: if done { None } else { m.dedup_id.clone() },
            source_queue: if done { None } else { m.source_queue.clone() },
            dead_letter: if done {
                None
            } else {
                m.dead_letter.map(|(r, at)| (reason_str(r), at))
            },
            result: if done { m.result.clone() } else { None },
            completed_at: match m.place {
                Place::Completed { at, .. } => Some(at),
                _ => None,
            },
            cancelled: m.cancelled,
            group: if done { None } else { m.group.clone() },
            key: if done { None } else { m.key.clone() },
            priority: if done { None } else { m.priority },
            trace: if done {
                None
            } else {
                trace_view(m.trace.as_ref())
            },
        })
    }

    /// Applies a queue put (create or update) as the engines must: the patch over the
    /// current config (or the defaults), a missing dead-letter queue created with the
    /// dead-letter defaults. Returns whether it was created.
    ///
    /// # Errors
    /// The code the engines must answer.
    pub fn put_queue(
        &mut self,
        name: &QueueName,
        patch: &QueueConfigPatch,
        create_only: bool,
        now: i64,
    ) -> Result<bool, sluice_core::ErrorCode> {
        let exists = self.queues.contains_key(name.as_str());
        if exists && create_only {
            return Err(sluice_core::ErrorCode::Conflict);
        }
        let base = match self.queues.get(name.as_str()) {
            Some(q) => q.config.clone(),
            None => QueueConfig::defaults_for(name),
        };
        let cfg = base.apply(name, patch).map_err(|e| e.code())?;
        if let Some(dlq) = &cfg.dead_letter_queue
            && !self.queues.contains_key(dlq.as_str())
        {
            self.queues.insert(
                dlq.to_string(),
                Queue {
                    config: QueueConfig::dead_letter_defaults(dlq),
                    created_at: now,
                    totals: Totals::default(),
                    dedup: BTreeMap::new(),
                    rate_events: Vec::new(),
                    rate_due: None,
                    key_rates: BTreeMap::new(),
                    forced_keys: BTreeSet::new(),
                },
            );
        }
        match self.queues.get_mut(name.as_str()) {
            Some(q) => {
                // Key windows live while the queue has key rates.
                if !cfg
                    .key_limits
                    .as_ref()
                    .is_some_and(sluice_core::fair::KeyLimits::rates)
                {
                    q.key_rates.clear();
                }
                // Forced key breakers live while the breaker is per key.
                if sluice_core::adaptive::key_breaker(&cfg).is_none() {
                    q.forced_keys.clear();
                }
                q.config = cfg;
            }
            None => {
                self.queues.insert(
                    name.to_string(),
                    Queue {
                        config: cfg,
                        created_at: now,
                        totals: Totals::default(),
                        dedup: BTreeMap::new(),
                        rate_events: Vec::new(),
                        rate_due: None,
                        key_rates: BTreeMap::new(),
                        forced_keys: BTreeSet::new(),
                    },
                );
            }
        }
        Ok(!exists)
    }

    /// Deletes a queue and every message in it (completed records too).
    ///
    /// # Errors
    /// The code the engines must answer.
    pub fn delete_queue(&mut self, name: &str) -> Result<(), sluice_core::ErrorCode> {
        if !self.queues.contains_key(name) {
            return Err(sluice_core::ErrorCode::QueueNotFound);
        }
        let used = self.queues.iter().any(|(n, q)| {
            n != name
                && q.config
                    .dead_letter_queue
                    .as_ref()
                    .is_some_and(|d| d.as_str() == name)
        });
        if used {
            return Err(sluice_core::ErrorCode::Conflict);
        }
        self.queues.remove(name);
        for slot in &mut self.msgs {
            if slot.as_ref().is_some_and(|m| m.queue == name) {
                *slot = None;
            }
        }
        Ok(())
    }
}

/// A trace context as a [`View`] compares it.
pub fn trace_view(t: Option<&sluice_core::TraceContext>) -> Option<(String, Option<String>)> {
    t.map(|t| {
        (
            t.traceparent().to_owned(),
            t.tracestate().map(str::to_owned),
        )
    })
}
