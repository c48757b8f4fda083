//! Fuzzing of what recovery reads from disk: log frames ([`decode_frame`]), the id scan of
//! compaction ([`message_ids_in`]) and the replay of records into the in-memory state
//! ([`State::apply`] through [`replay_segment`]). A segment may hold anything a crash, a bad
//! disk or a bug left there, so reading it must refuse what it cannot read without
//! panicking and without allocating more than the bytes could hold; a record that passes its
//! checksum but names messages, queues or numbers that make no sense must not panic replay;
//! and every valid record must read back as it was written.
//!
//! Property tests stand in for a coverage-guided fuzzer (stable toolchain only). Each runs a
//! few hundred cases in the ordinary suite; `SLUICE_FUZZ_CASES=N` runs N instead:
//!
//! ```sh
//! SLUICE_FUZZ_CASES=100000 cargo test --release -p sluice-embedded --lib journal::fuzz_tests
//! ```

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use sluice_core::message::{Attempt, AttemptOutcome, Body, DeadLetter, DeadLetterReason};
use sluice_core::{QueueConfig, QueueName, Timestamp};

use super::log::{Loc, segment_path};
use super::record::*;
use super::recovery::{ReplayStats, replay_segment};
use crate::catalog::CatalogQueue;
use crate::state::State;

/// `cases` in the ordinary suite, or `SLUICE_FUZZ_CASES` for a long run.
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("SLUICE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Message ids and tokens: a few small ones (so records name the same messages) and the
/// extremes, where arithmetic overflows.
fn id() -> impl Strategy<Value = u64> + Clone {
    prop_oneof![4 => 0u64..6, 1 => Just(u64::MAX), 1 => Just(u64::MAX - 1), 1 => any::<u64>()]
}

/// Queue ids: the catalog's (1 and 2), unknown ones and the extremes.
fn qid() -> impl Strategy<Value = Qid> + Clone {
    prop_oneof![4 => 0u32..5, 1 => Just(u32::MAX), 1 => any::<u32>()]
}

/// Times in ms: ordinary, and the extremes.
fn time() -> impl Strategy<Value = i64> + Clone {
    prop_oneof![
        4 => 0i64..2_000_000,
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
        1 => any::<i64>()
    ]
}

fn short() -> impl Strategy<Value = String> + Clone {
    "[a-z]{0,6}"
}

fn rich() -> impl Strategy<Value = Rich> + Clone {
    let attempt = (
        time(),
        proptest::option::of(short()),
        proptest::option::of(time()),
    )
        .prop_map(|(at, error, started)| Attempt {
            at: Timestamp(at),
            outcome: AttemptOutcome::Nacked,
            error,
            consumer: None,
            started_at: started.map(Timestamp),
        });
    (
        proptest::option::of(short()),
        vec(attempt, 0..3),
        proptest::option::of(short()),
        proptest::option::of(time()),
    )
        .prop_map(|(last_error, attempts, source_queue, dead)| Rich {
            last_error,
            attempts,
            source_queue,
            dead_letter: dead.map(|at| DeadLetter {
                reason: DeadLetterReason::Rejected,
                at: Timestamp(at),
            }),
        })
}

fn message() -> impl Strategy<Value = MessageRecord> + Clone {
    (
        (any::<bool>(), id(), qid(), vec(any::<u8>(), 0..8)),
        (time(), time(), time(), any::<u32>()),
        (
            proptest::option::of((id(), time())),
            rich(),
            proptest::option::of((short(), time())),
        ),
    )
        .prop_map(
            |(
                (copy, id, qid, body),
                (enqueued_at, entered_at, visible_at, receive_count),
                (lease, rich, dedup),
            )| MessageRecord {
                trace: None,
                origin: if copy { Origin::Relocate } else { Origin::Send },
                id,
                qid,
                body: Body::binary(body),
                attributes: Default::default(),
                enqueued_at,
                entered_at,
                visible_at,
                receive_count,
                lease,
                rich,
                dedup,
            },
        )
}

fn event() -> impl Strategy<Value = UpdateEvent> + Clone {
    prop_oneof![
        Just(UpdateEvent::Nack),
        qid().prop_map(|from| UpdateEvent::NackExhausted { from }),
        Just(UpdateEvent::LeaseExpired),
        qid().prop_map(|from| UpdateEvent::LeaseExhausted { from }),
        qid().prop_map(|from| UpdateEvent::Rejected { from }),
        qid().prop_map(|from| UpdateEvent::Expired { from }),
        qid().prop_map(|from| UpdateEvent::Moved { from }),
        Just(UpdateEvent::Redriven),
        Just(UpdateEvent::Released),
    ]
}

fn update() -> impl Strategy<Value = UpdateRecord> + Clone {
    (event(), id(), qid(), time(), time(), any::<u32>(), rich()).prop_map(
        |(event, id, qid, visible_at, entered_at, receive_count, rich)| UpdateRecord {
            event,
            id,
            qid,
            visible_at,
            entered_at,
            receive_count,
            rich,
        },
    )
}

fn acked() -> impl Strategy<Value = Acked> + Clone {
    (id(), qid(), any::<u32>(), time(), time(), any::<bool>()).prop_map(
        |(id, qid, receive_count, at, keep_until, cancelled)| Acked {
            id,
            qid,
            receive_count,
            at,
            keep_until,
            cancelled,
        },
    )
}

// Long because it is one strategy per journal record kind in one `prop_oneof!`, so the fuzzing
// reaches every kind of record the journal can hold and a kind left out shows.
fn record() -> impl Strategy<Value = Record> {
    prop_oneof![
        message().prop_map(Record::Message),
        (message(), short(), id()).prop_map(|(message, name, order)| Record::Grouped {
            message,
            group: GroupTag { name, order },
        }),
        // A traced message, with a key or not: its context travels around its record.
        (message(), proptest::option::of(short()), any::<u16>()).prop_map(
            |(mut message, key, span)| {
                message.trace = Some(
                    sluice_core::TraceContext::new(
                        format!(
                            "00-4bf92f3577b34da6a3ce929d0e0e4736-{:016x}-01",
                            u64::from(span) + 1
                        ),
                        None,
                    )
                    .expect("a valid trace context"),
                );
                Record::base(message, None, key.as_deref(), None)
            }
        ),
        update().prop_map(Record::Update),
        (update(), id()).prop_map(|(update, order)| Record::Regrouped { update, order }),
        vec(
            (id(), any::<u32>(), id(), time()).prop_map(|(id, receive_count, token, deadline)| {
                Lease {
                    id,
                    receive_count,
                    token,
                    deadline,
                }
            }),
            0..3
        )
        .prop_map(Record::Lease),
        (time(), proptest::option::of(short()), id(), id()).prop_map(
            |(at, consumer, id, token)| Record::Leased {
                at,
                consumer,
                leases: vec![Lease {
                    id,
                    receive_count: 1,
                    token,
                    deadline: at,
                }],
            }
        ),
        (vec(acked(), 1..3), time(), proptest::option::of(short())).prop_map(
            |(acked, at, consumer)| {
                let holds = acked
                    .iter()
                    .map(|a| crate::journal::record::Hold {
                        id: a.id,
                        starts: Vec::new(),
                        lease: Some((at, consumer.clone())),
                    })
                    .collect();
                Record::held(Record::Ack(acked), holds)
            }
        ),
        (id(), id(), time()).prop_map(|(id, token, deadline)| Record::Extend {
            id,
            token,
            deadline,
        }),
        vec(acked(), 0..3).prop_map(Record::Ack),
        acked().prop_map(|acked| Record::Complete {
            acked,
            result: Body::text("r"),
        }),
        vec(acked(), 0..3).prop_map(|acked| {
            let results = acked.iter().map(|_| None).collect();
            Record::Kept { acked, results }
        }),
        (acked(), vec(rich(), 0..1)).prop_map(|(acked, r)| Record::Finished(Completion {
            acked,
            result: None,
            attempts: r.into_iter().flat_map(|r| r.attempts).collect(),
            last_error: Some("e".into()),
        })),
        (vec(id(), 0..4), any::<bool>(), time()).prop_map(|(ids, expired, at)| {
            Record::Remove {
                ids,
                reason: if expired {
                    RemoveReason::Expired
                } else {
                    RemoveReason::Deleted
                },
                at,
            }
        }),
        qid().prop_map(|qid| Record::Purge { qid }),
        (qid(), short(), id(), time()).prop_map(|(qid, key, id, until)| Record::Dedup {
            qid,
            key,
            id,
            until,
        }),
        (id(), id()).prop_map(|(next_id, next_token)| Record::Checkpoint(Checkpoint {
            next_id,
            next_token,
            totals: vec![(1, Default::default())],
        })),
        (time(), qid(), time()).prop_map(|(at, qid, sample_at)| Record::Samples {
            at,
            entries: vec![(
                qid,
                sluice_core::stats::StatsSample {
                    at: Timestamp(sample_at),
                    visible: 1,
                    delayed: 0,
                    in_flight: 0,
                    dead_letter_depth: 0,
                    oldest_visible_age_ms: 0,
                    totals: Default::default(),
                }
            )],
        }),
        id().prop_map(|id| Record::Cancel { id }),
        id().prop_map(|upto| Record::Tokens { upto }),
        vec((0u32..4, vec(any::<i64>(), 0..4)), 0..3).prop_map(Record::RateWindows),
        vec(
            (0u32..4, vec(any::<i64>(), 0..4), any::<Option<i64>>()),
            0..3
        )
        .prop_map(|v| {
            Record::RatePaces(
                v.into_iter()
                    .map(|(qid, events, tat)| crate::journal::record::RatePace { qid, events, tat })
                    .collect(),
            )
        }),
        vec(
            (
                0u32..4,
                vec(
                    (
                        proptest::option::of("[a-z]{1,3}"),
                        vec(any::<i64>(), 0..4),
                        any::<Option<i64>>()
                    ),
                    0..3
                )
            ),
            0..3
        )
        .prop_map(|v| {
            use crate::journal::record::{KeyPace, KeyPaces};
            Record::KeyPaces(
                v.into_iter()
                    .map(|(qid, keys)| KeyPaces {
                        qid,
                        keys: keys
                            .into_iter()
                            .map(|(key, events, tat)| KeyPace { key, events, tat })
                            .collect(),
                    })
                    .collect(),
            )
        }),
        (id(), vec(update(), 0..3)).prop_map(|(job, moves)| {
            let job = sluice_core::RedriveJob::new(
                sluice_core::RedriveId(job),
                sluice_core::RedriveSpec {
                    source: QueueName::new("a.dlq").expect("name"),
                    destination: None,
                    limit: None,
                    rate: None,
                    filter: Default::default(),
                    reset_receive_count: true,
                    dry_run: false,
                    guard: None,
                },
                Timestamp(0),
            );
            let orders = moves.iter().map(|u| (u.id, u.id)).collect();
            Record::redrive_grouped(job, moves, orders)
        }),
    ]
}

/// The state of a store with two queues, as recovery starts it.
fn state() -> State {
    let queue = |qid: Qid, name: &str| {
        let name = QueueName::new(name).expect("name");
        CatalogQueue {
            qid,
            config: QueueConfig::defaults_for(&name),
            name,
            created_at: Timestamp(0),
            flow: None,
            key_flows: Vec::new(),
        }
    };
    State::new(&[queue(1, "jobs"), queue(2, "jobs.dlq")], 3)
}

/// Applies the frames of `buf` to `state` as replay does, up to the first that does not read.
fn apply_all(state: &mut State, buf: &[u8]) {
    let mut off = 0;
    while off < buf.len() {
        let Ok((rec, len)) = decode_frame(&buf[off..]) else {
            return;
        };
        let loc = Loc {
            seg: 1,
            off: u32::try_from(off).unwrap_or(u32::MAX),
        };
        state.apply(&rec, loc, u32::try_from(len).unwrap_or(u32::MAX));
        off += len;
    }
}

/// Ends replay and looks at the result the way a started store does first.
fn finish(mut state: State) {
    state.finish_replay();
    for qid in [1, 2] {
        state.promote(qid, i64::MAX);
    }
}

/// A frame of `payload` with a correct header: garbage that passed its checksum, as a bug
/// (or an incompatible version) could write.
fn checksummed(payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER + payload.len());
    frame.extend_from_slice(&u32::try_from(payload.len()).expect("short").to_le_bytes());
    frame.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// A change to a valid encoding: flip bits of one byte, cut it short, or add to its end.
#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, mask: u8 },
    Truncate { to: usize },
    Extend { with: Vec<u8> },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        any::<usize>().prop_map(|to| Mutation::Truncate { to }),
        vec(any::<u8>(), 1..16).prop_map(|with| Mutation::Extend { with }),
    ]
}

fn mutate(bytes: &mut Vec<u8>, m: &Mutation) {
    let n = bytes.len().max(1);
    match m {
        Mutation::Flip { at, mask } => {
            if let Some(b) = bytes.get_mut(at % n) {
                *b ^= mask;
            }
        }
        Mutation::Truncate { to } => bytes.truncate(to % n),
        Mutation::Extend { with } => bytes.extend_from_slice(with),
    }
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn arbitrary_bytes_are_refused_or_read(bytes in vec(any::<u8>(), 0..256)) {
        let _ = decode_frame(&bytes);
        let _ = message_ids_in(&bytes);
        let mut s = state();
        apply_all(&mut s, &bytes);
        finish(s);
    }

    #[test]
    fn checksummed_garbage_is_refused_or_replayed(payload in vec(any::<u8>(), 1..256)) {
        let frame = checksummed(&payload);
        let _ = message_ids_in(&frame);
        let mut s = state();
        apply_all(&mut s, &frame);
        finish(s);
    }

    #[test]
    fn valid_records_round_trip(records in vec(record(), 1..8)) {
        let mut buf = Vec::new();
        let mut lens = Vec::new();
        for r in &records {
            lens.push(encode_into(r, &mut buf));
        }
        prop_assert_eq!(lens.iter().sum::<usize>(), buf.len());
        let mut off = 0;
        for (r, len) in records.iter().zip(&lens) {
            let (back, n) = decode_frame(&buf[off..]).expect("decodes");
            prop_assert_eq!(&back, r);
            prop_assert_eq!(n, *len);
            off += n;
        }
        let _ = message_ids_in(&buf);
    }

    /// Any sequence of valid records, however little sense it makes (updates of messages
    /// never sent, acks of unknown queues, ids at `u64::MAX`), replays without panicking.
    #[test]
    fn senseless_records_replay(records in vec(record(), 1..24)) {
        let mut buf = Vec::new();
        for r in &records {
            encode_into(r, &mut buf);
        }
        let mut s = state();
        apply_all(&mut s, &buf);
        finish(s);
    }

    #[test]
    fn mutated_records_are_refused_or_read(
        records in vec(record(), 1..6),
        mutations in vec(mutation(), 1..4),
    ) {
        let mut buf = Vec::new();
        for r in &records {
            encode_into(r, &mut buf);
        }
        let whole = buf.clone();
        for m in &mutations {
            mutate(&mut buf, m);
        }
        let _ = message_ids_in(&buf);
        let mut s = state();
        apply_all(&mut s, &buf);
        finish(s);
        // Mutated payloads with their checksum fixed up: they pass the check, so only the
        // decoder stands between them and replay.
        let mut payload = whole[HEADER..].to_vec();
        for m in &mutations {
            mutate(&mut payload, m);
        }
        if !payload.is_empty() {
            let frame = checksummed(&payload);
            let _ = message_ids_in(&frame);
            let mut s = state();
            apply_all(&mut s, &frame);
            finish(s);
        }
    }

    /// Whole segments as recovery reads them from disk: valid records followed by damage.
    /// The newest segment's damage is cut as a torn tail; in an older one it is an error.
    /// Either way, no panic.
    #[test]
    fn damaged_segments_are_cut_or_refused(
        records in vec(record(), 0..6),
        tail in vec(any::<u8>(), 0..64),
        newest: bool,
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut buf = Vec::new();
        for r in &records {
            encode_into(r, &mut buf);
        }
        let valid = buf.len();
        buf.extend_from_slice(&tail);
        std::fs::write(segment_path(dir.path(), 1), &buf).expect("write segment");
        let mut s = state();
        let mut stats = ReplayStats::default();
        let r = replay_segment(dir.path(), 1, newest, &mut s, &mut stats);
        if newest && r.is_ok() {
            // What is left is what was read.
            let len = std::fs::metadata(segment_path(dir.path(), 1)).expect("meta").len();
            prop_assert_eq!(len, stats.bytes);
        }
        if r.is_ok() {
            prop_assert!(stats.bytes as usize >= valid);
            finish(s);
        }
    }
}

/// The process's peak virtual memory in KiB (Linux), which a large allocation raises at once
/// even if none of it is touched.
fn vm_peak_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmPeak:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Length fields that claim far more than the bytes hold — the frame's own length, a
/// list's, a string's or a body's inside a checksummed payload — are refused without
/// reserving what they claim.
#[test]
fn huge_lengths_are_refused_without_allocating_them() {
    let before = vm_peak_kib();
    // Frame lengths of 4 GiB - 1, past `MAX_PAYLOAD`, and just under it with few bytes.
    for len in [u32::MAX, MAX_PAYLOAD as u32 + 1, MAX_PAYLOAD as u32] {
        let mut frame = len.to_le_bytes().to_vec();
        frame.extend_from_slice(&[0u8; 12]);
        assert!(decode_frame(&frame).is_err());
        assert!(message_ids_in(&frame).is_empty());
    }
    // Inside a checksummed payload: Record::Lease (variant 2), Record::Ack (4) and
    // Record::Remove (7) with lists of 2^32 - 1 and 2^63 elements; an idempotency record
    // (14) and a schedule deletion (18) whose text claims as many bytes; a message (0) whose
    // body does.
    let huge: [&[u8]; 2] = [
        &[0xff, 0xff, 0xff, 0xff, 0x0f],
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
    ];
    for n in huge {
        let mut payloads = Vec::new();
        for variant in [2u8, 4, 7, 14, 18] {
            let mut p = vec![variant];
            p.extend_from_slice(n);
            p.extend_from_slice(&[1, 2, 3, 4]);
            payloads.push(p);
        }
        // Message: origin 0, id 7, qid 1, body kind 2 (binary), then the body's length.
        let mut p = vec![0u8, 0, 7, 1, 2];
        p.extend_from_slice(n);
        p.extend_from_slice(b"abc");
        payloads.push(p);
        for p in payloads {
            let frame = checksummed(&p);
            assert!(matches!(decode_frame(&frame), Err(FrameError::Decode(_))));
            let _ = message_ids_in(&frame);
        }
    }
    if let (Some(before), Some(after)) = (before, vm_peak_kib()) {
        assert!(
            after.saturating_sub(before) < 1024 * 1024,
            "peak virtual memory grew from {before} KiB to {after} KiB"
        );
    }
}

/// Found by the targets above: records that pass their checksum with numbers at the edge of
/// their range (a message id or lease token of `u64::MAX`, a redrive job id of `u64::MAX`,
/// history taken at `i64::MIN`) overflowed the id, token and time arithmetic of replay,
/// which panicked. They replay now, the counters saturating.
#[test]
fn records_at_the_edges_of_their_numbers_replay() {
    let mut message = MessageRecord {
        trace: None,
        origin: Origin::Send,
        id: u64::MAX,
        qid: 1,
        body: Body::binary(vec![1u8]),
        attributes: Default::default(),
        enqueued_at: 0,
        entered_at: 0,
        visible_at: 0,
        receive_count: 0,
        lease: Some((u64::MAX, i64::MAX)),
        rich: Rich::default(),
        dedup: None,
    };
    let job = sluice_core::RedriveJob::new(
        sluice_core::RedriveId(u64::MAX),
        sluice_core::RedriveSpec {
            source: QueueName::new("jobs.dlq").expect("name"),
            destination: None,
            limit: None,
            rate: None,
            filter: Default::default(),
            reset_receive_count: true,
            dry_run: false,
            guard: None,
        },
        Timestamp(0),
    );
    let records = [
        Record::Message(message.clone()),
        Record::Lease(vec![Lease {
            id: u64::MAX,
            receive_count: 1,
            token: u64::MAX,
            deadline: 5,
        }]),
        Record::Samples {
            at: i64::MIN,
            entries: vec![],
        },
        Record::redrive(job, vec![]),
        Record::Message({
            message.id = 5;
            message
        }),
    ];
    let mut buf = Vec::new();
    for r in &records {
        encode_into(r, &mut buf);
    }
    let mut s = state();
    apply_all(&mut s, &buf);
    assert_eq!((s.next_id, s.next_token), (u64::MAX, u64::MAX));
    finish(s);
}
