//! The runner's summaries, redrive jobs, schedules and idempotency records.

use super::*;

impl Run<'_> {
    /// Summaries, redrive jobs, schedules and idempotency records.
    ///
    /// Long because it is one arm per record operation (summaries, redrive jobs, schedules,
    /// idempotency keys, audit); the larger expectations live in helpers, and each arm left keeps
    /// its call beside the short rule for what it must answer.
    pub(super) async fn apply_record_op(&mut self, op: &Op) -> Result<(), String> {
        let now = self.now();
        match op {
            Op::Summarize {
                queue,
                group_by,
                error_contains,
                key,
            } => {
                let q = qn(*queue);
                let req = SummaryRequest {
                    group_by: match group_by {
                        GroupBySpec::Error => GroupBy::Error,
                        GroupBySpec::Reason => GroupBy::Reason,
                        GroupBySpec::Source => GroupBy::Source,
                        GroupBySpec::Key => GroupBy::Key,
                        GroupBySpec::Attribute(a) => GroupBy::Attribute(a.clone()),
                    },
                    filter: RedriveFilter {
                        error_contains: error_contains.clone(),
                        key: key_filter(key.as_deref()),
                        ..RedriveFilter::default()
                    },
                    limit: 100,
                };
                let got = self.s().summarize(&q, req.clone()).await;
                if error_contains.as_deref().is_some_and(has_nul) {
                    return same_code("summarize", &got, Some(ErrorCode::InvalidArgument));
                }
                self.check_summary(&q, &req, got)?;
            }
            Op::Keys {
                queue,
                order,
                limit,
            } => self.walk_keys(*queue, *order, *limit, now).await?,
            Op::CreateRedrive {
                source,
                destination,
                limit,
                error_contains,
                key,
                reset_receive_count,
                dry_run,
            } => {
                let spec = RedriveSpec {
                    source: qn(*source),
                    destination: destination.map(qn),
                    limit: *limit,
                    rate: None,
                    filter: RedriveFilter {
                        error_contains: error_contains.clone(),
                        key: key_filter(key.as_deref()),
                        ..RedriveFilter::default()
                    },
                    reset_receive_count: *reset_receive_count,
                    dry_run: *dry_run,
                    guard: None,
                };
                let got = self.s().create_redrive(spec.clone()).await;
                let want = if error_contains.as_deref().is_some_and(has_nul) {
                    Some(ErrorCode::InvalidArgument)
                } else if !self.model.queues.contains_key(spec.source.as_str())
                    || spec
                        .destination
                        .as_ref()
                        .is_some_and(|d| !self.model.queues.contains_key(d.as_str()))
                {
                    Some(ErrorCode::QueueNotFound)
                } else if self.model.jobs.iter().any(|j| {
                    j.source == spec.source.as_str()
                        && matches!(j.state, RedriveState::Running | RedriveState::Paused)
                }) {
                    Some(ErrorCode::Conflict)
                } else {
                    None
                };
                same_code("create_redrive", &got, want)?;
                if let Ok(job) = got {
                    ensure!(
                        job.state == RedriveState::Running && job.moved == 0,
                        "new job {job:?}"
                    );
                    self.jobs.push(job.id);
                    self.jobs_seen.push(job.clone());
                    self.model.jobs.push(crate::differential::model::Job {
                        source: spec.source.to_string(),
                        destination: spec.destination.as_ref().map(ToString::to_string),
                        limit: *limit,
                        filter: Filter {
                            error_contains: error_contains.clone(),
                            key: key.clone(),
                        },
                        reset: *reset_receive_count,
                        dry_run: *dry_run,
                        state: RedriveState::Running,
                        moved: 0,
                    });
                }
            }
            Op::RedriveStep { job, max } => {
                if self.jobs.is_empty() {
                    return Ok(());
                }
                let j = job % self.jobs.len();
                let got = self.s().redrive_step(self.jobs[j], *max).await;
                self.follow_redrive_step(j, *max, got)?;
            }
            Op::ControlRedrive { job, control } => {
                if self.jobs.is_empty() {
                    return Ok(());
                }
                let j = job % self.jobs.len();
                let c = match control {
                    ControlSpec::Cancel => RedriveControl::Cancel,
                    ControlSpec::Pause(r) => RedriveControl::Pause { reason: r.clone() },
                    ControlSpec::Resume => RedriveControl::Resume,
                };
                let got = self.s().control_redrive(self.jobs[j], c).await;
                if let Ok(job) = &got {
                    self.jobs_seen[j] = job.clone();
                }
                let mj = &mut self.model.jobs[j];
                let finished =
                    matches!(mj.state, RedriveState::Completed | RedriveState::Cancelled);
                let want = match control {
                    ControlSpec::Pause(r) if has_nul(r) => Some(ErrorCode::InvalidArgument),
                    ControlSpec::Cancel => None,
                    _ if finished => Some(ErrorCode::Conflict),
                    _ => None,
                };
                same_code("control_redrive", &got, want)?;
                if want.is_none() {
                    mj.state = match control {
                        ControlSpec::Cancel if finished => mj.state,
                        ControlSpec::Cancel => RedriveState::Cancelled,
                        ControlSpec::Pause(_) => RedriveState::Paused,
                        ControlSpec::Resume => RedriveState::Running,
                    };
                    let job = got.map_err(|e| e.to_string())?;
                    ensure!(
                        job.state == mj.state && job.moved == mj.moved,
                        "control answered state {:?} moved {}, model {:?} {}",
                        job.state,
                        job.moved,
                        mj.state,
                        mj.moved
                    );
                }
            }
            Op::PutSchedule {
                name,
                every_ms,
                queue,
                body: b,
                attributes,
                tag,
            } => {
                self.put_schedule(*name, *every_ms, *queue, b, attributes, tag)
                    .await?
            }
            Op::DeleteSchedule { name } => {
                let n = ScheduleName::new(crate::differential::ops::SCHEDULES[*name as usize % 2])
                    .expect("name");
                let got = self.s().delete_schedule(&n).await;
                let want = self.model.schedules.remove(n.as_str());
                same_code(
                    "delete_schedule",
                    &got,
                    want.is_none().then_some(ErrorCode::NotFound),
                )?;
            }
            Op::StepSchedule {
                name,
                ahead_ms,
                fire,
                missed,
                stale,
            } => {
                self.step_schedule(*name, *ahead_ms, *fire, *missed, *stale)
                    .await?
            }
            Op::IdemPut { key, body: b } => {
                let resp = IdempotentResponse {
                    fingerprint: [7; 32],
                    status: 201,
                    body: b.clone().into(),
                    created_at: Timestamp(now),
                };
                let got = self.s().idempotency_put(key, resp).await;
                if has_nul(key) || key.is_empty() {
                    return same_code("idempotency_put", &got, Some(ErrorCode::InvalidArgument));
                }
                let kept = self.model.idem.get(key).map(|(b, _)| b.clone());
                let got = got.map_err(|e| format!("idempotency_put refused: {e:?}"))?;
                ensure!(
                    got.as_ref().map(|r| r.body.to_vec()) == kept,
                    "idempotency_put answered {got:?}, model kept {kept:?}"
                );
                if kept.is_none() {
                    let ttl = i64::try_from(sluice_core::store::IDEMPOTENCY_TTL.as_millis())
                        .unwrap_or(i64::MAX);
                    self.model.idem.insert(key.clone(), (b.clone(), now + ttl));
                    // A stored answer ends any claim on the key, whoever holds it.
                    self.model.claims.remove(key);
                }
            }
            Op::IdemClaim {
                key,
                token,
                lease_ms,
            } => {
                let fp = u8::try_from(*token).unwrap_or(u8::MAX);
                let claim = sluice_core::store::IdempotencyClaim {
                    fingerprint: [fp; 32],
                    token: *token,
                    lease: dur(*lease_ms),
                };
                let got = self.s().idempotency_claim(key, claim).await;
                if has_nul(key) || key.is_empty() || *lease_ms == 0 {
                    return same_code("idempotency_claim", &got, Some(ErrorCode::InvalidArgument));
                }
                let got = got.map_err(|e| format!("idempotency_claim refused: {e:?}"))?;
                let live = self
                    .model
                    .claims
                    .get(key)
                    .copied()
                    .filter(|(_, _, until)| *until > now);
                use sluice_core::store::ClaimOutcome;
                match (self.model.idem.get(key), live) {
                    (Some((kept, _)), _) => ensure!(
                        matches!(&got, ClaimOutcome::Answered(r) if r.body.to_vec() == *kept),
                        "idempotency_claim answered {got:?}, model kept the answer {kept:?}"
                    ),
                    (None, Some((holder, hfp, until))) if holder != *token => ensure!(
                        got == ClaimOutcome::Pending {
                            fingerprint: [hfp; 32],
                            until: Timestamp(until),
                        },
                        "idempotency_claim answered {got:?}, model: held by {holder} until {until}"
                    ),
                    (None, _) => {
                        ensure!(
                            got == ClaimOutcome::Claimed,
                            "idempotency_claim answered {got:?}, model: free"
                        );
                        let until = now + i64::try_from(*lease_ms).unwrap_or(i64::MAX);
                        self.model.claims.insert(key.clone(), (*token, fp, until));
                    }
                }
            }
            Op::IdemRelease { key, token } => {
                let got = self.s().idempotency_release(key, *token).await;
                if has_nul(key) || key.is_empty() {
                    return same_code(
                        "idempotency_release",
                        &got,
                        Some(ErrorCode::InvalidArgument),
                    );
                }
                let got = got.map_err(|e| format!("idempotency_release refused: {e:?}"))?;
                let held = self
                    .model
                    .claims
                    .get(key)
                    .is_some_and(|(t, _, until)| t == token && *until > now);
                ensure!(
                    got == held,
                    "idempotency_release answered {got}, model: {held}"
                );
                if held {
                    self.model.claims.remove(key);
                }
            }
            Op::IdemGet { key } => {
                let got = self.s().idempotency_get(key).await;
                if has_nul(key) {
                    return same_code("idempotency_get", &got, Some(ErrorCode::InvalidArgument));
                }
                let kept = self.model.idem.get(key).map(|(b, _)| b.clone());
                let got = got.map_err(|e| format!("idempotency_get refused: {e:?}"))?;
                ensure!(
                    got.as_ref().map(|r| r.body.to_vec()) == kept,
                    "idempotency_get answered {got:?}, model kept {kept:?}"
                );
            }
            Op::AuditAppend {
                actor,
                action,
                queue,
            } => {
                let (actor, action, queue) = (actor % 3, action % 3, queue % 7);
                let mut e = AuditEvent::by_broker(Timestamp(now), AUDIT_ACTIONS[action as usize]);
                e.actor = AUDIT_ACTORS[actor as usize].to_owned();
                e.queue = Some(queue_name(queue).to_owned());
                self.s()
                    .audit_append(vec![e])
                    .await
                    .map_err(|e| format!("audit_append refused: {e:?}"))?;
                self.model.audit.push((actor, action, queue));
            }
            Op::AuditQuery {
                kind,
                actor,
                actions,
                queue,
                limit,
            } => {
                self.check_audit(*kind, *actor, actions, *queue, *limit)
                    .await?
            }
            _ => unreachable!("apply_record_op is given {op:?}"),
        }
        Ok(())
    }

    /// An audit query: the operators' entries as the model kept them, or the engine's own
    /// entries, each of the kind asked for.
    async fn check_audit(
        &mut self,
        kind: Option<u8>,
        actor: Option<u8>,
        actions: &[u8],
        queue: Option<u8>,
        limit: u8,
    ) -> Result<(), String> {
        let kind = kind.map(|k| match k % 3 {
            0 => AuditKind::Operator,
            1 => AuditKind::Message,
            _ => AuditKind::Broker,
        });
        let actor = actor.map(|a| a % 3);
        let actions: Vec<u8> = actions.iter().map(|a| a % 3).collect();
        let queue = queue.map(|q| q % 7);
        let query = AuditQuery {
            queues: queue
                .map(|q| queue_name(q).to_owned())
                .into_iter()
                .collect(),
            actions: actions
                .iter()
                .map(|a| AUDIT_ACTIONS[*a as usize].to_owned())
                .collect(),
            actor: actor.map(|a| AUDIT_ACTORS[a as usize].to_owned()),
            kind,
            limit: usize::from(limit),
            ..AuditQuery::default()
        };
        let got = self
            .s()
            .audit_query(query.clone())
            .await
            .map_err(|e| format!("audit_query refused: {e:?}"))?;
        ensure!(
            got.len() <= usize::from(limit),
            "audit_query {query:?} answered {} entries",
            got.len()
        );
        if kind.is_some_and(|k| k != AuditKind::Operator) {
            // The engine's own entries, which the model does not keep: none is by an actor of
            // the scenario's.
            ensure!(
                got.iter()
                    .all(|e| Some(e.kind()) == kind && query.matches(e)),
                "audit_query {query:?} answered entries of another kind: {got:?}"
            );
            if actor.is_some() {
                ensure!(got.is_empty(), "audit_query {query:?} answered {got:?}");
            }
            return Ok(());
        }
        if kind.is_none() && actor.is_none() {
            // Without kind or actor the broker's entries come too: not the model's to say.
            return Ok(());
        }
        let kept: Vec<(u8, u8, u8)> = self
            .model
            .audit
            .iter()
            .copied()
            .filter(|(a, act, q)| {
                actor.is_none_or(|x| x == *a)
                    && (actions.is_empty() || actions.contains(act))
                    && queue.is_none_or(|x| x == *q)
            })
            .collect();
        let want: Vec<(String, String, Option<String>)> = kept
            [kept.len().saturating_sub(usize::from(limit))..]
            .iter()
            .map(|(a, act, q)| {
                (
                    AUDIT_ACTORS[*a as usize].to_owned(),
                    AUDIT_ACTIONS[*act as usize].to_owned(),
                    Some(queue_name(*q).to_owned()),
                )
            })
            .collect();
        let seen: Vec<(String, String, Option<String>)> = got
            .into_iter()
            .map(|e| (e.actor, e.action, e.queue))
            .collect();
        ensure!(
            seen == want,
            "audit_query {query:?} answered {seen:?}, model kept {want:?}"
        );
        Ok(())
    }

    pub(super) fn follow_redrive_step(
        &mut self,
        j: usize,
        max: u32,
        got: Result<sluice_core::redrive::RedriveStep, StoreError>,
    ) -> Result<(), String> {
        let now = self.now();
        let mj = self.model.jobs[j].clone();
        if mj.state != RedriveState::Running {
            return same_code("redrive_step", &got, Some(ErrorCode::Conflict));
        }
        let step = got.map_err(|e| format!("redrive_step refused: {e:?}"))?;
        self.check_skips(j, max, &step.job)?;
        self.jobs_seen[j] = step.job.clone();
        let Some(_) = self.model.queues.get(&mj.source) else {
            ensure!(
                step.moved_now == 0 && step.job.state == RedriveState::Completed,
                "step of a job whose source is gone: {step:?}"
            );
            self.model.jobs[j].state = RedriveState::Completed;
            return Ok(());
        };
        let done = mj.moved;
        let want_max = mj.limit.map_or(u64::from(max), |l| {
            u64::from(max).min(l.saturating_sub(done))
        });
        ensure!(
            step.moved_now <= want_max,
            "step moved {} (limit {want_max})",
            step.moved_now
        );
        if mj.dry_run {
            ensure!(
                step.moved_now == 0 && step.moved_ids.is_empty(),
                "a dry run moved: {step:?}"
            );
        }
        for id in &step.moved_ids {
            let mid = self.ids.of(*id)?;
            let m = self
                .model
                .live(mid)
                .ok_or_else(|| format!("redrive moved {mid}, which is gone"))?
                .clone();
            ensure!(
                m.queue == mj.source && Model::matches(&m, &mj.filter),
                "redrive moved {mid} from {} (error {:?}), which the job does not match",
                m.queue,
                m.last_error
            );
            ensure!(
                !matches!(m.place, Place::InFlight { .. }),
                "redrive moved {mid}, which is leased"
            );
            let to = mj
                .destination
                .clone()
                .or(m.source_queue.clone())
                .ok_or_else(|| format!("redrive moved {mid}, which has nowhere to go"))?;
            ensure!(
                self.model.queues.contains_key(&to),
                "redrive moved {mid} to {to}, which does not exist"
            );
            self.model.redrive(mid, &to, mj.reset, now);
        }
        let mj = &mut self.model.jobs[j];
        if !mj.dry_run {
            mj.moved += step.moved_now;
        }
        ensure!(
            step.job.moved == mj.moved,
            "job moved {} in all, model {}",
            step.job.moved,
            mj.moved
        );
        // Whether a step that found nothing left completes at once is the engine's choice.
        mj.state = step.job.state;
        Ok(())
    }

    /// What a step says it passed over is what the model's source holds: each reason's count
    /// grows by at most the visible dead letters that reason fits, skips add up, a missing
    /// queue it names is missing, and a dry run counts at most `max` movable matches a step.
    fn check_skips(
        &self,
        j: usize,
        max: u32,
        after: &sluice_core::redrive::RedriveJob,
    ) -> Result<(), String> {
        let before = &self.jobs_seen[j];
        let mj = &self.model.jobs[j];
        let (b, a) = (&before.skips, &after.skips);
        ensure!(
            after.skipped == a.no_destination + a.missing_destination,
            "skipped {} is not no_destination + missing_destination: {a:?}",
            after.skipped
        );
        let now = self.now();
        let (mut filtered, mut no_dest, mut missing) = (0u64, 0u64, 0u64);
        for m in self.model.msgs.iter().flatten() {
            let visible = matches!(m.place, Place::Waiting { at } if at <= now);
            if m.queue != mj.source || !visible {
                continue;
            }
            if !Model::matches(m, &mj.filter) {
                filtered += 1;
                continue;
            }
            match mj.destination.clone().or(m.source_queue.clone()) {
                None => no_dest += 1,
                Some(d) if !self.model.queues.contains_key(&d) => missing += 1,
                Some(_) => {}
            }
        }
        let grew = |what: &str, a: u64, b: u64, bound: u64| {
            let d = a
                .checked_sub(b)
                .ok_or(format!("{what} fell from {b} to {a}"))?;
            ensure!(
                d <= bound,
                "{what} grew by {d}; the source holds {bound} such"
            );
            Ok::<(), String>(())
        };
        grew("skips.filtered", a.filtered, b.filtered, filtered)?;
        grew(
            "skips.no_destination",
            a.no_destination,
            b.no_destination,
            no_dest,
        )?;
        grew(
            "skips.missing_destination",
            a.missing_destination,
            b.missing_destination,
            missing,
        )?;
        for q in a
            .missing_queues
            .iter()
            .filter(|q| !b.missing_queues.contains(q))
        {
            ensure!(
                !self.model.queues.contains_key(q.as_str()),
                "named {q} missing, which exists"
            );
        }
        if mj.dry_run {
            let movable = |x: &sluice_core::redrive::RedriveJob| x.matched - x.skipped;
            grew(
                "a dry run's movable matches",
                movable(after),
                movable(before),
                u64::from(max),
            )?;
        }
        Ok(())
    }

    /// After a restart, every job reads as the engine last answered it.
    pub(super) async fn check_jobs_kept(&mut self) -> Result<(), String> {
        for (id, seen) in self.jobs.clone().into_iter().zip(self.jobs_seen.clone()) {
            let got = self
                .s()
                .get_redrive(id)
                .await
                .map_err(|e| format!("job {id} after a restart: {e:?}"))?;
            ensure!(
                got == seen,
                "job {id} after a restart reads {got:?}, last answered {seen:?}"
            );
        }
        Ok(())
    }

    pub(super) async fn put_schedule(
        &mut self,
        name: u8,
        every_ms: u64,
        queue: u8,
        b: &BodySpec,
        attributes: &[(String, String)],
        (key, priority): &(Option<String>, Option<u8>),
    ) -> Result<(), String> {
        let now = self.now();
        let n = ScheduleName::new(crate::differential::ops::SCHEDULES[name as usize % 2])
            .expect("name");
        let spec = ScheduleSpec {
            trigger: TriggerSpec::Every { every_ms },
            queue: qn(queue),
            body: body(b),
            attributes: attributes.iter().cloned().collect(),
            key: key_filter(key.as_deref()),
            priority: *priority,
            catch_up: CatchUp::None,
            paused: false,
        };
        let got = self.s().put_schedule(&n, spec.clone()).await;
        let probe = NewMessage {
            attributes: spec.attributes.clone(),
            priority: *priority,
            ..NewMessage::new(spec.body.clone())
        };
        let reserved = spec.attributes.contains_key("schedule")
            || spec.attributes.contains_key("scheduled_for");
        let want = if message_refusal(&probe).is_some() || reserved {
            Some(ErrorCode::InvalidArgument)
        } else if let Some(q) = self.model.queues.get(spec.queue.as_str()) {
            (spec.body.len() > q.config.max_message_bytes as usize)
                .then_some(ErrorCode::PayloadTooLarge)
        } else {
            Some(ErrorCode::QueueNotFound)
        };
        same_code("put_schedule", &got, want)?;
        let Ok((s, created)) = got else {
            return Ok(());
        };
        let prev = self.model.schedules.get(n.as_str()).cloned();
        ensure!(
            created == prev.is_none(),
            "created {created}, model {}",
            prev.is_none()
        );
        let sched = match prev {
            Some(p) if p.every_ms == every_ms => crate::differential::model::Sched {
                queue: spec.queue.to_string(),
                body: spec.body.clone(),
                attributes: spec.attributes.clone(),
                key: key.clone(),
                priority: *priority,
                updated_at: now,
                ..p
            },
            p => crate::differential::model::Sched {
                every_ms,
                queue: spec.queue.to_string(),
                body: spec.body.clone(),
                attributes: spec.attributes.clone(),
                key: key.clone(),
                priority: *priority,
                created_at: p.as_ref().map_or(now, |p| p.created_at),
                updated_at: now,
                anchor: now,
                last_fired: None,
                fired: p.as_ref().map_or(0, |p| p.fired),
                missed: p.as_ref().map_or(0, |p| p.missed),
            },
        };
        let seen = (
            s.spec == spec,
            s.created_at.as_millis(),
            s.updated_at.as_millis(),
            s.anchor.as_millis(),
            s.last_fired.map(Timestamp::as_millis),
            s.fired,
            s.missed,
        );
        let want = (
            true,
            sched.created_at,
            sched.updated_at,
            sched.anchor,
            sched.last_fired,
            sched.fired,
            sched.missed,
        );
        ensure!(
            seen == want,
            "schedule (spec same, created_at, updated_at, anchor, last_fired, fired, missed): \
             engine {seen:?}, model {want:?}"
        );
        self.model.schedules.insert(n.to_string(), sched);
        Ok(())
    }

    pub(super) async fn step_schedule(
        &mut self,
        name: u8,
        ahead_ms: u64,
        fire: bool,
        missed: u64,
        stale: bool,
    ) -> Result<(), String> {
        let now = self.now();
        let n = ScheduleName::new(crate::differential::ops::SCHEDULES[name as usize % 2])
            .expect("name");
        let sched = self.model.schedules.get(n.as_str()).cloned();
        let current = sched.as_ref().and_then(|s| s.last_fired);
        let expected = if stale {
            Some(Timestamp(current.unwrap_or(now) - 1))
        } else {
            current.map(Timestamp)
        };
        let base = sched
            .as_ref()
            .map_or(now, |s| s.last_fired.unwrap_or(s.anchor).max(s.anchor));
        let through = Timestamp(base + i64::try_from(ahead_ms).unwrap_or(1));
        let step = ScheduleStep {
            expected,
            through,
            fire,
            missed,
        };
        let got = self.s().step_schedule(&n, step).await;
        let Some(sched) = sched else {
            return same_code("step_schedule", &got, Some(ErrorCode::NotFound));
        };
        if expected.is_some_and(|e| through <= e) {
            return same_code("step_schedule", &got, Some(ErrorCode::InvalidArgument));
        }
        if expected.map(Timestamp::as_millis) != sched.last_fired {
            return expect_ok("step_schedule", got, StepOutcome::Stale);
        }
        let qname = sched.queue.clone();
        let advance = |m: &mut Model, fired: bool| {
            let s = m.schedules.get_mut(n.as_str()).expect("schedule");
            s.last_fired = Some(through.as_millis());
            s.missed += missed;
            if fired {
                s.fired += 1;
            }
        };
        // A skip step enqueues nothing, so whether the queue exists does not matter to it.
        if !fire {
            advance(&mut self.model, false);
            return expect_ok("step_schedule", got, StepOutcome::Skipped);
        }
        if !self.model.queues.contains_key(&qname) {
            let out = expect_ok("step_schedule", got, StepOutcome::QueueMissing);
            advance(&mut self.model, false);
            let s = self.model.schedules.get_mut(n.as_str()).expect("schedule");
            s.missed += 1;
            return out;
        }
        // The firing's message, as `Schedule::message` makes it.
        let mut attributes = sched.attributes.clone();
        attributes.insert("schedule".into(), n.to_string());
        attributes.insert("scheduled_for".into(), sluice_core::time::rfc3339(through));
        let dedup = format!("schedule:{}:at:{}", n, through.as_millis());
        let q = &self.model.queues[&qname];
        if let Some((first, _)) = q.dedup.get(&dedup) {
            let first = self.ids.engine[*first];
            advance(&mut self.model, true);
            return expect_ok("step_schedule", got, StepOutcome::Fired { id: first });
        }
        if sched.body.len() > q.config.max_message_bytes as usize {
            return same_code("step_schedule", &got, Some(ErrorCode::PayloadTooLarge));
        }
        if q.config
            .max_depth
            .is_some_and(|m| self.model.depth(&qname) as u64 >= m)
        {
            return same_code("step_schedule", &got, Some(ErrorCode::QueueFull));
        }
        let out = got.map_err(|e| format!("step_schedule refused: {e:?}"))?;
        let StepOutcome::Fired { id } = out else {
            return Err(format!("step_schedule answered {out:?}, model: fired"));
        };
        let mid = self.ids.push(id)?;
        let got_mid = self.model.store_message(
            &qname,
            sched.body.clone(),
            attributes,
            0,
            Some(dedup),
            (None, sched.key.clone(), sched.priority, None),
            now,
        );
        ensure!(got_mid == mid, "model id {got_mid} for engine's {mid}");
        advance(&mut self.model, true);
        Ok(())
    }
}

/// The store's key for a key the test names (always a valid key).
fn key_filter(key: Option<&str>) -> Option<sluice_core::MessageKey> {
    key.map(|k| sluice_core::MessageKey::new(k).expect("the test's filter keys are valid"))
}
