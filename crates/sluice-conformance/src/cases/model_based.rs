//! Model-based: random operation sequences checked against a reference model.

use super::*;

pub(super) const MODEL_QUEUE: &str = "model";
pub(super) const MODEL_DLQ: &str = "model.dlq";
pub(super) const MODEL_MRC: u32 = 3;
pub(super) const MODEL_VIS_MS: u64 = 10_000;

/// Random sequences of send, receive, ack, nack, reject, extend and clock moves (valid, stale
/// and forged receipts) against a fresh store each, checking after every step that the store
/// agrees with the reference model on which ids are visible, delayed, in flight and
/// dead-lettered, on receive counts, and that stale receipts are refused.
///
/// `SLUICE_MODEL_CASES` sets the number of sequences (default 64) and `SLUICE_MODEL_SEED`
/// (a number) draws other sequences than the default deterministic ones.
pub async fn model_equivalence(h: &dyn Harness) {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    let cases: usize = std::env::var("SLUICE_MODEL_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let sequences: Vec<Vec<Op>> = {
        // Deterministic by default so a failure reproduces; SLUICE_MODEL_SEED explores others.
        let mut runner = match std::env::var("SLUICE_MODEL_SEED")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            Some(seed) => {
                let mut bytes = [0u8; 32];
                bytes[..8].copy_from_slice(&seed.to_le_bytes());
                TestRunner::new_with_rng(
                    Config::default(),
                    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
                )
            }
            None => TestRunner::deterministic(),
        };
        let strat = ops_strategy(40);
        (0..cases)
            .map(|_| {
                strat
                    .new_tree(&mut runner)
                    .expect("generate a sequence")
                    .current()
            })
            .collect()
    };
    for (n, ops) in sequences.iter().enumerate() {
        if let Err(msg) = run_model_sequence(h, ops).await {
            let listing: Vec<String> = ops
                .iter()
                .enumerate()
                .map(|(i, op)| format!("  {i:2}: {op:?}"))
                .collect();
            panic!(
                "model_equivalence sequence {n} (SLUICE_MODEL_SEED={}) failed: {msg}\nsequence:\n{}",
                std::env::var("SLUICE_MODEL_SEED").unwrap_or_else(|_| "unset".into()),
                listing.join("\n")
            );
        }
    }
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

// Long because it is one arm per model operation (send, receive, ack, nack, reject, extend,
// advance), each error labelled with its step, then the model comparison that ends every step.
pub(super) async fn run_model_sequence(h: &dyn Harness, ops: &[Op]) -> Result<(), String> {
    let e = env(h).await;
    let q = qn(MODEL_QUEUE);
    let dlq = qn(MODEL_DLQ);
    e.store
        .put_queue(
            &q,
            &QueueConfigPatch {
                max_receive_count: Some(MODEL_MRC),
                visibility_timeout: Some(ms(MODEL_VIS_MS)),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("put_queue: {e:?}"))?;
    let mut model = Model::new(MODEL_MRC, ms(MODEL_VIS_MS));
    let mut sent = 0u32;
    for (i, op) in ops.iter().enumerate() {
        let at = |s: String| format!("step {i} ({op:?}): {s}");
        let now = e.now();
        model.settle(now);
        match op {
            Op::Send { delay_ms } => {
                sent += 1;
                let m = NewMessage {
                    delay: delay_ms.map(ms),
                    ..text(&format!("m{sent}"))
                };
                let out = e
                    .store
                    .send(&q, vec![m])
                    .await
                    .map_err(|err| at(format!("send: {err:?}")))?;
                ensure!(
                    out.len() == 1 && !out[0].duplicate,
                    "{}",
                    at(format!("send outcome {out:?}"))
                );
                ensure!(
                    !model.msgs.contains_key(&out[0].id),
                    "{}",
                    at(format!("id {} reused", out[0].id))
                );
                model.on_send(out[0].id, ms(delay_ms.unwrap_or(0)), now);
            }
            Op::Receive { max, visibility_ms } => {
                let vis = visibility_ms.map(ms);
                let req = ReceiveRequest {
                    max: *max,
                    wait: Duration::ZERO,
                    visibility: vis,
                    consumer: None,
                };
                let ds = e
                    .store
                    .receive(&q, req)
                    .await
                    .map_err(|err| at(format!("receive: {err:?}")))?;
                let want = (*max as usize).min(model.visible().len());
                ensure!(
                    ds.len() == want,
                    "{}",
                    at(format!(
                        "receive returned {} messages, model has {} visible",
                        ds.len(),
                        model.visible().len()
                    ))
                );
                let until = now.plus(vis.unwrap_or(ms(MODEL_VIS_MS)));
                for d in ds {
                    ensure!(
                        d.lease_deadline == until,
                        "{}",
                        at(format!(
                            "lease_deadline {:?}, want {until:?}",
                            d.lease_deadline
                        ))
                    );
                    let rc = model.on_receive(d.id, d.receipt, until).map_err(&at)?;
                    ensure!(
                        d.receive_count == rc,
                        "{}",
                        at(format!(
                            "{} receive_count {}, model {rc}",
                            d.id, d.receive_count
                        ))
                    );
                }
            }
            Op::Ack { pick } => {
                let Some(r) = model.pick(*pick) else { continue };
                let live = model.is_live(&r);
                let res = e
                    .store
                    .ack(
                        &q,
                        vec![AckRequest {
                            receipt: r,
                            result: None,
                        }],
                    )
                    .await
                    .map_err(|err| at(format!("ack call: {err:?}")))?;
                ensure!(res.len() == 1, "{}", at(format!("ack outcomes {res:?}")));
                check_receipt_outcome(&res[0], live).map_err(&at)?;
                if live {
                    model.on_ack(&r);
                }
            }
            Op::Nack { pick, delay_ms } => {
                let Some(r) = model.pick(*pick) else { continue };
                let live = model.is_live(&r);
                let res = e
                    .store
                    .nack(&q, r, Some(ms(*delay_ms)), fail("model"))
                    .await;
                check_receipt_outcome(&res, live).map_err(&at)?;
                if live {
                    let dead = model.on_nack(&r, ms(*delay_ms), now);
                    let want = if dead {
                        NackOutcome {
                            state: None,
                            queue: dlq.clone(),
                        }
                    } else if *delay_ms == 0 {
                        NackOutcome {
                            state: Some(MessageState::Visible),
                            queue: q.clone(),
                        }
                    } else {
                        NackOutcome {
                            state: Some(MessageState::Delayed),
                            queue: q.clone(),
                        }
                    };
                    ensure!(
                        res.as_ref().ok() == Some(&want),
                        "{}",
                        at(format!("nack returned {res:?}, want {want:?}"))
                    );
                }
            }
            Op::Reject { pick } => {
                let Some(r) = model.pick(*pick) else { continue };
                let live = model.is_live(&r);
                let res = e.store.reject(&q, r, fail("model")).await;
                check_receipt_outcome(&res, live).map_err(&at)?;
                if live {
                    ensure!(
                        res.as_ref().ok() == Some(&dlq),
                        "{}",
                        at(format!("reject returned {res:?}"))
                    );
                    model.on_reject(&r);
                }
            }
            Op::Extend {
                pick,
                visibility_ms,
            } => {
                let Some(r) = model.pick(*pick) else { continue };
                let live = model.is_live(&r);
                let res = e.store.extend(&q, r, ms(*visibility_ms)).await;
                check_receipt_outcome(&res, live).map_err(&at)?;
                if live {
                    let until = now.plus(ms(*visibility_ms));
                    ensure!(
                        res.as_ref().ok().map(|l| l.deadline) == Some(until),
                        "{}",
                        at(format!("extend returned {res:?}, want {until:?}"))
                    );
                    model.on_extend(&r, until);
                }
            }
            Op::Advance { ms: n } => e.advance(ms(*n)),
        }
        model.settle(e.now());
        compare_with_model(&e, &q, &dlq, &model)
            .await
            .map_err(&at)?;
    }
    Ok(())
}

pub(super) fn check_receipt_outcome<T: Debug>(
    res: &Result<T, StoreError>,
    live: bool,
) -> Result<(), String> {
    match (res, live) {
        (Ok(_), true) => Ok(()),
        (Err(e), false) if e.code() == ErrorCode::ReceiptStale => Ok(()),
        (other, true) => Err(format!("live receipt refused: {other:?}")),
        (other, false) => Err(format!(
            "stale receipt not refused with receipt_stale: {other:?}"
        )),
    }
}

pub(super) async fn compare_with_model(
    e: &Env,
    q: &QueueName,
    dlq: &QueueName,
    model: &Model,
) -> Result<(), String> {
    let s = e
        .store
        .stats(q)
        .await
        .map_err(|err| format!("stats: {err:?}"))?;
    let counts = (s.visible, s.delayed, s.in_flight, s.dead_letter_depth);
    let want = (
        model.visible().len() as u64,
        model.delayed().len() as u64,
        model.in_flight().len() as u64,
        model.dead().len() as u64,
    );
    ensure!(
        counts == want,
        "stats (visible, delayed, in_flight, dead_letter_depth) = {counts:?}, model {want:?}"
    );
    for (state, want) in [
        (BrowseState::Visible, model.visible()),
        (BrowseState::Delayed, model.delayed()),
        (BrowseState::InFlight, model.in_flight()),
    ] {
        let msgs = browse_quiet(e, q, state).await?;
        let got: BTreeSet<MessageId> = msgs.iter().map(|m| m.id).collect();
        ensure!(
            got == want,
            "browse {state:?}: store {got:?}, model {want:?}"
        );
        for m in &msgs {
            let mm = model.msgs[&m.id];
            ensure!(
                m.receive_count == mm.receive_count,
                "{}: receive_count {} in store, {} in model",
                m.id,
                m.receive_count,
                mm.receive_count
            );
            match mm.place {
                Place::Delayed { until } | Place::InFlight { until, .. } => ensure!(
                    m.visible_at == Some(until),
                    "{}: visible_at {:?}, model {until:?}",
                    m.id,
                    m.visible_at
                ),
                _ => {}
            }
        }
    }
    let dead: BTreeSet<MessageId> = browse_quiet(e, dlq, BrowseState::All)
        .await?
        .iter()
        .map(|m| m.id)
        .collect();
    ensure!(
        dead == model.dead(),
        "DLQ holds {dead:?}, model {:?}",
        model.dead()
    );
    Ok(())
}

pub(super) async fn browse_quiet(
    e: &Env,
    q: &QueueName,
    state: BrowseState,
) -> Result<Vec<Message>, String> {
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..1000 {
        let page = e
            .store
            .browse(
                q,
                BrowseRequest {
                    state,
                    limit: 7,
                    cursor: cursor.take(),
                },
            )
            .await
            .map_err(|err| format!("browse {q} {state:?}: {err:?}"))?;
        out.extend(page.messages);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return Ok(out),
        }
    }
    Err(format!("browse {q} {state:?} did not end"))
}
