//! Firing times: a trigger parsed once, then asked which firings fall in a span of time.
//!
//! Cron expressions are read by `croner` in an IANA zone from `chrono-tz`. Across a daylight
//! saving change the zone's wall clock decides: a time that does not exist (the hour skipped
//! in spring) fires at the first moment after the gap, and a time that happens twice (the
//! hour repeated in autumn) fires once, at its first occurrence.

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;

use super::{CatchUp, MAX_CATCH_UP, TriggerSpec};
use crate::error::StoreError;
use crate::time::Timestamp;

/// A firing enqueued at most this long after its time is on time; later, it was missed
/// (which `catch_up` decides about).
pub const ON_TIME_MS: i64 = 10_000;

/// Most firing times walked before jumping to the last day of a span: 55 hours of a
/// per-second expression.
const SCAN_LIMIT: usize = 200_000;

/// A parsed trigger.
#[derive(Debug, Clone)]
pub enum Trigger {
    /// A cron expression in a zone.
    Cron(Box<Cron>, Tz),
    /// A fixed interval from the anchor.
    Every(i64),
}

/// The firings due at some moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Due {
    /// The firings to enqueue now, oldest first.
    pub fire: Vec<Timestamp>,
    /// The latest firing time that has passed, enqueued or not: where a step that only
    /// skips moves the schedule to.
    pub latest: Option<Timestamp>,
    /// Firings skipped under the schedule's `catch_up`.
    pub missed: u64,
}

/// Every IANA time zone name a cron schedule's `timezone` accepts.
pub fn time_zone_names() -> Vec<&'static str> {
    chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect()
}

impl Trigger {
    /// Parses a trigger.
    ///
    /// # Errors
    /// `InvalidArgument` for an expression croner refuses, an unknown zone, or an interval
    /// out of range.
    pub fn parse(spec: &TriggerSpec) -> Result<Trigger, StoreError> {
        match spec {
            TriggerSpec::Cron { expr, timezone } => {
                let cron = Cron::from_str(expr).map_err(|e| {
                    StoreError::invalid(format!(
                        "cron {expr:?} does not parse: {e}; write 5 fields (minute hour \
                         day-of-month month day-of-week), e.g. \"*/5 * * * *\""
                    ))
                })?;
                let tz = Tz::from_str(timezone).map_err(|_| {
                    StoreError::invalid(format!(
                        "timezone {timezone:?} is not an IANA time zone name, e.g. \
                         \"Europe/Berlin\" or \"UTC\""
                    ))
                })?;
                // An expression that never fires (30 February) is refused now, not at run time.
                let probe = Utc
                    .timestamp_millis_opt(0)
                    .single()
                    .map(|t| t.with_timezone(&tz));
                if probe.is_none_or(|t| cron.find_next_occurrence(&t, false).is_err()) {
                    return Err(StoreError::invalid(format!(
                        "cron {expr:?} names no time that exists; check the day and month"
                    )));
                }
                Ok(Trigger::Cron(Box::new(cron), tz))
            }
            TriggerSpec::Every { every_ms } => {
                if !(super::MIN_EVERY_MS..=super::MAX_EVERY_MS).contains(every_ms) {
                    return Err(StoreError::invalid(format!(
                        "every_ms must be {} to {} milliseconds, got {every_ms}",
                        super::MIN_EVERY_MS,
                        super::MAX_EVERY_MS
                    )));
                }
                Ok(Trigger::Every(*every_ms as i64))
            }
        }
    }

    /// The first firing strictly after `t`, for a schedule anchored at `anchor`.
    pub fn next_after(&self, anchor: Timestamp, t: Timestamp) -> Option<Timestamp> {
        match self {
            Trigger::Every(period) => {
                let from = t.as_millis().max(anchor.as_millis());
                let k = (from - anchor.as_millis()) / period + 1;
                Some(Timestamp(anchor.as_millis() + k * period))
            }
            Trigger::Cron(cron, tz) => {
                let from = t.max(anchor);
                let at: DateTime<Tz> = Utc
                    .timestamp_millis_opt(from.as_millis())
                    .single()?
                    .with_timezone(tz);
                let next = cron.find_next_occurrence(&at, false).ok()?;
                Some(Timestamp(next.timestamp_millis()))
            }
        }
    }

    /// The next `n` firings after `t`.
    pub fn upcoming(&self, anchor: Timestamp, t: Timestamp, n: usize) -> Vec<Timestamp> {
        let mut out = Vec::with_capacity(n);
        let mut at = t;
        while out.len() < n {
            match self.next_after(anchor, at) {
                Some(next) => {
                    out.push(next);
                    at = next;
                }
                None => break,
            }
        }
        out
    }

    /// The firings due at `now` for a schedule that has fired through `after` (its anchor
    /// or its last firing), under `catch_up`.
    pub fn due(
        &self,
        anchor: Timestamp,
        after: Timestamp,
        now: Timestamp,
        catch_up: CatchUp,
    ) -> Due {
        let (times, unlisted) = self.between(anchor, after, now);
        let count = times.len() as u64 + unlisted;
        let fire: Vec<Timestamp> = match catch_up {
            CatchUp::None => times
                .last()
                .filter(|t| now.as_millis() - t.as_millis() <= ON_TIME_MS)
                .copied()
                .into_iter()
                .collect(),
            CatchUp::One => times.last().copied().into_iter().collect(),
            CatchUp::All => times[times.len().saturating_sub(MAX_CATCH_UP)..].to_vec(),
        };
        Due {
            missed: count - fire.len() as u64,
            latest: times.last().copied(),
            fire,
        }
    }

    /// The firings in `(after, now]`, the latest [`MAX_CATCH_UP`] at most listed, and how
    /// many older ones were left out.
    fn between(
        &self,
        anchor: Timestamp,
        after: Timestamp,
        now: Timestamp,
    ) -> (Vec<Timestamp>, u64) {
        if let Trigger::Every(period) = self {
            let base = anchor.as_millis();
            let first_k = (after.as_millis().max(base) - base) / period + 1;
            let last_k = (now.as_millis() - base).div_euclid(*period);
            if now.as_millis() < base || last_k < first_k {
                return (Vec::new(), 0);
            }
            let listed_from = first_k.max(last_k - MAX_CATCH_UP as i64 + 1);
            let times = (listed_from..=last_k)
                .map(|k| Timestamp(base + k * period))
                .collect();
            return (times, (listed_from - first_k) as u64);
        }
        let mut ring = std::collections::VecDeque::new();
        let mut unlisted = 0u64;
        let mut at = after;
        let mut jumped = false;
        loop {
            for _ in 0..SCAN_LIMIT {
                match self.next_after(anchor, at) {
                    Some(t) if t <= now => {
                        if ring.len() == MAX_CATCH_UP {
                            ring.pop_front();
                            unlisted += 1;
                        }
                        ring.push_back(t);
                        at = t;
                    }
                    _ => return (ring.into(), unlisted),
                }
            }
            if jumped {
                return (ring.into(), unlisted);
            }
            // A span too long to walk (a per-second expression down for days): skip to the
            // last day, counting what was jumped over as one more missed firing at least.
            jumped = true;
            ring.clear();
            unlisted += MAX_CATCH_UP as u64 + 1;
            at = at.max(Timestamp(now.as_millis() - 24 * 3600 * 1000));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::parse_rfc3339;

    fn at(s: &str) -> Timestamp {
        parse_rfc3339("t", s).expect("an RFC 3339 time")
    }

    fn cron(expr: &str, tz: &str) -> Trigger {
        Trigger::parse(&TriggerSpec::Cron {
            expr: expr.into(),
            timezone: tz.into(),
        })
        .expect("parses")
    }

    fn every(ms: u64) -> Trigger {
        Trigger::parse(&TriggerSpec::Every { every_ms: ms }).expect("parses")
    }

    #[test]
    fn the_spring_gap_fires_once_right_after_it_and_the_autumn_repeat_fires_once() {
        let t = cron("30 2 * * *", "Europe/Berlin");
        let anchor = at("2026-01-01T00:00:00Z");
        // 29 March 2026: 02:00 CET becomes 03:00 CEST; 02:30 does not exist.
        let spring = t.upcoming(anchor, at("2026-03-27T12:00:00Z"), 3);
        assert_eq!(
            spring,
            [
                at("2026-03-28T01:30:00Z"),
                at("2026-03-29T01:00:00Z"),
                at("2026-03-30T00:30:00Z")
            ],
            "02:30 CET, then 03:00 CEST (the gap), then 02:30 CEST"
        );
        // 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
        let autumn = t.upcoming(anchor, at("2026-10-23T12:00:00Z"), 3);
        assert_eq!(
            autumn,
            [
                at("2026-10-24T00:30:00Z"),
                at("2026-10-25T00:30:00Z"),
                at("2026-10-26T01:30:00Z")
            ],
            "the repeated 02:30 fires once, at its first occurrence"
        );
    }

    #[test]
    fn a_zone_moves_the_firings_and_utc_is_the_default_reading() {
        let anchor = at("2026-06-01T00:00:00Z");
        let utc = cron("0 9 * * 1-5", "UTC");
        let ny = cron("0 9 * * 1-5", "America/New_York");
        assert_eq!(
            utc.next_after(anchor, anchor),
            Some(at("2026-06-01T09:00:00Z"))
        );
        assert_eq!(
            ny.next_after(anchor, anchor),
            Some(at("2026-06-01T13:00:00Z"))
        );
    }

    #[test]
    fn intervals_count_from_the_anchor() {
        let t = every(1000);
        let anchor = Timestamp(10_500);
        assert_eq!(t.next_after(anchor, Timestamp(0)), Some(Timestamp(11_500)));
        assert_eq!(
            t.next_after(anchor, Timestamp(11_500)),
            Some(Timestamp(12_500))
        );
        assert_eq!(
            t.upcoming(anchor, Timestamp(12_000), 2),
            [Timestamp(12_500), Timestamp(13_500)]
        );
    }

    #[test]
    fn catch_up_decides_what_an_outage_enqueues() {
        let t = every(1000);
        let anchor = Timestamp(0);
        // Fired through 5 s; the broker comes back at 60.2 s: 55 firings fell due.
        let (after, now) = (Timestamp(5000), Timestamp(60_200));
        let none = t.due(anchor, after, now, CatchUp::None);
        assert_eq!(
            none.fire,
            [Timestamp(60_000)],
            "the latest is still on time"
        );
        assert_eq!(none.missed, 54);
        let minutely = every(60_000);
        let late = Timestamp(60_000 + ON_TIME_MS + 1);
        let none = minutely.due(anchor, anchor, late, CatchUp::None);
        assert_eq!((none.fire.len(), none.missed), (0, 1), "late is missed");
        let one = minutely.due(anchor, anchor, late, CatchUp::One);
        assert_eq!((one.fire, one.missed), (vec![Timestamp(60_000)], 0));
        let all = t.due(anchor, after, now, CatchUp::All);
        assert_eq!((all.fire.len(), all.missed), (55, 0));
        assert_eq!(all.fire[0], Timestamp(6000));
        // A long outage: the latest thousand, the rest missed.
        let long = t.due(anchor, after, Timestamp(5000 + 5000 * 1000), CatchUp::All);
        assert_eq!((long.fire.len(), long.missed), (MAX_CATCH_UP, 4000));
        assert_eq!(long.fire.last(), Some(&Timestamp(5000 + 5000 * 1000)));
        // Nothing due yet.
        assert_eq!(
            t.due(anchor, after, Timestamp(5999), CatchUp::All),
            Due::default()
        );
    }

    #[test]
    fn a_cron_outage_lists_the_latest_thousand_and_counts_the_rest() {
        let t = cron("* * * * *", "UTC");
        let anchor = at("2026-01-01T00:00:00Z");
        let now = at("2026-01-03T00:00:30Z");
        let due = t.due(anchor, anchor, now, CatchUp::All);
        assert_eq!(due.fire.len(), MAX_CATCH_UP);
        assert_eq!(due.missed, 2 * 24 * 60 - MAX_CATCH_UP as u64);
        assert_eq!(due.fire.last(), Some(&at("2026-01-03T00:00:00Z")));
        // A per-second expression down for a week jumps to its last day.
        let fast = cron("* * * * * *", "UTC");
        let due = fast.due(anchor, anchor, at("2026-01-08T00:00:00Z"), CatchUp::One);
        assert_eq!(due.fire, [at("2026-01-08T00:00:00Z")]);
        assert!(due.missed > MAX_CATCH_UP as u64);
    }

    #[test]
    fn bad_triggers_are_refused_with_what_to_write() {
        let err = |spec| Trigger::parse(&spec).expect_err("refused").to_string();
        let e = err(TriggerSpec::Cron {
            expr: "every day".into(),
            timezone: "UTC".into(),
        });
        assert!(e.contains("*/5 * * * *"), "{e}");
        let e = err(TriggerSpec::Cron {
            expr: "0 9 * * *".into(),
            timezone: "Mars/Olympus".into(),
        });
        assert!(e.contains("IANA"), "{e}");
        let e = err(TriggerSpec::Cron {
            expr: "0 0 30 2 *".into(),
            timezone: "UTC".into(),
        });
        assert!(e.contains("no time"), "{e}");
        let e = err(TriggerSpec::Every { every_ms: 10 });
        assert!(e.contains("every_ms"), "{e}");
    }
}
