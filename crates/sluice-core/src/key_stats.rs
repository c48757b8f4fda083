//! What each key of a queue holds: the keys listing (`GET /v1/queues/{q}/keys`), its order and
//! its pages. Engines count; the order, the paging and the delivery-rate estimate are written
//! here once, so every engine answers the same listing for the same messages.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::fair::MessageKey;
use crate::time::Timestamp;

/// In the `breaker` order, a key's breaker state ranks above its backlog: open keys first.
const BREAKER_RANK_SHIFT: u32 = 48;

/// The most keys one page lists.
pub const MAX_KEYS_PAGE: u32 = 1000;

/// What a keys listing is ordered by, largest first (ties by key, the implicit key first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyOrder {
    /// Messages waiting (visible and delayed).
    #[default]
    Backlog,
    /// Deliveries in flight.
    InFlight,
    /// The age of the key's longest-waiting visible message; keys with none last.
    Oldest,
    /// Keys whose own breaker is open first, then half-open ones, each by backlog (on a queue
    /// with a per-key breaker; elsewhere as `backlog`).
    Breaker,
}

impl KeyOrder {
    fn tag(self) -> char {
        match self {
            KeyOrder::Backlog => 'b',
            KeyOrder::InFlight => 'f',
            KeyOrder::Oldest => 'o',
            KeyOrder::Breaker => 'k',
        }
    }
}

/// One page of a keys listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeysRequest {
    /// The order.
    pub order: KeyOrder,
    /// 1 – [`MAX_KEYS_PAGE`].
    pub limit: u32,
    /// Where the previous page ended.
    pub after: Option<KeyCursor>,
}

impl Default for KeysRequest {
    /// The first 100 keys by backlog.
    fn default() -> Self {
        KeysRequest {
            order: KeyOrder::Backlog,
            limit: 100,
            after: None,
        }
    }
}

/// What one key holds in a queue. The implicit key (messages sent without one) is `key: None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyStats {
    /// The key; `None` for the implicit key.
    pub key: Option<MessageKey>,
    /// Visible messages (deliverable now, or due and waiting for their FIFO group).
    pub visible: u64,
    /// Messages waiting for a delay or backoff.
    pub delayed: u64,
    /// Deliveries in flight.
    pub in_flight: u64,
    /// When its longest-waiting visible message became visible.
    pub oldest_visible_at: Option<Timestamp>,
    /// Deliveries of the key in the last minute, estimated from per-minute counts (see
    /// [`MinuteTally`]); `None` where the engine does not count the key's deliveries: on a
    /// queue that has not delivered by key since the engine started counting it.
    pub delivered_1m: Option<u64>,
    /// The key's own adaptive rate and breaker, on a queue that governs keys one by one.
    pub flow: Option<crate::adaptive::KeyFlowStats>,
}

impl KeyStats {
    /// Messages waiting: visible and delayed.
    pub fn backlog(&self) -> u64 {
        self.visible + self.delayed
    }

    /// Where the key sorts in `order`: larger sorts first.
    fn measure(&self, order: KeyOrder) -> i64 {
        match order {
            KeyOrder::Backlog => i64::try_from(self.backlog()).unwrap_or(i64::MAX),
            KeyOrder::InFlight => i64::try_from(self.in_flight).unwrap_or(i64::MAX),
            // Older first; a key with nothing visible after every key with something.
            KeyOrder::Oldest => self.oldest_visible_at.map_or(i64::MIN, |t| -t.0),
            KeyOrder::Breaker => {
                use crate::adaptive::BreakerState;
                let rank = match self.flow.as_ref().and_then(|f| f.breaker) {
                    Some(BreakerState::Open) => 2,
                    Some(BreakerState::HalfOpen) => 1,
                    _ => 0,
                };
                let backlog = i64::try_from(self.backlog()).unwrap_or(i64::MAX);
                (rank << BREAKER_RANK_SHIFT) | backlog.min((1 << BREAKER_RANK_SHIFT) - 1)
            }
        }
    }

    fn cursor(&self, order: KeyOrder) -> KeyCursor {
        KeyCursor {
            order,
            measure: self.measure(order),
            key: self.key.as_ref().map(|k| k.as_str().to_owned()),
        }
    }
}

/// A page of a keys listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeysPage {
    /// The keys, in the request's order.
    pub keys: Vec<KeyStats>,
    /// Where the next page starts; `None` on the last.
    pub next: Option<KeyCursor>,
    /// Keys with messages waiting or in flight, the implicit key not counted.
    pub active_keys: u64,
}

/// Where a keys page ended: the last key's place in the order. Handed out as an opaque string.
/// Each page is read anew, so a key whose numbers changed between two pages may be listed twice
/// or not at all, as in any listing of numbers that move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyCursor {
    order: KeyOrder,
    measure: i64,
    key: Option<String>,
}

impl KeyCursor {
    /// Whether a key at (`measure`, `key`) comes after this cursor.
    fn precedes(&self, measure: i64, key: Option<&str>) -> bool {
        match measure.cmp(&self.measure) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => key > self.key.as_deref(),
        }
    }
}

impl fmt::Display for KeyCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.", self.order.tag(), self.measure)?;
        match &self.key {
            None => f.write_str("-"),
            Some(k) => k.bytes().try_for_each(|b| write!(f, "{b:02x}")),
        }
    }
}

impl std::str::FromStr for KeyCursor {
    type Err = StoreError;
    fn from_str(c: &str) -> Result<Self, StoreError> {
        let bad = || StoreError::bad_cursor("");
        let mut parts = c.splitn(3, '.');
        let (Some(order), Some(measure), Some(key)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let order = match order {
            "b" => KeyOrder::Backlog,
            "f" => KeyOrder::InFlight,
            "o" => KeyOrder::Oldest,
            "k" => KeyOrder::Breaker,
            _ => return Err(bad()),
        };
        let key = match key {
            "-" => None,
            hex if hex.len() % 2 == 0 => {
                let bytes = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("zz"), 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map_err(|_| bad())?;
                // A key is valid UTF-8; bytes that are not name no key, and sort where they sort.
                Some(String::from_utf8_lossy(&bytes).into_owned())
            }
            _ => return Err(bad()),
        };
        Ok(KeyCursor {
            order,
            measure: measure.parse().map_err(|_| bad())?,
            key,
        })
    }
}

/// Checks a keys request's limit.
///
/// # Errors
/// `InvalidArgument`, saying what to send instead.
pub fn validate(req: &KeysRequest) -> Result<(), StoreError> {
    if req.limit == 0 || req.limit > MAX_KEYS_PAGE {
        return Err(StoreError::invalid(format!(
            "limit must be 1 to {MAX_KEYS_PAGE}, got {}",
            req.limit
        )));
    }
    Ok(())
}

/// The page `req` asks for of every key's numbers in `all`, which holds each key with
/// messages once (keys with nothing waiting or in flight are dropped here). A cursor of a
/// listing in another order says nothing about this one: the page starts at the first key.
/// Costs O(keys · log limit).
pub fn page(all: Vec<KeyStats>, req: &KeysRequest) -> KeysPage {
    let after = req.after.as_ref().filter(|c| c.order == req.order);
    let mut active_keys = 0;
    let want = req.limit as usize;
    // The `want + 1` first after the cursor, in order, found with a bounded heap.
    let mut heap: std::collections::BinaryHeap<Ranked> = std::collections::BinaryHeap::new();
    for k in all {
        if k.backlog() + k.in_flight == 0 {
            continue;
        }
        if k.key.is_some() {
            active_keys += 1;
        }
        let measure = k.measure(req.order);
        if let Some(c) = after
            && !c.precedes(measure, k.key.as_ref().map(MessageKey::as_str))
        {
            continue;
        }
        heap.push(Ranked { measure, stats: k });
        if heap.len() > want + 1 {
            heap.pop();
        }
    }
    let mut keys: Vec<KeyStats> = heap
        .into_sorted_vec()
        .into_iter()
        .map(|r| r.stats)
        .collect();
    let more = keys.len() > want;
    keys.truncate(want);
    let next = more
        .then(|| keys.last().map(|k| k.cursor(req.order)))
        .flatten();
    KeysPage {
        keys,
        next,
        active_keys,
    }
}

/// A key in a listing's order: `Ord` puts the key listed first lowest.
struct Ranked {
    measure: i64,
    stats: KeyStats,
}

impl Ranked {
    fn sort_key(&self) -> (std::cmp::Reverse<i64>, Option<&str>) {
        (
            std::cmp::Reverse(self.measure),
            self.stats.key.as_ref().map(MessageKey::as_str),
        )
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.sort_key() == other.sort_key()
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.sort_key().cmp(&other.sort_key())
    }
}

/// Deliveries counted per whole minute (UTC): the current minute's and the previous one's.
/// The last minute's deliveries are estimated as the current count plus the previous one's
/// share of the last 60 s, so the estimate lies between the current minute's count and the
/// two minutes' together. Two counters per key, whatever its delivery rate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MinuteTally {
    /// The minute (ms since the epoch / 60,000) `current` counts.
    pub minute: i64,
    /// Deliveries in `minute`.
    pub current: u64,
    /// Deliveries in the minute before.
    pub previous: u64,
}

/// A minute, in ms.
const MINUTE_MS: i64 = 60_000;

impl MinuteTally {
    /// Counts `n` deliveries at `now` (ms).
    pub fn count(&mut self, now: i64, n: u64) {
        self.roll(now);
        self.current += n;
    }

    fn roll(&mut self, now: i64) {
        let minute = now.div_euclid(MINUTE_MS);
        if minute == self.minute {
            return;
        }
        self.previous = if minute == self.minute + 1 {
            self.current
        } else {
            0
        };
        self.current = 0;
        self.minute = minute;
    }

    /// The estimate of deliveries in the 60 s before `now` (ms).
    pub fn last_minute(&self, now: i64) -> u64 {
        let mut t = *self;
        t.roll(now);
        let into = u64::try_from(now.rem_euclid(MINUTE_MS)).unwrap_or(0);
        let rest = u64::try_from(MINUTE_MS).unwrap_or(60_000) - into;
        t.current + t.previous * rest / 60_000
    }

    /// The estimate from counts kept elsewhere (a database): `current` deliveries in `now`'s
    /// minute and `previous` in the one before.
    pub fn estimate(now: i64, current: u64, previous: u64) -> u64 {
        MinuteTally {
            minute: now.div_euclid(MINUTE_MS),
            current,
            previous,
        }
        .last_minute(now)
    }

    /// The minute `now` (ms) falls in.
    pub fn minute_of(now: i64) -> i64 {
        now.div_euclid(MINUTE_MS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(key: Option<&str>, visible: u64, in_flight: u64, oldest: Option<i64>) -> KeyStats {
        KeyStats {
            key: key.map(|k| MessageKey::new(k).unwrap()),
            visible,
            delayed: 0,
            in_flight,
            oldest_visible_at: oldest.map(Timestamp),
            delivered_1m: None,
            flow: None,
        }
    }

    fn names(p: &KeysPage) -> Vec<Option<&str>> {
        p.keys
            .iter()
            .map(|k| k.key.as_ref().map(MessageKey::as_str))
            .collect()
    }

    #[test]
    fn pages_walk_every_key_once_in_order() {
        let all = vec![
            stats(Some("b"), 5, 0, Some(30)),
            stats(None, 5, 1, Some(10)),
            stats(Some("a"), 9, 0, Some(20)),
            stats(Some("c"), 0, 2, None),
            stats(Some("gone"), 0, 0, None),
        ];
        let mut req = KeysRequest {
            order: KeyOrder::Backlog,
            limit: 2,
            after: None,
        };
        let first = page(all.clone(), &req);
        assert_eq!(names(&first), vec![Some("a"), None]);
        assert_eq!(first.active_keys, 3, "named keys with messages");
        let cursor: KeyCursor = first.next.unwrap().to_string().parse().unwrap();
        req.after = Some(cursor);
        let second = page(all.clone(), &req);
        assert_eq!(names(&second), vec![Some("b"), Some("c")]);
        assert!(second.next.is_none());

        let oldest = page(
            all.clone(),
            &KeysRequest {
                order: KeyOrder::Oldest,
                limit: 10,
                after: None,
            },
        );
        assert_eq!(names(&oldest), vec![None, Some("a"), Some("b"), Some("c")]);
        let flying = page(
            all,
            &KeysRequest {
                order: KeyOrder::InFlight,
                limit: 10,
                after: None,
            },
        );
        assert_eq!(names(&flying), vec![Some("c"), None, Some("a"), Some("b")]);
    }

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        for key in [None, Some("tenant-1"), Some("é✓ 𝄞")] {
            let c = KeyCursor {
                order: KeyOrder::Oldest,
                measure: -42,
                key: key.map(str::to_owned),
            };
            assert_eq!(c.to_string().parse::<KeyCursor>().unwrap(), c);
        }
        for bad in ["", "b", "b.1", "x.1.-", "b.z.-", "b.1.abc", "b.1.zz"] {
            assert!(bad.parse::<KeyCursor>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_cursor_of_another_order_starts_over_and_a_bad_limit_is_refused() {
        let all = vec![
            stats(Some("a"), 1, 0, Some(5)),
            stats(Some("b"), 2, 0, Some(9)),
        ];
        let req = KeysRequest {
            order: KeyOrder::Oldest,
            limit: 10,
            after: Some("b.3.-".parse::<KeyCursor>().unwrap()),
        };
        assert!(validate(&req).is_ok());
        assert_eq!(names(&page(all, &req)), [Some("a"), Some("b")]);
        for limit in [0, MAX_KEYS_PAGE + 1] {
            let req = KeysRequest {
                limit,
                ..KeysRequest::default()
            };
            assert!(validate(&req).is_err());
        }
    }

    #[test]
    fn the_minute_estimate_lies_between_the_current_minute_and_both() {
        let mut t = MinuteTally::default();
        let m = 1_000 * MINUTE_MS;
        t.count(m + 10_000, 30);
        assert_eq!(t.last_minute(m + 10_000), 30);
        t.count(m + MINUTE_MS + 15_000, 8);
        // A quarter of the way into the next minute: 8 now, and three quarters of 30.
        assert_eq!(t.last_minute(m + MINUTE_MS + 15_000), 8 + 22);
        assert_eq!(t.last_minute(m + 3 * MINUTE_MS), 0, "two minutes later");
        assert_eq!(MinuteTally::estimate(m + 30_000, 4, 10), 4 + 5);
    }
}
