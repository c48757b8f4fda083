//! Plain sends of one queue combined: those that arrive while earlier writes of the queue are
//! under way share the next insert statement and its commit (see [`crate::hot::combine`]),
//! large ones stored as packs; messages that receives waiting on this node want are handed to
//! them inserted leased (see [`crate::hot::handoff`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::store::validate_bodies_fit;
use sluice_core::{
    Delivery, MessageId, NewMessage, QueueConfig, Receipt, SendOutcome, StoreError, Timestamp,
};
use tokio::sync::oneshot;
use tokio_postgres::GenericClient;

use crate::error::db;
use crate::local::QueueLocal;
use crate::store::Inner;

use crate::ops::send::{HandOff, INSERT_SQL, insert};

/// Whether a plain send of `messages` is stored as a pack. Not on queues with global limits
/// or governed ones, which count and lease rows only, nor with keys, priorities or trace
/// context, which packs do not hold.
fn packed(inner: &Inner, cfg: &QueueConfig, messages: &[NewMessage], tagged: bool) -> bool {
    !crate::flow::limited(cfg)
        && !tagged
        && crate::hot::packs::packable(inner.pack_min, cfg.delay, messages)
}

/// Plain insert statements of one queue a node runs at the same time. Two: a send waits
/// for its commit's WAL flush, and two in flight let one gather while the other flushes
/// (measured at one message per send, 4 producers and 4 consumers: 1,884 – 1,972 msg/s
/// against 1,641 – 1,677 with one). Not more for large sends: with 100 messages per send
/// and four inserts at a time, producers outran consumers and every lease then scanned a
/// longer backlog (11,479 – 13,411 msg/s against 20,554 – 23,821). One while the queue's
/// consumers on this node are behind (`QueueLocal::backlog`): at one message per send, 4 + 4,
/// once acks had become cheap, two in flight let producers outrun consumers into a backlog
/// of seconds; one throughout lost a fifth with 2 producers and 6 consumers.
pub(crate) const SENDS_IN_FLIGHT: usize = 2;

/// A plain send waiting for its queue's next combined write.
pub(crate) struct SendJob {
    messages: Vec<NewMessage>,
    /// The queue's default delay as the caller saw it.
    delay: Duration,
    /// Whether it is stored as a pack.
    pack: bool,
    /// Whether a message is stored as a row of its own: a key, a priority or trace context.
    tagged: bool,
    reply: oneshot::Sender<Result<(Vec<SendOutcome>, bool), StoreError>>,
}

/// Sends a batch with no dedup ids and no `max_depth`. Plain sends of one queue that arrive
/// together are written as one statement committed on its own (see [`crate::hot::combine`]): the
/// rows of many producers in one round trip and one WAL flush. `cfg` may be a recently
/// cached copy; the insert itself checks that the queue still exists. `Checked` has checked
/// the batch (`validate_send_batch`).
pub(crate) async fn send_combined(
    inner: &Arc<Inner>,
    queue: &Arc<QueueLocal>,
    cfg: &QueueConfig,
    messages: Vec<NewMessage>,
) -> Result<(Vec<SendOutcome>, bool), StoreError> {
    validate_bodies_fit(cfg, &queue.name, &messages)?;
    let (reply, answer) = oneshot::channel();
    let tagged = messages.iter().any(crate::ops::send::own_row);
    let job = SendJob {
        pack: packed(inner, cfg, &messages, tagged),
        tagged,
        messages,
        delay: cfg.delay,
        reply,
    };
    // While the queue's consumers are behind, a send's wait hides behind the backlog's: one
    // insert at a time gathers more sends per commit and leaves the database's time to the
    // leases.
    let limit = if queue.backlog.has() {
        1
    } else {
        SENDS_IN_FLIGHT
    };
    if let Some(batch) = queue.sends.push_within((), job, limit) {
        // A task of its own, so a caller that goes away does not stop the others' write.
        let (inner, queue) = (inner.clone(), queue.clone());
        tokio::spawn(async move {
            crate::hot::combine::drain(&queue.sends, &queue.name, (), batch, |jobs| {
                write_batch(&inner, &queue, jobs)
            })
            .await;
        });
    }
    answer
        .await
        .map_err(|_| StoreError::unavailable("the send was dropped before it was written"))?
}

/// Writes the plain sends of `jobs`: the large ones as packs in one statement, the others as
/// rows in another.
async fn write_batch(inner: &Arc<Inner>, queue: &Arc<QueueLocal>, jobs: Vec<SendJob>) {
    let (packed, rows): (Vec<_>, Vec<_>) = jobs.into_iter().partition(|j| j.pack);
    if !packed.is_empty() {
        let written = async {
            let conn = inner.conn().await?;
            let mut firsts = Vec::with_capacity(packed.len());
            for j in &packed {
                firsts.push(inner.ids.draw_run(&**conn, j.messages.len()).await?);
            }
            let packs: Vec<(i64, &[NewMessage])> = firsts
                .iter()
                .zip(&packed)
                .map(|(first, j)| (*first, j.messages.as_slice()))
                .collect();
            let stored = crate::hot::packs::insert(&conn, &queue.name, inner.now(), &packs).await?;
            let ids = firsts
                .iter()
                .zip(&packed)
                .flat_map(|(first, j)| (0..j.messages.len() as i64).map(move |i| first + i))
                .collect();
            Ok::<_, StoreError>((ids, stored, true))
        }
        .await;
        answer(queue, packed, written);
    }
    if rows.iter().any(|j| j.tagged) {
        let written = write_tagged(inner, queue, &rows).await;
        answer(queue, rows, written);
    } else if !rows.is_empty() {
        let written = async {
            let conn = inner.conn().await?;
            let (ids, mut items) = numbered(inner, &**conn, &rows).await?;
            let stmt = conn.prepare_cached(INSERT_SQL).await.map_err(|e| db(&e))?;
            let now = inner.now();
            let handoff = claim_handoff(inner, queue, now, &mut items).await;
            let inserted = insert(
                &**conn,
                &stmt,
                &queue.name,
                now,
                items.iter().copied(),
                handoff.as_ref(),
            )
            .await?;
            if let Some(h) = &handoff
                && inserted.rows > 0
            {
                hand_over(inner, queue, &items[..h.count], &inserted.leased, h);
            }
            Ok::<_, StoreError>((ids, inserted.rows, inserted.visible_now))
        }
        .await;
        answer(queue, rows, written);
    }
}

/// The messages of `rows` in order, each with a fresh id and its send's delay, and the ids.
async fn numbered<'a>(
    inner: &Inner,
    c: &impl GenericClient,
    rows: &'a [SendJob],
) -> Result<(Vec<i64>, Vec<(&'a NewMessage, i64, Duration)>), StoreError> {
    let total: usize = rows.iter().map(|j| j.messages.len()).sum();
    let ids = inner.ids.draw(c, total).await?;
    let mut next_id = ids.iter().copied();
    let mut items = Vec::with_capacity(total);
    for j in rows {
        for m in &j.messages {
            items.push((m, next_id.next().unwrap_or_default(), j.delay));
        }
    }
    Ok((ids, items))
}

/// Writes the sends of `rows`, some with keys, priorities or trace context, as one statement
/// that ranks the messages deliverable at once that have keys or priorities
/// (`crate::ops::send::insert_grouped`); no hand-off, so that a waiting receive takes them in
/// rank order (and hand-offs carry no trace context).
async fn write_tagged(
    inner: &Inner,
    queue: &QueueLocal,
    rows: &[SendJob],
) -> Result<(Vec<i64>, i64, bool), StoreError> {
    let cfg = inner.config(queue).await?;
    let conn = inner.conn().await?;
    let (ids, items) = numbered(inner, &**conn, rows).await?;
    let (stored, visible_now) = crate::ops::send::insert_grouped(
        &**conn,
        &queue.name,
        &cfg,
        inner.now(),
        items.into_iter(),
    )
    .await?;
    Ok((ids, i64::try_from(stored).unwrap_or(i64::MAX), visible_now))
}

/// Claims messages of `items` for the receives waiting on this node for `queue`
/// (`crate::hot::handoff`), when its config allows: moves those visible at once to the front,
/// up to as many as are waited for, and says how many, for what lease length and for which
/// consumer's receives.
async fn claim_handoff(
    inner: &Inner,
    queue: &QueueLocal,
    now: i64,
    items: &mut [(&NewMessage, i64, Duration)],
) -> Option<HandOff> {
    let visible =
        |(m, _, delay): &(&NewMessage, i64, Duration)| m.delay.unwrap_or(*delay).is_zero();
    let ready = items.iter().filter(|i| visible(i)).count();
    let claim = queue
        .handoff
        .claim(ready, crate::hot::read_ahead::SHORTEST_LEASE)?;
    // Only a send that found receives waiting reads the config. A claim dropped here is
    // only a hint lost: such a queue's receives would not take what is held anyway.
    let cfg = inner.config(queue).await.ok()?;
    if cfg.paused || crate::flow::limited(&cfg) {
        return None;
    }
    // The claimed ones first, in their order (a stable partition).
    items.sort_by_key(|i| !visible(i));
    let deadline = Timestamp(now).plus(claim.lease).as_millis();
    Some(HandOff {
        count: claim.count,
        deadline,
        at: now,
        lease: claim.lease,
        consumer: claim.consumer,
        max_receive_count: cfg.max_receive_count,
        default_priority: cfg.default_priority,
    })
}

/// Holds the messages inserted leased for the receives waiting on this node and wakes as
/// many of them: they take the messages without a lease statement, and what none takes is
/// released after [`crate::hot::read_ahead::HOLD`].
fn hand_over(
    inner: &Arc<Inner>,
    queue: &Arc<QueueLocal>,
    items: &[(&NewMessage, i64, Duration)],
    leased: &[(i64, i64)],
    h: &HandOff,
) {
    let tokens: HashMap<i64, i64> = leased.iter().copied().collect();
    let deliveries: Vec<Delivery> = items
        .iter()
        .filter_map(|(m, id, _)| {
            let token = *tokens.get(id)?;
            let id = MessageId(*id as u64);
            Some(Delivery {
                trace: None,
                id,
                receipt: Receipt {
                    id,
                    token: token as u64,
                },
                body: m.body.clone(),
                attributes: m.attributes.clone(),
                receive_count: 1,
                max_receive_count: h.max_receive_count,
                enqueued_at: Timestamp(h.at),
                last_error: None,
                lease_deadline: Timestamp(h.deadline),
                group: None,
                key: None,
                priority: h.default_priority,
            })
        })
        .collect();
    let n = deliveries.len();
    crate::hot::read_ahead::hold(inner, queue, h.lease, h.consumer.clone(), deliveries);
    // Only the receives they are for, on this node: no other can take them.
    queue.waker.handed(n);
    queue.handoff.wake(h.lease, h.consumer.as_deref(), n);
}

/// Answers each of `jobs` from one write: `(ids in the jobs' order, rows or packs stored,
/// whether a message is visible at once)`.
fn answer(
    queue: &QueueLocal,
    jobs: Vec<SendJob>,
    written: Result<(Vec<i64>, i64, bool), StoreError>,
) {
    match written {
        Ok((_, 0, _)) => {
            queue.forget_config();
            for j in jobs {
                let _ = j
                    .reply
                    .send(Err(StoreError::QueueNotFound(queue.name.to_string())));
            }
        }
        Ok((ids, _, visible_now)) => {
            let mut ids = ids.into_iter();
            for j in jobs {
                let out = ids
                    .by_ref()
                    .take(j.messages.len())
                    .map(|id| SendOutcome {
                        id: MessageId(id as u64),
                        duplicate: false,
                    })
                    .collect();
                let _ = j.reply.send(Ok((out, visible_now)));
            }
        }
        Err(e) => {
            for j in jobs {
                let _ = j.reply.send(Err(e.clone()));
            }
        }
    }
}
