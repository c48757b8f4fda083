//! Why a redrive leaves dead letters where they are: counted as its scan passes them, kept
//! with the job, and said in words by the API, `sluice redrive`, the audit and the console.

use serde::{Deserialize, Serialize};

use super::RedriveJob;
use crate::name::QueueName;

/// How many missing destination queues a job names; more are counted, not named.
pub const MISSING_NAMED: usize = 8;

/// What a job's scan passed without moving, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveSkips {
    /// Dead letters its filter left out.
    #[serde(default)]
    pub filtered: u64,
    /// Matching dead letters with nowhere to go: no source queue recorded and no destination
    /// named.
    #[serde(default)]
    pub no_destination: u64,
    /// Matching dead letters whose destination queue does not exist.
    #[serde(default)]
    pub missing_destination: u64,
    /// The missing destination queues, in the order met (at most [`MISSING_NAMED`]).
    #[serde(default)]
    pub missing_queues: Vec<QueueName>,
    /// More missing queues were met than are named.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more_missing: bool,
}

impl RedriveJob {
    /// The scan passed a dead letter its filter leaves out.
    pub fn pass_filtered(&mut self) {
        self.skips.filtered += 1;
    }

    /// The scan passed a matching dead letter that cannot move: `missing` names its
    /// destination when that queue does not exist, `None` when it has none. Counted as
    /// matched and skipped, in a dry run as in a job.
    pub fn skip(&mut self, missing: Option<&QueueName>) {
        self.matched += 1;
        self.skipped += 1;
        match missing {
            None => self.skips.no_destination += 1,
            Some(q) => {
                self.skips.missing_destination += 1;
                let named = &mut self.skips.missing_queues;
                if !named.contains(q) {
                    if named.len() < MISSING_NAMED {
                        named.push(q.clone());
                    } else {
                        self.skips.more_missing = true;
                    }
                }
            }
        }
    }

    /// The most one step of this job may take given `max`: a job stops at its limit; a dry
    /// run counts every match, so that it can say how many lie beyond the limit.
    pub fn step_budget(&self, max: u64) -> u64 {
        if self.spec.dry_run {
            return max;
        }
        self.spec
            .limit
            .map_or(max, |l| max.min(l.saturating_sub(self.moved)))
    }

    /// What a dry run found it would move: matches with a queue to go to, within the limit.
    /// For a job, what it moved.
    pub fn would_move(&self) -> u64 {
        if !self.spec.dry_run {
            return self.moved;
        }
        let movable = self.matched.saturating_sub(self.skipped);
        self.spec.limit.map_or(movable, |l| movable.min(l))
    }

    /// Why the job leaves dead letters where they are, one sentence per reason, each saying
    /// what to do about it; empty when it leaves none.
    pub fn skip_reasons(&self) -> Vec<String> {
        let s = &self.skips;
        let verb = if self.spec.dry_run {
            "would stay"
        } else {
            "stayed"
        };
        let mut out = Vec::new();
        if s.missing_destination > 0 {
            let names: Vec<String> = s
                .missing_queues
                .iter()
                .map(|q| format!("\"{}\"", q.as_str()))
                .collect();
            let (queues, exist) = if names.len() > 1 || s.more_missing {
                ("queues", "exist")
            } else {
                ("queue", "exists")
            };
            let more = if s.more_missing { " and others" } else { "" };
            out.push(format!(
                "{} {verb}: their {queues} {}{more} no longer {exist} (create it again, or name a destination)",
                s.missing_destination,
                names.join(", ")
            ));
        }
        if s.no_destination > 0 {
            out.push(format!(
                "{} {verb}: they record no source queue (name a destination)",
                s.no_destination
            ));
        }
        if s.filtered > 0 {
            out.push(format!("{} {verb}: the filter leaves them out", s.filtered));
        }
        if let Some(limit) = self.spec.limit {
            let movable = self.matched.saturating_sub(self.skipped);
            if self.spec.dry_run && movable > limit {
                out.push(format!(
                    "{} {verb}: beyond the limit of {limit}",
                    movable - limit
                ));
            } else if !self.spec.dry_run
                && self.moved >= limit
                && self.state == super::RedriveState::Completed
            {
                out.push(format!(
                    "it stopped at its limit of {limit}; matching dead letters past it stayed"
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redrive::{RedriveFilter, RedriveId, RedriveSpec};
    use crate::time::Timestamp;

    fn job(dry_run: bool, limit: Option<u64>) -> RedriveJob {
        let spec = RedriveSpec {
            source: QueueName::new("s8.dlq").unwrap(),
            destination: None,
            limit,
            rate: None,
            filter: RedriveFilter::default(),
            reset_receive_count: true,
            dry_run,
            guard: None,
        };
        RedriveJob::new(RedriveId(1), spec, Timestamp(0))
    }

    #[test]
    fn a_dry_run_over_a_deleted_source_says_nothing_would_move_and_why() {
        let mut j = job(true, None);
        let s8 = QueueName::new("s8").unwrap();
        for _ in 0..10 {
            j.skip(Some(&s8));
        }
        assert_eq!((j.matched, j.skipped, j.would_move()), (10, 10, 0));
        assert_eq!(
            j.skip_reasons(),
            vec![
                "10 would stay: their queue \"s8\" no longer exists (create it again, or name a destination)"
            ]
        );
    }

    #[test]
    fn a_limited_filtered_dry_run_counts_past_its_limit() {
        let mut j = job(true, Some(20));
        j.matched = 72;
        for _ in 0..10 {
            j.pass_filtered();
        }
        assert_eq!(
            j.step_budget(1000),
            1000,
            "a dry run is not held by its limit"
        );
        assert_eq!(j.would_move(), 20);
        assert_eq!(
            j.skip_reasons(),
            vec![
                "10 would stay: the filter leaves them out",
                "52 would stay: beyond the limit of 20"
            ]
        );
        let mut real = job(false, Some(20));
        real.moved = 15;
        assert_eq!(real.step_budget(1000), 5);
    }

    #[test]
    fn missing_queues_are_named_once_and_at_most_eight() {
        let mut j = job(false, None);
        for i in 0..20 {
            let q = QueueName::new(format!("q{}", i % 12)).unwrap();
            j.skip(Some(&q));
        }
        j.skip(None);
        assert_eq!(j.skips.missing_queues.len(), MISSING_NAMED);
        assert_eq!(
            (j.skips.missing_destination, j.skips.no_destination),
            (20, 1)
        );
        assert_eq!(j.skipped, 21);
        assert!(
            j.skip_reasons()[0].starts_with("20 stayed: their queues \"q0\", ")
                && j.skip_reasons()[0].contains("\"q7\" and others no longer exist"),
            "{:?}",
            j.skip_reasons()
        );
        let mut eight = job(false, None);
        for i in 0..8 {
            eight.skip(Some(&QueueName::new(format!("q{i}")).unwrap()));
        }
        assert!(
            !eight.skip_reasons()[0].contains("others"),
            "exactly eight are all named"
        );
    }
}
