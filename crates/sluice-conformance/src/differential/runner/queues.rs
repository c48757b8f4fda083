//! The runner's queue operations and sends and receives: calls, the model's expectation, and following what the engine chose.

use super::*;

impl Run<'_> {
    /// Queue admin, sends and receives (one node or two at once).
    ///
    /// Long because beside the single-node arms it holds the two concurrent ones, which receive or
    /// send on two nodes at once and judge the pair together (no message leased twice, one message
    /// per dedup id).
    pub(super) async fn apply_queue_op(&mut self, op: &Op) -> Result<(), String> {
        let now = self.now();
        match op {
            Op::PutQueue { queue, patch: p } | Op::CreateQueue { queue, patch: p } => {
                let create_only = matches!(op, Op::CreateQueue { .. });
                let name = qn(*queue);
                let pt = patch(p);
                let got = if create_only {
                    self.s().create_queue(&name, &pt).await
                } else {
                    self.s().put_queue(&name, &pt).await
                };
                let mut after = self.model.clone();
                let want = after.put_queue(&name, &pt, create_only, now);
                same_code("put_queue", &got, want.err())?;
                if let (Ok(out), Ok(created)) = (&got, want) {
                    ensure!(
                        out.created == created,
                        "created {} but model {created}",
                        out.created
                    );
                    let cfg = &after.queues[name.as_str()].config;
                    ensure!(
                        &out.queue.config == cfg,
                        "config {:?}, model {cfg:?}",
                        out.queue.config
                    );
                    self.model = after;
                }
            }
            Op::DeleteQueue { queue } => {
                let name = qn(*queue);
                let got = self.s().delete_queue(&name).await;
                let held = self.model.in_queue(name.as_str()).len() as u64;
                let mut after = self.model.clone();
                let want = after.delete_queue(name.as_str());
                same_code("delete_queue", &got, want.err())?;
                if want.is_ok() {
                    ensure!(
                        got.as_ref().ok() == Some(&held),
                        "delete_queue answered {got:?}, model drops {held}"
                    );
                    self.model = after;
                }
            }
            Op::Purge { queue } => {
                let name = qn(*queue);
                let got = self.s().purge(&name).await;
                if !self.model.queues.contains_key(name.as_str()) {
                    return same_code("purge", &got, Some(ErrorCode::QueueNotFound));
                }
                let ids = self.model.in_queue(name.as_str());
                ensure!(
                    got.as_ref().ok() == Some(&(ids.len() as u64)),
                    "purge answered {got:?}, model removes {}",
                    ids.len()
                );
                for id in ids {
                    self.model.msgs[id] = None;
                }
            }
            Op::ForceKeyBreaker { queue, key, open } => {
                let name = qn(*queue);
                let key = ["k1", "k2"].get(usize::from(*key)).copied();
                let mk = key.map(|k| sluice_core::MessageKey::new(k).expect("a key"));
                let force = if *open {
                    sluice_core::adaptive::BreakerForce::Open
                } else {
                    sluice_core::adaptive::BreakerForce::Closed
                };
                let got = self.s().force_key_breaker(&name, mk.as_ref(), force).await;
                let want = self.model.force_key_breaker(name.as_str(), key, *open);
                same_code("force_key_breaker", &got, want.err())?;
                if let (Ok(out), Ok((state, forced))) = (&got, want) {
                    ensure!(
                        (out.breaker, out.forced) == (Some(state), forced),
                        "force_key_breaker answered {out:?}, model ({state:?}, {forced})"
                    );
                }
            }
            Op::Send { queue, messages } => self.send(*queue, messages).await?,
            Op::Receive {
                queue,
                max,
                visibility_ms,
                consumer,
            } => {
                let req = ReceiveRequest {
                    max: *max,
                    wait: Duration::ZERO,
                    visibility: visibility_ms.map(dur),
                    consumer: consumer.clone(),
                };
                let got = self.s().receive(&qn(*queue), req).await;
                self.follow_receive(*queue, *max, *visibility_ms, consumer, got, true)?;
            }
            Op::ConcurrentReceive { queue, max } => {
                let (a, b) = (self.target.store(0), self.target.store(1));
                let q = qn(*queue);
                // A lease long enough to overlap the other receive (a zero-length one is
                // over before it, and may then be leased again).
                const VISIBILITY_MS: u64 = 30_000;
                let req = ReceiveRequest {
                    max: *max,
                    visibility: Some(dur(VISIBILITY_MS)),
                    ..ReceiveRequest::default()
                };
                let (ra, rb) = futures::join!(a.receive(&q, req.clone()), b.receive(&q, req));
                let exists = self.model.queues.contains_key(q.as_str());
                let limit = if exists {
                    self.model.receive_count_now(q.as_str(), max * 2, now)
                } else {
                    0
                };
                let mut all = Vec::new();
                for r in [ra, rb] {
                    match r {
                        Ok(ds) => all.extend(ds),
                        Err(e) => {
                            ensure!(
                                !exists && e.code() == ErrorCode::QueueNotFound,
                                "concurrent receive failed: {e:?}"
                            );
                        }
                    }
                }
                let distinct: BTreeSet<MessageId> = all.iter().map(|d| d.id).collect();
                ensure!(
                    distinct.len() == all.len(),
                    "one message leased twice by concurrent receives: {:?}",
                    all.iter().map(|d| d.id).collect::<Vec<_>>()
                );
                ensure!(
                    all.len() <= limit,
                    "concurrent receives leased {}, at most {limit} allowed",
                    all.len()
                );
                if exists {
                    self.follow_deliveries(*queue, Some(VISIBILITY_MS), &None, all)?;
                }
            }
            Op::ConcurrentDedupSend { queue, dedup_id } => {
                let (a, b) = (self.target.store(0), self.target.store(1));
                let q = qn(*queue);
                let m = MsgSpec {
                    body: BodySpec::Json(7),
                    attributes: vec![],
                    delay_ms: None,
                    dedup_id: Some(dedup_id.clone()),
                    group: None,
                    key: None,
                    priority: None,
                    // The racing sends carry one context: the message kept has it.
                    trace: Some((7, true)),
                };
                let nm = new_message(&m);
                let (ra, rb) =
                    futures::join!(a.send(&q, vec![nm.clone()]), b.send(&q, vec![nm.clone()]));
                let want = self.expect_send(*queue, std::slice::from_ref(&m));
                let window_off = self
                    .model
                    .queues
                    .get(q.as_str())
                    .is_some_and(|mq| mq.config.dedup_window.is_zero());
                if window_off {
                    // Without a dedup window the id dedups nothing: two sends, in either order.
                    let mut results = [ra, rb];
                    results.sort_by_key(|r| r.as_ref().ok().map_or(u64::MAX, |o| o[0].id.0));
                    let [first, second] = results;
                    for (which, got) in [("first", first), ("second", second)] {
                        let want = self.expect_send(*queue, std::slice::from_ref(&m));
                        match (got, want) {
                            (Ok(out), Ok(_)) => {
                                ensure!(
                                    !out[0].duplicate,
                                    "a send without a dedup window answered a duplicate"
                                );
                                self.follow_send(*queue, std::slice::from_ref(&m), &out)?;
                            }
                            (got, want) => {
                                same_code(&format!("concurrent send ({which})"), &got, want.err())?
                            }
                        }
                    }
                    return Ok(());
                }
                match (ra, rb, want) {
                    (Ok(x), Ok(y), Ok(_)) => {
                        ensure!(
                            x[0].id == y[0].id,
                            "concurrent sends of one dedup id stored two messages: {x:?} {y:?}"
                        );
                        let firsts = usize::from(!x[0].duplicate) + usize::from(!y[0].duplicate);
                        let known = self.ids.model.contains_key(&x[0].id);
                        ensure!(
                            firsts == usize::from(!known),
                            "concurrent dedup sends: duplicate flags {} / {}",
                            x[0].duplicate,
                            y[0].duplicate
                        );
                        let first = if x[0].duplicate { &y } else { &x };
                        self.follow_send(*queue, std::slice::from_ref(&m), first)?;
                    }
                    (ra, rb, want) => {
                        let w = want.err();
                        same_code("concurrent send (first)", &ra, w)?;
                        same_code("concurrent send (second)", &rb, w)?;
                    }
                }
            }
            _ => unreachable!("apply_queue_op is given {op:?}"),
        }
        Ok(())
    }

    /// What a send of `messages` to queue `queue` must answer: per message, `Some(model
    /// id)` for a duplicate of a kept one and `None` for a new one; or the error.
    pub(super) fn expect_send(
        &self,
        queue: u8,
        messages: &[MsgSpec],
    ) -> Result<Vec<Option<usize>>, ErrorCode> {
        let name = queue_name(queue);
        let news: Vec<NewMessage> = messages.iter().map(new_message).collect();
        if let Some(c) = news.iter().find_map(message_refusal) {
            return Err(c);
        }
        let Some(q) = self.model.queues.get(name) else {
            return Err(ErrorCode::QueueNotFound);
        };
        if news
            .iter()
            .any(|m| m.body.len() > q.config.max_message_bytes as usize)
        {
            return Err(ErrorCode::PayloadTooLarge);
        }
        let mut seen: BTreeMap<&str, ()> = BTreeMap::new();
        let mut out = Vec::new();
        let mut fresh = 0usize;
        for m in &news {
            // A queue without a dedup window dedups nothing, even ids sent while it had one.
            let window_on = q.config.dedup_window > Duration::ZERO;
            let dup = m.dedup_id.as_deref().filter(|_| window_on).and_then(|d| {
                if let Some((id, _)) = q.dedup.get(d) {
                    return Some(Some(*id));
                }
                (q.config.dedup_window > Duration::ZERO && seen.contains_key(d)).then_some(None)
            });
            match dup {
                Some(Some(id)) => out.push(Some(id)),
                Some(None) => out.push(Some(usize::MAX)),
                None => {
                    if let Some(d) = m.dedup_id.as_deref() {
                        seen.insert(d, ());
                    }
                    fresh += 1;
                    out.push(None);
                }
            }
        }
        // Duplicates store nothing, so a send of duplicates alone is never refused for depth.
        if let Some(max) = q.config.max_depth
            && fresh > 0
            && (self.model.depth(name) + fresh) as u64 > max
        {
            return Err(ErrorCode::QueueFull);
        }
        Ok(out)
    }

    pub(super) async fn send(&mut self, queue: u8, messages: &[MsgSpec]) -> Result<(), String> {
        let news: Vec<NewMessage> = messages.iter().map(new_message).collect();
        let got = self.s().send(&qn(queue), news).await;
        let want = self.expect_send(queue, messages);
        same_code("send", &got, want.as_ref().err().copied())?;
        if let Ok(out) = got {
            self.follow_send(queue, messages, &out)?;
        }
        Ok(())
    }

    pub(super) fn follow_send(
        &mut self,
        queue: u8,
        messages: &[MsgSpec],
        out: &[sluice_core::store::SendOutcome],
    ) -> Result<(), String> {
        let now = self.now();
        let want = self
            .expect_send(queue, messages)
            .map_err(|c| format!("send succeeded, model expects {c}"))?;
        ensure!(out.len() == messages.len(), "send answered {out:?}");
        let name = queue_name(queue);
        let mut batch_ids: BTreeMap<String, usize> = BTreeMap::new();
        for ((m, o), w) in messages.iter().zip(out).zip(want) {
            match w {
                Some(first) => {
                    let first = if first == usize::MAX {
                        batch_ids[m.dedup_id.as_deref().unwrap_or_default()]
                    } else {
                        first
                    };
                    ensure!(
                        o.duplicate && self.ids.of(o.id)? == first,
                        "duplicate send answered {o:?}, model: duplicate of {first}"
                    );
                }
                None => {
                    ensure!(!o.duplicate, "send answered duplicate {o:?}, model: new");
                    let mid = self.ids.push(o.id)?;
                    let nm = new_message(m);
                    let delay = nm.delay.unwrap_or(self.model.queues[name].config.delay);
                    let got = self.model.store_message(
                        name,
                        nm.body,
                        nm.attributes,
                        i64::try_from(delay.as_millis()).unwrap_or(0),
                        nm.dedup_id.clone(),
                        (
                            nm.group.map(|g| g.to_string()),
                            nm.key.map(|k| k.to_string()),
                            nm.priority,
                            nm.trace,
                        ),
                        now,
                    );
                    ensure!(got == mid, "model id {got} for engine's {mid}");
                    if let Some(d) = nm.dedup_id {
                        batch_ids.insert(d, mid);
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn follow_receive(
        &mut self,
        queue: u8,
        max: u32,
        visibility_ms: Option<u64>,
        consumer: &Option<String>,
        got: Result<Vec<sluice_core::message::Delivery>, StoreError>,
        exact: bool,
    ) -> Result<(), String> {
        let name = queue_name(queue);
        if consumer.as_deref().is_some_and(bad_consumer) {
            return same_code("receive", &got, Some(ErrorCode::InvalidArgument));
        }
        if !self.model.queues.contains_key(name) {
            return same_code("receive", &got, Some(ErrorCode::QueueNotFound));
        }
        let ds = got.map_err(|e| format!("receive refused: {e:?}"))?;
        let want = self.model.receive_count_now(name, max, self.now());
        if exact {
            ensure!(
                ds.len() == want,
                "receive returned {} messages, model allows exactly {want} (eligible {:?})",
                ds.len(),
                self.model.eligible(name, self.now())
            );
        }
        self.follow_deliveries(queue, visibility_ms, consumer, ds)
    }

    /// Higher priority first: no message without a group that stays visible has a higher
    /// priority than one without a group that the receive delivered. (How a FIFO group's
    /// front ranks against messages without a group is the engine's choice.)
    fn check_priority_order(
        &self,
        name: &str,
        eligible: &BTreeSet<usize>,
        ds: &[sluice_core::message::Delivery],
        default: u8,
    ) -> Result<(), String> {
        let prio = |id: usize| {
            let m = self.model.live(id).expect("live");
            (m.group.is_none()).then(|| m.priority.unwrap_or(default))
        };
        let delivered: BTreeSet<usize> = ds.iter().filter_map(|d| self.ids.of(d.id).ok()).collect();
        // A key's room after this receive (before the model leases them): a message its key's
        // limit holds back may stay behind lower ones.
        let room_left = |id: usize| {
            let key = self.model.live(id).expect("live").key.clone();
            let taken = delivered
                .iter()
                .filter(|d| self.model.live(**d).is_some_and(|m| m.key == key))
                .count();
            self.model
                .key_room(name, key.as_deref())
                .saturating_sub(taken)
        };
        let lowest_taken = delivered.iter().filter_map(|id| prio(*id)).min();
        let highest_left = eligible
            .iter()
            .filter(|id| !delivered.contains(id) && room_left(**id) > 0)
            .filter_map(|id| prio(*id).map(|p| (p, *id)))
            .max();
        if let (Some(low), Some((high, left))) = (lowest_taken, highest_left) {
            ensure!(
                high <= low,
                "receive of {name} left {left} at priority {high} and delivered one at {low} \
                 (delivered {delivered:?})"
            );
        }
        Ok(())
    }

    pub(super) fn follow_deliveries(
        &mut self,
        queue: u8,
        visibility_ms: Option<u64>,
        consumer: &Option<String>,
        ds: Vec<sluice_core::message::Delivery>,
    ) -> Result<(), String> {
        let now = self.now();
        let name = queue_name(queue);
        let eligible = self.model.eligible(name, now);
        let cfg = self.model.queues[name].config.clone();
        self.check_priority_order(name, &eligible, &ds, cfg.default_priority)?;
        let vis = visibility_ms
            .map(|v| i64::try_from(v).unwrap_or(0))
            .unwrap_or(i64::try_from(cfg.visibility_timeout.as_millis()).unwrap_or(0));
        for d in ds {
            let mid = self.ids.of(d.id)?;
            ensure!(
                eligible.contains(&mid),
                "delivered message {mid} which may not be delivered now (eligible {eligible:?})"
            );
            let m = self.model.live(mid).expect("live").clone();
            let until = now + vis;
            let want = (
                &m.body,
                &m.attributes,
                m.receive_count + 1,
                cfg.max_receive_count,
                m.enqueued_at,
                &m.last_error,
                until,
                m.group.clone(),
                m.key.clone(),
                m.priority.unwrap_or(cfg.default_priority),
                m.trace.clone(),
            );
            let seen = (
                &d.body,
                &d.attributes,
                d.receive_count,
                d.max_receive_count,
                d.enqueued_at.as_millis(),
                &d.last_error,
                d.lease_deadline.as_millis(),
                d.group.as_ref().map(ToString::to_string),
                d.key.as_ref().map(ToString::to_string),
                d.priority,
                d.trace.clone(),
            );
            ensure!(
                seen == want,
                "delivery of {mid} (body, attributes, receive_count, max_receive_count, \
                 enqueued_at, last_error, lease_deadline, group, key, priority, trace): engine \
                 {seen:?}, model {want:?}"
            );
            let del = self.model.lease(mid, queue, until, now, consumer.clone());
            ensure!(del == self.receipts.len(), "delivery tables out of step");
            self.receipts.push(d.receipt);
            let key = m.key.as_deref();
            if let Some(max) = cfg
                .key_limits
                .as_ref()
                .and_then(|l| l.of(key).max_in_flight)
            {
                let flying = self.model.key_in_flight(name, key);
                ensure!(
                    flying <= max as usize,
                    "key {key:?} of {name} has {flying} in flight, its limit is {max}"
                );
            }
            if let Some((n, limit)) = self.model.key_rate_count(name, key, now) {
                ensure!(
                    n <= limit as usize,
                    "key {key:?} of {name} had {n} deliveries in one period, its rate is {limit}"
                );
            }
        }
        Ok(())
    }
}
