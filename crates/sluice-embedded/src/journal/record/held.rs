//! Who held a delivery and since when, in the log.
//!
//! Attempts were written with four fields (time, outcome, error, consumer) before lease
//! starts were kept, and postcard's fixed layout cannot grow a struct in place. So attempts
//! keep that form inside every record ([`attempts_v1`]), and a record whose attempts know
//! their lease starts, or that ends or carries a lease, is written wrapped in a
//! [`Record::Held`] that adds them: older records read as they always did, newer ones carry
//! the rest beside them.

use serde::ser::SerializeStructVariant;
use serde::{Deserialize, Serialize};
use sluice_core::Timestamp;
use sluice_core::message::{Attempt, AttemptOutcome, Holder};

use super::{Completion, Record};

/// Variant index of [`Record::Held`] (checked by a test).
pub(crate) const VARIANT_HELD: u32 = 27;

/// What a record adds about the deliveries of message `id`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Hold {
    pub id: u64,
    /// The lease start of each attempt the record keeps for `id`, oldest first (empty when
    /// none is known).
    pub starts: Vec<Option<i64>>,
    /// The lease the record ends (a completion: the acknowledged delivery) or carries (a
    /// compaction copy of a leased message): when it began and the receiver's name.
    pub lease: Option<(i64, Option<String>)>,
}

impl Hold {
    /// The holder of a lease this record ends or carries.
    pub(crate) fn holder(&self) -> Option<Holder> {
        self.lease.as_ref().map(|(at, consumer)| Holder {
            started_at: Some(Timestamp(*at)),
            consumer: consumer.clone(),
        })
    }

    /// A hold of the lease `holder` of message `id`, when one is known.
    pub(crate) fn of_lease(id: u64, holder: Option<&Holder>) -> Option<Hold> {
        let h = holder?;
        Some(Hold {
            id,
            starts: Vec::new(),
            lease: Some((h.started_at?.as_millis(), h.consumer.clone())),
        })
    }
}

/// Serde form of an attempt list inside a record: the four fields attempts had before lease
/// starts were kept. The starts travel in the [`Hold`]s of a [`Record::Held`].
pub(crate) mod attempts_v1 {
    use super::*;

    #[derive(Serialize)]
    struct Out<'a> {
        at: Timestamp,
        outcome: AttemptOutcome,
        error: &'a Option<String>,
        consumer: &'a Option<String>,
    }

    #[derive(Deserialize)]
    struct In {
        at: Timestamp,
        outcome: AttemptOutcome,
        error: Option<String>,
        consumer: Option<String>,
    }

    pub(crate) fn serialize<S: serde::Serializer>(v: &[Attempt], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|a| Out {
            at: a.at,
            outcome: a.outcome,
            error: &a.error,
            consumer: &a.consumer,
        }))
    }

    pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<Attempt>, D::Error> {
        let v = Vec::<In>::deserialize(d)?;
        Ok(v.into_iter()
            .map(|a| Attempt {
                at: a.at,
                outcome: a.outcome,
                error: a.error,
                consumer: a.consumer,
                started_at: None,
            })
            .collect())
    }
}

impl Record {
    /// Every attempt list the record keeps, with the message it belongs to.
    fn attempt_lists(&self) -> Vec<(u64, &Vec<Attempt>)> {
        let mut out = Vec::new();
        fn completion(c: &Completion) -> (u64, &Vec<Attempt>) {
            (c.acked.id, &c.attempts)
        }
        match self {
            Record::Message(m)
            | Record::Firing { message: m, .. }
            | Record::Grouped { message: m, .. }
            | Record::Tagged { message: m, .. }
            | Record::Traced { message: m, .. } => {
                out.push((m.id, &m.rich.attempts));
            }
            Record::Update(u) | Record::Regrouped { update: u, .. } => {
                out.push((u.id, &u.rich.attempts))
            }
            Record::Redrive { moves, .. }
            | Record::RedriveV1 { moves, .. }
            | Record::RedriveGrouped { moves, .. } => {
                out.extend(moves.iter().map(|u| (u.id, &u.rich.attempts)));
            }
            Record::Finished(c) => out.push(completion(c)),
            Record::KeptFinished { finished } => out.extend(finished.iter().map(completion)),
            Record::Timed { record, .. } | Record::Held { record, .. } => {
                out.extend(record.attempt_lists());
            }
            _ => {}
        }
        out
    }

    /// Every attempt list the record keeps, to be changed, with the message it belongs to.
    fn attempt_lists_mut(&mut self) -> Vec<(u64, &mut Vec<Attempt>)> {
        let mut out = Vec::new();
        match self {
            Record::Message(m)
            | Record::Firing { message: m, .. }
            | Record::Grouped { message: m, .. }
            | Record::Tagged { message: m, .. }
            | Record::Traced { message: m, .. } => {
                out.push((m.id, &mut m.rich.attempts));
            }
            Record::Update(u) | Record::Regrouped { update: u, .. } => {
                out.push((u.id, &mut u.rich.attempts));
            }
            Record::Redrive { moves, .. }
            | Record::RedriveV1 { moves, .. }
            | Record::RedriveGrouped { moves, .. } => {
                out.extend(moves.iter_mut().map(|u| (u.id, &mut u.rich.attempts)));
            }
            Record::Finished(c) => out.push((c.acked.id, &mut c.attempts)),
            Record::KeptFinished { finished } => {
                out.extend(finished.iter_mut().map(|c| (c.acked.id, &mut c.attempts)));
            }
            Record::Timed { record, .. } | Record::Held { record, .. } => {
                out.extend(record.attempt_lists_mut());
            }
            _ => {}
        }
        out
    }

    /// `record` wrapped with `holds` (leases it ends or carries), or as it is without any.
    pub(crate) fn held(record: Record, holds: Vec<Hold>) -> Record {
        if holds.is_empty() {
            return record;
        }
        Record::Held {
            record: Box::new(record),
            holds,
        }
    }
}

/// What `rec` must be written with: its leases and its attempts' starts, merged per message;
/// empty when it needs no [`Record::Held`] (no attempt knows its start, no lease is held).
fn holds_of(rec: &Record) -> Vec<Hold> {
    let mut holds: Vec<Hold> = match rec {
        Record::Held { holds, .. } => holds
            .iter()
            .map(|h| Hold {
                starts: Vec::new(),
                ..h.clone()
            })
            .collect(),
        _ => Vec::new(),
    };
    let lists = rec.attempt_lists();
    if lists
        .iter()
        .all(|(_, attempts)| attempts.iter().all(|a| a.started_at.is_none()))
    {
        return holds;
    }
    // Every list gets a hold, in order, so [`unwrap_read`] pairs them back the same way.
    let mut used = vec![false; holds.len()];
    for (id, attempts) in lists {
        let starts = attempts
            .iter()
            .map(|a| a.started_at.map(Timestamp::as_millis))
            .collect();
        match (0..used.len()).find(|&i| !used[i] && holds[i].id == id) {
            Some(i) => {
                used[i] = true;
                holds[i].starts = starts;
            }
            None => holds.push(Hold {
                id,
                starts,
                lease: None,
            }),
        }
    }
    holds
}

/// A record as it is written: wrapped in [`Record::Held`] when it has anything to hold.
pub(crate) enum Written<'a> {
    Plain(&'a Record),
    Held {
        record: &'a Record,
        holds: Vec<Hold>,
    },
}

impl<'a> Written<'a> {
    pub(crate) fn of(rec: &'a Record) -> Self {
        let holds = holds_of(rec);
        if holds.is_empty() {
            return Written::Plain(rec);
        }
        let record = match rec {
            Record::Held { record, .. } => record,
            other => other,
        };
        Written::Held { record, holds }
    }
}

impl Serialize for Written<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Written::Plain(rec) => rec.serialize(s),
            // The same bytes as `Record::Held { record, holds }`, without building one.
            Written::Held { record, holds } => {
                let mut v = s.serialize_struct_variant("Record", VARIANT_HELD, "Held", 2)?;
                v.serialize_field("record", record)?;
                v.serialize_field("holds", holds)?;
                v.end()
            }
        }
    }
}

/// A record as read: the starts of a [`Record::Held`] put back into its attempts, and the
/// wrapper kept only when it holds leases.
pub(crate) fn unwrap_read(rec: Record) -> Record {
    let Record::Held { mut record, holds } = rec else {
        return rec;
    };
    // Holds pair with attempt lists in order, as [`holds_of`] made them: a message's first
    // list takes its first hold.
    let mut used = vec![false; holds.len()];
    for (id, attempts) in record.attempt_lists_mut() {
        if let Some(i) = (0..holds.len()).find(|&i| !used[i] && holds[i].id == id) {
            used[i] = true;
            for (a, start) in attempts.iter_mut().zip(&holds[i].starts) {
                a.started_at = start.map(Timestamp);
            }
        }
    }
    let leases: Vec<Hold> = holds
        .into_iter()
        .filter(|h| h.lease.is_some())
        .map(|h| Hold {
            starts: Vec::new(),
            ..h
        })
        .collect();
    Record::held(*record, leases)
}

#[cfg(test)]
mod tests {
    use super::super::{
        Acked, Lease, MessageRecord, Origin, Rich, UpdateEvent, UpdateRecord, decode_frame,
        encode_into, message_ids_in,
    };
    use super::*;
    use sluice_core::Body;

    fn attempt(at: i64, started_at: Option<i64>) -> Attempt {
        Attempt {
            at: Timestamp(at),
            outcome: AttemptOutcome::Nacked,
            error: Some("e".into()),
            consumer: Some("w".into()),
            started_at: started_at.map(Timestamp),
        }
    }

    fn update(attempts: Vec<Attempt>) -> Record {
        Record::Update(UpdateRecord {
            event: UpdateEvent::Nack,
            id: 9,
            qid: 1,
            visible_at: 5,
            entered_at: 1,
            receive_count: 2,
            rich: Rich {
                attempts,
                ..Rich::default()
            },
        })
    }

    fn round_trip(rec: &Record) -> Record {
        let mut buf = Vec::new();
        let n = encode_into(rec, &mut buf);
        let (back, len) = decode_frame(&buf).expect("decodes");
        assert_eq!(len, n);
        back
    }

    #[test]
    fn the_wrapper_is_the_variant_it_claims() {
        let mut buf = Vec::new();
        encode_into(&update(vec![attempt(3, Some(2))]), &mut buf);
        let (variant, _) = postcard::take_from_bytes::<u32>(&buf[super::super::HEADER..]).unwrap();
        assert_eq!(variant, VARIANT_HELD);
    }

    #[test]
    fn attempts_read_back_with_their_starts() {
        let rec = update(vec![
            attempt(3, Some(2)),
            attempt(6, None),
            attempt(8, Some(7)),
        ]);
        assert_eq!(
            round_trip(&rec),
            rec,
            "starts travel beside the four-field attempts"
        );
    }

    #[test]
    fn a_record_without_starts_is_written_as_before() {
        let rec = update(vec![attempt(3, None)]);
        let plain = postcard::to_allocvec(&rec).unwrap();
        let mut buf = Vec::new();
        encode_into(&rec, &mut buf);
        assert_eq!(&buf[super::super::HEADER..], &plain[..]);
        assert_eq!(round_trip(&rec), rec);
    }

    /// The bytes an attempt list had before lease starts were kept: four fields each.
    #[test]
    fn attempts_written_by_earlier_versions_read_without_starts() {
        #[derive(Serialize)]
        struct OldAttempt {
            at: Timestamp,
            outcome: AttemptOutcome,
            error: Option<String>,
            consumer: Option<String>,
        }
        let old = vec![OldAttempt {
            at: Timestamp(4),
            outcome: AttemptOutcome::Rejected,
            error: None,
            consumer: Some("w".into()),
        }];
        let bytes = postcard::to_allocvec(&old).unwrap();
        #[derive(Deserialize)]
        struct Wrap(#[serde(with = "attempts_v1")] Vec<Attempt>);
        let Wrap(read) = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(
            (read[0].at, read[0].consumer.as_deref(), read[0].started_at),
            (Timestamp(4), Some("w"), None)
        );
    }

    #[test]
    fn a_completion_keeps_its_lease_and_a_leased_copy_its_holder() {
        let acked = Acked {
            id: 9,
            qid: 1,
            receive_count: 1,
            at: 10,
            keep_until: 100,
            cancelled: false,
        };
        let hold = Hold {
            id: 9,
            starts: Vec::new(),
            lease: Some((4, Some("w".into()))),
        };
        let rec = Record::held(Record::Ack(vec![acked]), vec![hold.clone()]);
        assert_eq!(round_trip(&rec), rec);
        assert_eq!(
            hold.holder(),
            Some(Holder {
                started_at: Some(Timestamp(4)),
                consumer: Some("w".into())
            })
        );
        // A compaction copy of a leased message with failed attempts: both kinds at once.
        let copy = Record::Message(MessageRecord {
            trace: None,
            origin: Origin::Relocate,
            id: 9,
            qid: 1,
            body: Body::text("b"),
            attributes: Default::default(),
            enqueued_at: 1,
            entered_at: 1,
            visible_at: 10,
            receive_count: 2,
            lease: Some((3, 20)),
            rich: Rich {
                attempts: vec![attempt(3, Some(2))],
                ..Rich::default()
            },
            dedup: None,
        });
        let rec = Record::held(copy, vec![hold]);
        let back = round_trip(&rec);
        assert_eq!(back, rec);
        assert!(back.clone().into_base().is_some(), "still a base record");
        let mut buf = Vec::new();
        encode_into(&rec, &mut buf);
        assert_eq!(
            message_ids_in(&buf),
            vec![9],
            "compaction finds the wrapped message"
        );
        let leased = Record::Leased {
            at: 3,
            consumer: None,
            leases: vec![Lease {
                id: 9,
                receive_count: 1,
                token: 2,
                deadline: 30,
            }],
        };
        assert_eq!(round_trip(&leased), leased);
    }
}
