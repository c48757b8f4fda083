//! Round trips of log records, and the variant indexes the compaction scan reads.
use super::*;

fn sample() -> Record {
    Record::Message(MessageRecord {
        trace: None,
        origin: Origin::Send,
        id: 7,
        qid: 1,
        body: Body::binary(vec![0u8, 255, 10]),
        attributes: [("k".to_string(), "v".to_string())].into(),
        enqueued_at: 1,
        entered_at: 1,
        visible_at: 2,
        receive_count: 0,
        lease: None,
        rich: Rich::default(),
        dedup: Some(("d".into(), 9)),
    })
}

fn trace() -> TraceContext {
    TraceContext::new(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        Some("congo=t61rcWkgMzE".into()),
    )
    .unwrap()
}

/// A message without a trace context keeps its older record; one with a context is written
/// in a [`Record::Traced`], whatever else it carries.
#[test]
fn only_a_traced_message_takes_the_traced_record() {
    let Record::Message(m) = sample() else {
        unreachable!()
    };
    assert!(matches!(
        Record::base(m.clone(), None, None, None),
        Record::Message(_)
    ));
    let traced = MessageRecord {
        trace: Some(trace()),
        ..m
    };
    let Record::Traced { tag, trace: t, .. } = Record::base(traced, None, None, Some(3)) else {
        panic!("not traced")
    };
    assert_eq!((tag.key, tag.priority), (None, Some(3)));
    assert_eq!(t.traceparent, trace().traceparent());
}

#[test]
fn frames_round_trip() {
    let mut buf = Vec::new();
    let n1 = encode_into(&sample(), &mut buf);
    let n2 = encode_into(&Record::Purge { qid: 3 }, &mut buf);
    assert_eq!(buf.len(), n1 + n2);
    let (r1, l1) = decode_frame(&buf).unwrap();
    assert_eq!((r1, l1), (sample(), n1));
    let (r2, _) = decode_frame(&buf[n1..]).unwrap();
    assert_eq!(r2, Record::Purge { qid: 3 });
}

#[test]
fn message_ids_are_found_without_decoding_bodies() {
    let update = UpdateRecord {
        event: UpdateEvent::Rejected { from: 4 },
        id: 11,
        qid: 2,
        visible_at: 1,
        entered_at: 1,
        receive_count: 3,
        rich: Rich::default(),
    };
    let old_job = JobV1 {
        id: sluice_core::RedriveId(1),
        spec: legacy::SpecV1 {
            source: sluice_core::QueueName::new("a.dlq").unwrap(),
            destination: None,
            limit: None,
            rate_per_second: Some(5),
            filter: legacy::FilterV1 {
                error_contains: Some("429".into()),
                attributes: Attributes::new(),
                dead_lettered_before: None,
                dead_lettered_after: None,
            },
            reset_receive_count: true,
            dry_run: false,
        },
        state: legacy::StateV1::Running,
        matched: 3,
        moved: 2,
        skipped: 0,
        blocked: None,
        created_at: sluice_core::Timestamp(0),
        updated_at: sluice_core::Timestamp(0),
        finished_at: None,
        cursor: Some((5, 6)),
    };
    let job = sluice_core::RedriveJob::from(old_job.clone());
    assert_eq!(
        job.spec.rate,
        Some(sluice_core::RateLimit::per_second(5)),
        "an old job keeps its rate"
    );
    assert_eq!((job.moved, job.cursor), (2, Some((5, 6))));
    let mut buf = Vec::new();
    encode_into(&sample(), &mut buf);
    encode_into(&Record::Purge { qid: 3 }, &mut buf);
    encode_into(&Record::Update(update.clone()), &mut buf);
    encode_into(
        &Record::redrive(
            job.clone(),
            vec![UpdateRecord {
                id: 12,
                ..update.clone()
            }],
        ),
        &mut buf,
    );
    encode_into(
        &Record::RedriveV1 {
            job: old_job.clone(),
            moves: vec![UpdateRecord { id: 13, ..update }],
        },
        &mut buf,
    );
    encode_into(&Record::Cancel { id: 99 }, &mut buf);
    assert_eq!(message_ids_in(&buf), vec![7, 11, 12, 13]);
    // Both forms read back whole.
    let mut off = 0;
    let mut jobs = Vec::new();
    while off < buf.len() {
        let (rec, len) = decode_frame(&buf[off..]).unwrap();
        match rec {
            Record::Redrive { job, .. } => jobs.push(job.0),
            Record::RedriveV1 { job, .. } => jobs.push(job.into()),
            _ => {}
        }
        off += len;
    }
    assert_eq!(jobs, vec![job.clone(), job]);
}

/// A schedule for the record tests.
pub(crate) fn schedule() -> sluice_core::schedule::Schedule {
    use sluice_core::schedule::{CatchUp, Schedule, ScheduleName, ScheduleSpec, TriggerSpec};
    Schedule {
        name: ScheduleName::new("nightly").unwrap(),
        spec: ScheduleSpec {
            trigger: TriggerSpec::Every { every_ms: 60_000 },
            queue: sluice_core::QueueName::new("jobs").unwrap(),
            body: Body::binary(vec![1u8, 2, 255]),
            attributes: [("k".to_string(), "v".to_string())].into(),
            key: None,
            priority: None,
            catch_up: CatchUp::One,
            paused: false,
        },
        created_at: sluice_core::Timestamp(5),
        updated_at: sluice_core::Timestamp(6),
        anchor: sluice_core::Timestamp(5),
        last_fired: Some(sluice_core::Timestamp(60_005)),
        fired: 1,
        missed: 2,
    }
}

#[test]
fn a_firing_is_a_message_base_record_and_reads_back_whole() {
    let Record::Message(message) = sample() else {
        unreachable!()
    };
    let firing = Record::Firing {
        message: MessageRecord { id: 21, ..message },
        schedule: JsonSchedule(schedule()),
    };
    let mut buf = Vec::new();
    encode_into(&firing, &mut buf);
    encode_into(
        &Record::Schedule {
            schedule: JsonSchedule(schedule()),
        },
        &mut buf,
    );
    assert_eq!(message_ids_in(&buf), vec![21]);
    let (back, len) = decode_frame(&buf).unwrap();
    assert_eq!(back, firing);
    let (Record::Schedule { schedule: s }, _) = decode_frame(&buf[len..]).unwrap() else {
        panic!("not a schedule record");
    };
    assert_eq!(s.0, schedule());
}

#[test]
fn grouped_and_tagged_records_read_back_and_name_their_messages() {
    let Record::Message(message) = sample() else {
        unreachable!()
    };
    let update = UpdateRecord {
        event: UpdateEvent::Rejected { from: 4 },
        id: 31,
        qid: 2,
        visible_at: 1,
        entered_at: 1,
        receive_count: 3,
        rich: Rich::default(),
    };
    let job = sluice_core::RedriveJob::new(
        sluice_core::RedriveId(1),
        sluice_core::RedriveSpec {
            source: sluice_core::QueueName::new("a.dlq").unwrap(),
            destination: None,
            limit: None,
            rate: None,
            filter: Default::default(),
            reset_receive_count: true,
            dry_run: false,
            guard: None,
        },
        sluice_core::Timestamp(0),
    );
    let records = [
        Record::Grouped {
            message: MessageRecord {
                id: 30,
                ..message.clone()
            },
            group: GroupTag {
                name: "g-é".into(),
                order: 30,
            },
        },
        Record::Regrouped {
            update: update.clone(),
            order: 99,
        },
        Record::Tagged {
            message: MessageRecord {
                id: 33,
                ..message.clone()
            },
            tag: TagRecord {
                group: Some(GroupTag {
                    name: "g".into(),
                    order: 33,
                }),
                key: Some("tenant-ü".into()),
                priority: Some(9),
            },
        },
        Record::redrive_grouped(
            job.clone(),
            vec![UpdateRecord { id: 32, ..update }],
            vec![(32, 100)],
        ),
        Record::base(
            MessageRecord {
                id: 34,
                trace: Some(trace()),
                ..message.clone()
            },
            None,
            Some("k"),
            None,
        ),
    ];
    let mut buf = Vec::new();
    for r in &records {
        encode_into(r, &mut buf);
    }
    assert_eq!(message_ids_in(&buf), vec![30, 31, 33, 32, 34]);
    let mut off = 0;
    for r in &records {
        let (back, len) = decode_frame(&buf[off..]).unwrap();
        assert_eq!(&back, r);
        off += len;
    }
    // The trace context travels in the record around the message and comes back with it.
    let traced = records.last().unwrap().clone();
    assert!(matches!(traced, Record::Traced { .. }));
    let base = traced.into_base().unwrap();
    assert_eq!((base.id, base.trace), (34, Some(trace())));
    assert!(matches!(
        Record::redrive_grouped(job, vec![], vec![]),
        Record::Redrive { .. }
    ));
}

#[test]
fn every_single_bit_flip_is_detected() {
    let mut buf = Vec::new();
    encode_into(&sample(), &mut buf);
    for i in 0..buf.len() * 8 {
        let mut b = buf.clone();
        b[i / 8] ^= 1 << (i % 8);
        assert!(decode_frame(&b).is_err(), "flip {i} undetected");
    }
}

#[test]
fn every_truncation_is_detected() {
    let mut buf = Vec::new();
    encode_into(&sample(), &mut buf);
    for cut in 0..buf.len() {
        assert!(decode_frame(&buf[..cut]).is_err());
    }
}
