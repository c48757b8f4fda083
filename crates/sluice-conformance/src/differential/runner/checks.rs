//! The runner's comparison after every step: every message, queue, stats and DLQ summary against the model.

use super::*;
use sluice_core::key_stats::{KeysPage, KeysRequest};

impl Run<'_> {
    pub(super) fn check_summary(
        &self,
        q: &QueueName,
        req: &SummaryRequest,
        got: Result<sluice_core::summary::Summary, StoreError>,
    ) -> Result<(), String> {
        let now = self.now();
        if !self.model.queues.contains_key(q.as_str()) {
            return same_code("summarize", &got, Some(ErrorCode::QueueNotFound));
        }
        let s = got.map_err(|e| format!("summarize {q} refused: {e:?}"))?;
        let mut groups: BTreeMap<Option<String>, (u64, i64, i64, usize)> = BTreeMap::new();
        for id in self.model.in_queue(q.as_str()) {
            let v = self.model.view(id, now).expect("view");
            let m = self.model.live(id).expect("live");
            let filter = Filter {
                error_contains: req.filter.error_contains.clone(),
                key: req.filter.key.as_ref().map(|k| k.as_str().to_owned()),
            };
            if !Model::matches(m, &filter) {
                continue;
            }
            let key = match &req.group_by {
                GroupBy::Error => v.last_error.clone(),
                GroupBy::Reason => v.dead_letter.map(|(r, _)| r.to_owned()),
                GroupBy::Source => v.source_queue.clone(),
                GroupBy::Key => m.key.clone(),
                GroupBy::Attribute(a) => v.attributes.get(a).cloned(),
            };
            let at = v.dead_letter.map_or(v.enqueued_at, |(_, at)| at);
            let g = groups.entry(key).or_insert((0, at, at, id));
            g.0 += 1;
            g.1 = g.1.min(at);
            g.2 = g.2.max(at);
            // The sample is the member with the lowest id as the engine numbered them: ids
            // need not follow send order (concurrent sends, and nodes drawing ids in blocks).
            if self.ids.engine[id] < self.ids.engine[g.3] {
                g.3 = id;
            }
        }
        let total: u64 = groups.values().map(|g| g.0).sum();
        let mut seen = BTreeMap::new();
        for g in &s.groups {
            seen.insert(
                g.key.clone(),
                (
                    g.count,
                    g.first_at.as_millis(),
                    g.last_at.as_millis(),
                    self.ids.of(g.sample_id)?,
                ),
            );
        }
        ensure!(
            s.total == total && s.group_count == groups.len() as u64 && seen == groups,
            "summary of {q} by {}: engine total {} groups {seen:?}, model total {total} groups \
             {groups:?}",
            req.group_by,
            s.total
        );
        Ok(())
    }

    /// Compares every message, every queue's stats, and the dead-letter summaries.
    pub(super) async fn compare(&self) -> Result<(), String> {
        let now = self.now();
        let store = self.s();
        // Every message ever sent, by get_message.
        for (mid, eid) in self.ids.engine.iter().enumerate() {
            let got = store.get_message(*eid).await;
            match self.model.view(mid, now) {
                None => same_code(
                    &format!("get_message of {mid}"),
                    &got,
                    Some(ErrorCode::MessageNotFound),
                )?,
                Some(want) => {
                    let m = got
                        .map_err(|e| format!("get_message of {mid}: {e:?}, model has {want:?}"))?;
                    let v = view_of(&self.ids, &m, want.attempts.is_some())?;
                    ensure!(
                        crate::differential::compare::same(&v, &want),
                        "message {mid}: {}",
                        diff(&v, &want)
                    );
                }
            }
        }
        // Every queue: its listing, a browse of all its messages, its stats.
        let listed = store
            .list_queues()
            .await
            .map_err(|e| format!("list_queues: {e:?}"))?;
        let names: Vec<String> = listed.iter().map(|q| q.name.to_string()).collect();
        let want_names: Vec<String> = self.model.queues.keys().cloned().collect();
        ensure!(
            names == want_names,
            "queues {names:?}, model {want_names:?}"
        );
        for info in &listed {
            let want = &self.model.queues[info.name.as_str()];
            ensure!(
                info.config == want.config && info.created_at.as_millis() == want.created_at,
                "queue {}: engine {info:?}, model config {:?} created {}",
                info.name,
                want.config,
                want.created_at
            );
        }
        for name in self.model.queues.keys() {
            let q = QueueName::new(name.clone()).map_err(|e| e.to_string())?;
            self.compare_queue(&store, &q, now).await?;
        }
        Ok(())
    }

    /// Walks every page of queue index `queue`'s keys in `order`, each compared with the
    /// model's; an unknown queue and a limit of 0 are refused.
    pub(super) async fn walk_keys(
        &self,
        queue: u8,
        order: u8,
        limit: u32,
        now: i64,
    ) -> Result<(), String> {
        use sluice_core::key_stats::{KeyOrder, KeysRequest};
        let q = qn(queue);
        let order = match order {
            0 => KeyOrder::Backlog,
            1 => KeyOrder::InFlight,
            2 => KeyOrder::Oldest,
            _ => KeyOrder::Breaker,
        };
        let mut req = KeysRequest {
            order,
            limit,
            after: None,
        };
        if limit == 0 {
            let got = self.s().keys(&q, req).await;
            return same_code("keys with limit 0", &got, Some(ErrorCode::InvalidArgument));
        }
        if !self.model.queues.contains_key(q.as_str()) {
            let got = self.s().keys(&q, req).await;
            return same_code(
                "keys of a missing queue",
                &got,
                Some(ErrorCode::QueueNotFound),
            );
        }
        let store = self.s();
        for _ in 0..100 {
            let page = self.check_keys(&store, &q, req.clone(), now).await?;
            match page.next {
                Some(c) => req.after = Some(c),
                None => return Ok(()),
            }
        }
        Err(format!("keys of {q}: more than 100 pages"))
    }

    /// Compares one page of queue `q`'s keys with the model's: every number but the delivery
    /// estimate, which must stay within the deliveries of the last two minutes, and each key's
    /// breaker but since when it is in its state.
    pub(super) async fn check_keys(
        &self,
        store: &Arc<dyn Store>,
        q: &QueueName,
        req: KeysRequest,
        now: i64,
    ) -> Result<KeysPage, String> {
        let got = store
            .keys(q, req.clone())
            .await
            .map_err(|e| format!("keys of {q}: {e:?}"))?;
        let mut want = sluice_core::key_stats::page(self.model.key_stats(q.as_str(), now), &req);
        let mut seen = got.clone();
        for k in &mut seen.keys {
            // Of a key's own state the model knows the breaker (forced or not), not since when.
            if let Some(f) = &mut k.flow {
                f.breaker_since = None;
            }
            let name = k.key.as_ref().map(|k| k.as_str());
            if let Some(n) = k.delivered_1m.take() {
                let bound = self.model.delivered_bound(q.as_str(), name, now);
                ensure!(
                    n <= bound,
                    "keys of {q}: {name:?} delivered {n} in the last minute, the model made \
                     {bound} deliveries of it in the last two"
                );
            }
        }
        want.keys.iter_mut().for_each(|k| k.delivered_1m = None);
        ensure!(
            seen == want,
            "keys of {q} ({req:?}): engine {seen:?}, model {want:?}"
        );
        Ok(got)
    }

    // Long because it compares one queue three ways at one `now` (every message browsed, the stats,
    // a dead-letter queue's summaries); together they are the snapshot taken after each step.
    pub(super) async fn compare_queue(
        &self,
        store: &Arc<dyn Store>,
        q: &QueueName,
        now: i64,
    ) -> Result<(), String> {
        let mut msgs = Vec::new();
        let mut cursor = None;
        loop {
            let page = store
                .browse(
                    q,
                    BrowseRequest {
                        state: BrowseState::All,
                        limit: 3,
                        cursor: cursor.take(),
                    },
                )
                .await
                .map_err(|e| format!("browse {q}: {e:?}"))?;
            msgs.extend(page.messages);
            match page.next_cursor {
                Some(c) if msgs.len() < 10_000 => cursor = Some(c),
                _ => break,
            }
        }
        let mut seen = BTreeSet::new();
        for m in &msgs {
            let mid = self.ids.of(m.id)?;
            ensure!(seen.insert(mid), "browse of {q} lists {mid} twice");
            let want = self
                .model
                .view(mid, now)
                .filter(|v| v.state != "completed")
                .ok_or_else(|| {
                    format!("browse of {q} lists {mid}, which the model does not have there")
                })?;
            let v = view_of(&self.ids, m, want.attempts.is_some())?;
            ensure!(
                crate::differential::compare::same(&v, &want),
                "browse of {q}, message {mid}: {}",
                diff(&v, &want)
            );
        }
        let want: BTreeSet<usize> = self.model.in_queue(q.as_str()).into_iter().collect();
        ensure!(
            seen == want,
            "browse of {q}: engine {seen:?}, model {want:?}"
        );
        // Stats.
        let s = store
            .stats(q)
            .await
            .map_err(|e| format!("stats {q}: {e:?}"))?;
        let mq = &self.model.queues[q.as_str()];
        let mut counts = [0u64; 3];
        let mut oldest: Option<i64> = None;
        let mut completed = 0u64;
        for m in self
            .model
            .msgs
            .iter()
            .flatten()
            .filter(|m| m.queue == q.as_str())
        {
            match Model::state_of(m, now) {
                "visible" => {
                    counts[0] += 1;
                    if let Place::Waiting { at } = m.place {
                        oldest = Some(oldest.map_or(at, |o: i64| o.min(at)));
                    }
                }
                "delayed" => counts[1] += 1,
                "in_flight" => counts[2] += 1,
                _ => completed += 1,
            }
        }
        let dld = mq
            .config
            .dead_letter_queue
            .as_ref()
            .map_or(0, |d| self.model.in_queue(d.as_str()).len() as u64);
        // With several nodes, a node's send, receive and ack counts reach the others' stats
        // within the PostgreSQL engine's flush interval (a documented lag): there they are
        // compared once the counts are at least in flight, i.e. never above the model's.
        let (mut got_totals, mut want_totals) = (s.totals, mq.totals);
        if self.target.nodes() > 1 {
            ensure!(
                got_totals.sent <= want_totals.sent
                    && got_totals.received <= want_totals.received
                    && got_totals.acked <= want_totals.acked,
                "stats of {q}: hot-path totals above the model's: engine {got_totals:?}, model {want_totals:?}"
            );
            for t in [&mut got_totals, &mut want_totals] {
                (t.sent, t.received, t.acked) = (0, 0, 0);
            }
        }
        let seen = (
            s.visible,
            s.delayed,
            s.in_flight,
            s.dead_letter_depth,
            s.completed,
            u64::try_from(s.oldest_visible_age.as_millis()).unwrap_or(u64::MAX),
            got_totals,
            s.active_keys,
        );
        let want = (
            counts[0],
            counts[1],
            counts[2],
            dld,
            completed,
            oldest.map_or(0, |o| u64::try_from(now - o).unwrap_or(0)),
            want_totals,
            self.model.active_keys(q.as_str()),
        );
        ensure!(
            seen == want,
            "stats of {q} (visible, delayed, in_flight, dead_letter_depth, completed, \
             oldest_visible_age_ms, totals, active_keys): engine {seen:?}, model {want:?}"
        );
        self.check_keys(store, q, KeysRequest::default(), now)
            .await?;
        // The dead-letter summary of a dead-letter queue, by reason and by source.
        if q.as_str().ends_with("dlq") || q.as_str() == "dl" {
            for group_by in [GroupBy::Reason, GroupBy::Source, GroupBy::Error] {
                let req = SummaryRequest {
                    group_by,
                    filter: RedriveFilter::default(),
                    limit: 100,
                };
                let got = store.summarize(q, req.clone()).await;
                self.check_summary(q, &req, got)?;
            }
        }
        Ok(())
    }
}
