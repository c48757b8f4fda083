//! The runner's settlements of deliveries (ack, nack, reject, move, extend, release) and message deletes and cancels.

use super::*;

impl Run<'_> {
    /// Settling a delivery, deleting or cancelling a message.
    ///
    /// Long because each arm makes its call, asks whether the receipt or message still holds
    /// (mostly through `settle_check`), then moves the model as that operation does; the arms
    /// differ in that last part, so they sit side by side.
    pub(super) async fn apply_settle_op(&mut self, op: &Op) -> Result<(), String> {
        let now = self.now();
        match op {
            Op::Ack { pick, result } => {
                let Some(d) = self.model.pick(*pick) else {
                    return Ok(());
                };
                let del = self.model.deliveries[d].clone();
                let q = qn(del.queue);
                let res = result.as_ref().map(body);
                let got = self
                    .s()
                    .ack(
                        &q,
                        vec![AckRequest {
                            receipt: self.receipts[d],
                            result: res.clone(),
                        }],
                    )
                    .await;
                if !self.model.queues.contains_key(q.as_str()) {
                    return same_code("ack", &got, Some(ErrorCode::QueueNotFound));
                }
                let items = got.map_err(|e| format!("ack call failed: {e:?}"))?;
                ensure!(items.len() == 1, "ack answered {items:?}");
                let live = self.model.is_live(d)
                    && self
                        .model
                        .live(del.msg)
                        .is_some_and(|m| m.queue == q.as_str());
                let too_big = res.as_ref().is_some_and(|b| {
                    b.len() > self.model.queues[q.as_str()].config.max_message_bytes as usize
                });
                let want = match (live, too_big) {
                    (false, _) => Some(ErrorCode::ReceiptStale),
                    (true, true) => Some(ErrorCode::PayloadTooLarge),
                    (true, false) => None,
                };
                same_code("ack item", &items[0], want)?;
                if want.is_none() {
                    self.model.ack(del.msg, res, now);
                }
            }
            Op::Nack {
                pick,
                delay_ms,
                error,
                consumer,
            } => {
                let Some(d) = self.model.pick(*pick) else {
                    return Ok(());
                };
                let del = self.model.deliveries[d].clone();
                let q = qn(del.queue);
                let failure = Failure {
                    error: error.clone(),
                    consumer: consumer.clone(),
                    retry_after: false,
                };
                let got = self
                    .s()
                    .nack(&q, self.receipts[d], Some(dur(*delay_ms)), failure)
                    .await;
                let Some(want) = self.settle_check(d, &q, error, consumer) else {
                    return Ok(());
                };
                if let Err(c) = want {
                    return same_code("nack", &got, Some(c));
                }
                let m = self.model.live(del.msg).expect("live").clone();
                if m.cancelled {
                    self.model.end_cancelled(del.msg, now);
                    return expect_ok(
                        "nack",
                        got,
                        NackOutcome {
                            state: Some(MessageState::Completed),
                            queue: q,
                        },
                    );
                }
                self.model
                    .queues
                    .get_mut(q.as_str())
                    .expect("q")
                    .totals
                    .nacked += 1;
                self.model
                    .fail(del.msg, "Nacked", error.clone(), consumer.clone(), now);
                // While the key's breaker is forced open, a nack keeps its attempt.
                let mut receive_count = m.receive_count;
                if self.model.key_forced(q.as_str(), m.key.as_deref()) {
                    receive_count = receive_count.saturating_sub(1);
                    let mm = self.model.msgs[del.msg].as_mut().expect("message");
                    mm.receive_count = receive_count;
                }
                let cfg = &self.model.queues[q.as_str()].config;
                let exhausted =
                    sluice_core::lifecycle::is_exhausted(cfg.max_receive_count, receive_count);
                if exhausted {
                    if !self.model.has_dlq(q.as_str()) {
                        return same_code("nack", &got, Some(ErrorCode::Conflict));
                    }
                    let dlq = cfg.dead_letter_queue.clone().expect("dlq");
                    self.model
                        .dead_letter(del.msg, DeadLetterReason::Exhausted, now);
                    return expect_ok(
                        "nack",
                        got,
                        NackOutcome {
                            state: None,
                            queue: dlq,
                        },
                    );
                }
                let mm = self.model.msgs[del.msg].as_mut().expect("message");
                mm.place = Place::Waiting {
                    at: now + i64::try_from(*delay_ms).unwrap_or(0),
                };
                let state = if *delay_ms == 0 {
                    MessageState::Visible
                } else {
                    MessageState::Delayed
                };
                expect_ok(
                    "nack",
                    got,
                    NackOutcome {
                        state: Some(state),
                        queue: q,
                    },
                )?;
            }
            Op::Reject { pick, error } => {
                let Some(d) = self.model.pick(*pick) else {
                    return Ok(());
                };
                let del = self.model.deliveries[d].clone();
                let q = qn(del.queue);
                let failure = Failure {
                    error: error.clone(),
                    ..Failure::default()
                };
                let got = self.s().reject(&q, self.receipts[d], failure).await;
                let Some(want) = self.settle_check(d, &q, error, &None) else {
                    return Ok(());
                };
                if let Err(c) = want {
                    return same_code("reject", &got, Some(c));
                }
                let m = self.model.live(del.msg).expect("live").clone();
                if m.cancelled {
                    self.model.end_cancelled(del.msg, now);
                    return expect_ok("reject", got, q);
                }
                if !self.model.has_dlq(q.as_str()) {
                    return same_code("reject", &got, Some(ErrorCode::Conflict));
                }
                let dlq = self.model.queues[q.as_str()]
                    .config
                    .dead_letter_queue
                    .clone()
                    .expect("dlq");
                self.model
                    .fail(del.msg, "Rejected", error.clone(), None, now);
                self.model
                    .dead_letter(del.msg, DeadLetterReason::Rejected, now);
                expect_ok("reject", got, dlq)?;
            }
            Op::Move { pick, to, error } => {
                let Some(d) = self.model.pick(*pick) else {
                    return Ok(());
                };
                let del = self.model.deliveries[d].clone();
                let q = qn(del.queue);
                let to = qn(*to);
                let failure = Failure {
                    error: error.clone(),
                    ..Failure::default()
                };
                let got = self
                    .s()
                    .move_message(&q, self.receipts[d], &to, failure)
                    .await;
                if to == q {
                    if error.as_deref().is_some_and(has_nul) {
                        return same_code("move", &got, Some(ErrorCode::InvalidArgument));
                    }
                    return same_code("move", &got, Some(ErrorCode::Conflict));
                }
                let Some(want) = self.settle_check(d, &q, error, &None) else {
                    return Ok(());
                };
                if let Err(c) = want {
                    return same_code("move", &got, Some(c));
                }
                if !self.model.queues.contains_key(to.as_str()) {
                    return same_code("move", &got, Some(ErrorCode::QueueNotFound));
                }
                let m = self.model.live(del.msg).expect("live").clone();
                if m.cancelled {
                    self.model.end_cancelled(del.msg, now);
                    return same_code("move", &got, None);
                }
                same_code("move", &got, None)?;
                self.model.fail(del.msg, "Moved", error.clone(), None, now);
                self.model.move_to(del.msg, to.as_str(), now);
            }
            Op::Extend {
                pick,
                visibility_ms,
            } => {
                let Some(d) = self.model.pick(*pick) else {
                    return Ok(());
                };
                let del = self.model.deliveries[d].clone();
                let q = qn(del.queue);
                let got = self
                    .s()
                    .extend(&q, self.receipts[d], dur(*visibility_ms))
                    .await;
                let Some(want) = self.settle_check(d, &q, &None, &None) else {
                    return Ok(());
                };
                if let Err(c) = want {
                    return same_code("extend", &got, Some(c));
                }
                let until = now + i64::try_from(*visibility_ms).unwrap_or(0);
                let mm = self.model.msgs[del.msg].as_mut().expect("message");
                let cancelled = mm.cancelled;
                mm.place = Place::InFlight { until, delivery: d };
                let l = got.map_err(|e| format!("extend refused: {e:?}"))?;
                ensure!(
                    l.deadline == Timestamp(until) && l.cancel_requested == cancelled,
                    "extend answered {l:?}, model deadline {until} cancelled {cancelled}"
                );
            }
            Op::Release { pick } => {
                let Some(d) = self.model.pick(*pick) else {
                    return Ok(());
                };
                let del = self.model.deliveries[d].clone();
                let q = qn(del.queue);
                let got = self.s().release(&q, self.receipts[d]).await;
                let Some(want) = self.settle_check(d, &q, &None, &None) else {
                    return Ok(());
                };
                if let Err(c) = want {
                    return same_code("release", &got, Some(c));
                }
                same_code("release", &got, None)?;
                let mm = self.model.msgs[del.msg].as_mut().expect("message");
                if mm.cancelled {
                    self.model.end_cancelled(del.msg, now);
                    return Ok(());
                }
                mm.receive_count = mm.receive_count.saturating_sub(1);
                mm.place = Place::Waiting { at: now };
            }
            Op::DeleteMessage { msg } => {
                let Some((mid, eid)) = self.msg_pick(*msg) else {
                    return Ok(());
                };
                let got = self.s().delete_message(eid).await;
                let exists = self.model.msgs[mid].is_some();
                same_code(
                    "delete_message",
                    &got,
                    (!exists).then_some(ErrorCode::MessageNotFound),
                )?;
                self.model.msgs[mid] = None;
            }
            Op::Cancel { msg } => {
                let Some((mid, eid)) = self.msg_pick(*msg) else {
                    return Ok(());
                };
                let Some(m) = self.model.msgs[mid].clone() else {
                    let got = self.s().cancel(eid).await;
                    return same_code("cancel", &got, Some(ErrorCode::MessageNotFound));
                };
                if m.dead_letter.is_some() {
                    // What cancelling a dead letter does is not settled by the contract.
                    return Ok(());
                }
                let got = self.s().cancel(eid).await;
                match m.place {
                    Place::Waiting { .. } => self.model.end_cancelled(mid, now),
                    Place::InFlight { .. } => {
                        self.model.msgs[mid].as_mut().expect("message").cancelled = true;
                    }
                    Place::Completed { .. } => {}
                }
                if self.model.view(mid, now).is_none() {
                    // Cancelled without a record kept (`result_ttl` 0): the message is gone,
                    // and so is what the call would answer.
                    return same_code("cancel", &got, Some(ErrorCode::MessageNotFound));
                }
                let got = got.map_err(|e| format!("cancel refused: {e:?}"))?;
                match self.model.view(mid, now) {
                    Some(want) => {
                        let v = view_of(&self.ids, &got, want.attempts.is_some())?;
                        ensure!(
                            crate::differential::compare::same(&v, &want),
                            "cancel answered: {}",
                            diff(&v, &want)
                        );
                    }
                    None => ensure!(
                        got.state == MessageState::Completed && got.cancelled,
                        "cancel answered {got:?} for a record not kept"
                    ),
                }
            }
            _ => unreachable!("apply_settle_op is given {op:?}"),
        }
        Ok(())
    }
}
