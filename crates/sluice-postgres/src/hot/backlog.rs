//! The queues a node finds behind, and where its next lease of each starts.
//!
//! A queue is behind when its last lease on this node filled every receive with messages
//! that had waited (see `hot/lease_combine.rs`); its sends then gather harder (see
//! `hot/send_combine.rs`).
//!
//! A lease takes the oldest waiting rows from the head of the `messages_waiting` index, and
//! every row it takes leaves a dead entry there until vacuum removes it. While consumers
//! keep up those are few; under a backlog of minutes they are tens of thousands, and every
//! lease walked all of them first (measured: 400 index pages and 2.5 ms for four rows, which
//! capped the consumers of a queue below its producers for the rest of the run). So while a
//! queue is behind, a node remembers the last row it leased and starts the next lease after
//! it. Rows can appear before that point (a lease of another node rolled back, clocks of
//! nodes apart, an expired lease ended with its old deadline), so every
//! [`FULL_SCAN_EVERY`]th lease, and any lease that finds fewer rows than it wants after the
//! cursor, scans from the head again: such a row waits a few leases longer, and none is
//! missed. The queue stays roughly FIFO by visible time, as the contract asks.

use std::sync::Mutex;

/// Leases after a cursor between two from the head.
pub(crate) const FULL_SCAN_EVERY: u32 = 16;

/// The start of a lease scan: `(visible_at, id)` after which rows are looked for, or from
/// the head.
pub(crate) type ScanFrom = Option<(i64, i64)>;

/// The key a scan from the head passes to the lease statement (before every row).
pub(crate) const HEAD: (i64, i64) = (i64::MIN, i64::MIN);

/// Whether one queue is behind on this node, and then the last row it leased there.
#[derive(Default)]
pub(crate) struct Backlog(Mutex<Option<Cursor>>);

#[derive(Default)]
struct Cursor {
    /// The last row leased, once a lease from the head has found one.
    after: Option<(i64, i64)>,
    /// Leases after the cursor since the last scan from the head.
    since_head: u32,
}

impl Backlog {
    /// Whether the queue is behind.
    pub(crate) fn has(&self) -> bool {
        self.cursor().is_some()
    }

    /// Marks the queue behind (keeping its cursor) or clears it (forgetting the cursor).
    pub(crate) fn mark(&self, behind: bool) {
        let mut cursor = self.cursor();
        if !behind {
            *cursor = None;
        } else if cursor.is_none() {
            *cursor = Some(Cursor::default());
        }
    }

    /// Where the next lease starts: after the cursor while the queue is behind and a scan
    /// from the head is not due, otherwise from the head.
    pub(crate) fn start(&self) -> ScanFrom {
        let mut cursor = self.cursor();
        let c = cursor.as_mut()?;
        let after = c.after?;
        if c.since_head + 1 >= FULL_SCAN_EVERY {
            return None;
        }
        c.since_head += 1;
        Some(after)
    }

    /// Records a lease that started at `from` and whose last row (by key) was `last`, if it
    /// leased any. Nothing is kept for a queue that is not behind.
    pub(crate) fn leased(&self, from: ScanFrom, last: Option<(i64, i64)>) {
        let mut cursor = self.cursor();
        let Some(c) = cursor.as_mut() else {
            return;
        };
        if from.is_none() {
            *c = Cursor {
                after: last,
                since_head: 0,
            };
        } else {
            c.after = c.after.max(last);
        }
    }

    fn cursor(&self) -> std::sync::MutexGuard<'_, Option<Cursor>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_not_behind_keeps_no_cursor_and_is_scanned_from_the_head() {
        let b = Backlog::default();
        b.leased(None, Some((5, 50)));
        assert!(!b.has());
        assert_eq!(b.start(), None);
        b.mark(true);
        assert_eq!(b.start(), None, "no cursor until a lease from the head");
        b.leased(None, Some((5, 50)));
        assert_eq!(b.start(), Some((5, 50)));
        b.mark(false);
        b.mark(true);
        assert_eq!(b.start(), None, "cleared forgets the cursor");
    }

    #[test]
    fn a_queue_behind_is_scanned_after_its_cursor_and_from_the_head_now_and_then() {
        let b = Backlog::default();
        b.mark(true);
        b.leased(None, Some((5, 50)));
        let mut from_head = 0;
        let mut after = (5, 50);
        for i in 0..(3 * FULL_SCAN_EVERY) {
            let from = b.start();
            match from {
                Some(k) => assert_eq!(k, after),
                None => from_head += 1,
            }
            after = (after.0 + 1, i64::from(i));
            b.leased(from, Some(after));
        }
        assert_eq!(
            from_head, 3,
            "one scan from the head in every {FULL_SCAN_EVERY}"
        );
    }

    #[test]
    fn the_cursor_never_moves_back_after_itself() {
        let b = Backlog::default();
        b.mark(true);
        b.leased(None, Some((9, 90)));
        let from = b.start();
        b.leased(from, Some((3, 30)));
        assert_eq!(b.start(), Some((9, 90)));
    }
}
