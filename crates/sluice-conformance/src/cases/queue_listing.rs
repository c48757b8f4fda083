//! Paged queue listings: `list_queues_page` by prefix, limit and cursor.

use sluice_core::store::{QueuePage, QueuePageRequest, queue_cursor};

use super::*;

fn request(prefix: &str, limit: u32, cursor: Option<String>) -> QueuePageRequest {
    QueuePageRequest {
        prefix: prefix.to_owned(),
        limit,
        cursor,
    }
}

fn names(page: &QueuePage) -> Vec<String> {
    page.queues.iter().map(|q| q.name.to_string()).collect()
}

impl Env {
    /// Every page of a listing by `prefix`, `limit` at a time, following `next_cursor` to the
    /// end; `between` runs after each page (to change the queues during the walk).
    async fn walk_queues<F, Fut>(&self, prefix: &str, limit: u32, mut between: F) -> Vec<QueuePage>
    where
        F: FnMut(usize) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let mut pages: Vec<QueuePage> = Vec::new();
        let mut cursor = None;
        loop {
            let page = self
                .store
                .list_queues_page(request(prefix, limit, cursor))
                .await
                .unwrap_or_else(|e| panic!("page {} of prefix {prefix:?}: {e:?}", pages.len()));
            assert!(
                page.queues.len() <= limit as usize,
                "a page holds at most limit ({limit}) queues, got {}",
                page.queues.len()
            );
            cursor = page.next_cursor.clone();
            pages.push(page);
            assert!(pages.len() <= 1000, "the walk does not end");
            if cursor.is_none() {
                return pages;
            }
            assert_eq!(
                pages.last().map(|p| p.queues.len()),
                Some(limit as usize),
                "a page with a next_cursor is full"
            );
            between(pages.len()).await;
        }
    }
}

/// Pages in bytewise name order, narrowed to a prefix, `limit` at a time: together the pages of
/// any page size are exactly the queues `list_queues` lists with that prefix, and the last
/// page carries no cursor.
pub async fn queue_pages_by_prefix_and_limit(h: &dyn Harness) {
    let e = env(h).await;
    let empty = e
        .store
        .list_queues_page(QueuePageRequest::default())
        .await
        .expect("a page of no queues");
    assert_eq!(
        (empty.queues.len(), empty.next_cursor),
        (0, None),
        "a fresh store lists no queues and no cursor"
    );
    // Names whose bytewise order differs from a dictionary's: upper case before lower case,
    // '-' before '.' before digits before '_' before letters.
    for name in [
        "orders_eu",
        "payments",
        "orders",
        "Orders",
        "orders.eu",
        "orders0",
        "orders-eu",
        "ordersx",
    ] {
        e.queue(name, QueueConfigPatch::default()).await;
    }
    let all: Vec<String> = e
        .store
        .list_queues()
        .await
        .expect("list_queues")
        .iter()
        .map(|q| q.name.to_string())
        .collect();
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(all, sorted, "list_queues lists by name, bytewise");
    assert_eq!(all.len(), 16, "eight queues and their DLQs: {all:?}");
    for prefix in ["", "orders", "orders.", "O", "p", "nothing"] {
        let want: Vec<String> = all
            .iter()
            .filter(|n| n.starts_with(prefix))
            .cloned()
            .collect();
        for limit in [1, 2, 3, 1000] {
            let pages = e.walk_queues(prefix, limit, |_| async {}).await;
            let got: Vec<String> = pages.iter().flat_map(names).collect();
            assert_eq!(got, want, "prefix {prefix:?}, limit {limit}");
            let expected_pages = want.len().div_ceil(limit as usize).max(1);
            assert_eq!(
                pages.len(),
                expected_pages,
                "prefix {prefix:?}, limit {limit}: a cursor only while more remain"
            );
        }
    }
    let page = e
        .store
        .list_queues_page(request("orders", 3, None))
        .await
        .expect("first page");
    assert_eq!(
        names(&page),
        ["orders", "orders-eu", "orders-eu.dlq"],
        "bytewise: '-' sorts before '.'"
    );
    let second = e
        .store
        .list_queues_page(request("orders", 3, page.next_cursor))
        .await
        .expect("second page");
    assert_eq!(names(&second), ["orders.dlq", "orders.eu", "orders.eu.dlq"]);
    let full = &e
        .store
        .list_queues_page(request("payments", 10, None))
        .await
        .expect("one queue")
        .queues[0];
    assert_eq!(
        full,
        &e.store.get_queue(&qn("payments")).await.expect("get"),
        "a page shows each queue as get_queue does"
    );
}

/// A walk over every page while queues are created and deleted between pages returns every
/// queue that exists throughout exactly once, in increasing order, and never a name twice.
pub async fn queue_pages_cover_each_queue_once_while_queues_come_and_go(h: &dyn Harness) {
    let e = env(h).await;
    let no_dlq = || QueueConfigPatch {
        max_receive_count: Some(0),
        dead_letter_queue: Some(None),
        ..QueueConfigPatch::default()
    };
    let mut kept = BTreeSet::new();
    for i in 0..40 {
        let name = format!("keep.{i:02}");
        e.queue(&name, no_dlq()).await;
        kept.insert(name);
    }
    // Doomed queues, spread between the kept ones: deleted during the walk, some before the
    // walk reaches them, some after it passed them.
    for i in (0..40).step_by(3) {
        e.queue(&format!("keep.{i:02}.doomed"), no_dlq()).await;
    }
    let store = &e.store;
    let pages = e
        .walk_queues("keep.", 4, |n| {
            let store = store.clone();
            async move {
                let n = n * 3;
                // A queue created behind the walk, one ahead of it and one far ahead.
                for name in [
                    format!("keep.{:02}a", n.saturating_sub(4)),
                    format!("keep.{:02}b", n + 2),
                    format!("keep.{:02}c", 39 - n.min(39)),
                ] {
                    let q = qn(&name);
                    if let Err(err) = store.put_queue(&q, &no_dlq()).await {
                        panic!("create {name} during the walk: {err:?}");
                    }
                }
                // Doomed queues behind and ahead of the walk go.
                for i in [n.saturating_sub(3), n + 3, 39 - n.min(39)] {
                    let q = qn(&format!("keep.{i:02}.doomed"));
                    match store.delete_queue(&q).await {
                        Ok(_) | Err(StoreError::QueueNotFound(_)) => {}
                        Err(err) => panic!("delete {q} during the walk: {err:?}"),
                    }
                }
            }
        })
        .await;
    let walked: Vec<String> = pages.iter().flat_map(names).collect();
    for pair in walked.windows(2) {
        assert!(
            pair[0] < pair[1],
            "names strictly increase across pages (no repeats): {pair:?}"
        );
    }
    let seen: BTreeSet<String> = walked.iter().cloned().collect();
    let missing: Vec<&String> = kept.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "queues present for the whole walk that it missed: {missing:?}"
    );
    assert!(walked.iter().all(|n| n.starts_with("keep.")));
}

/// A cursor past every queue answers an empty last page; a cursor keeps working after its
/// queue is deleted; a malformed cursor, a limit outside 1–1000 and a prefix no queue name can
/// start with are `InvalidArgument`.
pub async fn queue_page_cursors_past_the_end_and_bad_input(h: &dyn Harness) {
    let e = env(h).await;
    for name in ["a", "b", "c", "d"] {
        e.queue(name, QueueConfigPatch::default()).await;
    }
    let past = e
        .store
        .list_queues_page(request("", 10, Some(queue_cursor(&qn("zzz")))))
        .await
        .expect("a cursor past the end");
    assert_eq!(
        (past.queues.len(), past.next_cursor),
        (0, None),
        "past the end: an empty page and no cursor"
    );
    let first = e
        .store
        .list_queues_page(request("", 2, None))
        .await
        .expect("first page");
    assert_eq!(names(&first), ["a", "a.dlq"]);
    e.store.delete_queue(&qn("a")).await.expect("delete a");
    e.store
        .delete_queue(&qn("a.dlq"))
        .await
        .expect("delete a.dlq");
    let next = e
        .store
        .list_queues_page(request("", 2, first.next_cursor))
        .await
        .expect("the cursor of a deleted queue still continues after it");
    assert_eq!(names(&next), ["b", "b.dlq"]);
    // A cursor before the prefix starts at the prefix.
    let from = e
        .store
        .list_queues_page(request("c", 10, Some(queue_cursor(&qn("b")))))
        .await
        .expect("a cursor before the prefix");
    assert_eq!(names(&from), ["c", "c.dlq"]);

    // Not a cursor at all, nothing, the cursor of a name with a space, upper-case digits.
    for cursor in ["not a cursor!", "", "612062", "6A"] {
        assert_code(
            e.store
                .list_queues_page(request("", 10, Some(cursor.to_owned())))
                .await,
            ErrorCode::InvalidArgument,
            &format!("cursor {cursor:?}"),
        );
    }
    for limit in [0, 1001] {
        assert_code(
            e.store.list_queues_page(request("", limit, None)).await,
            ErrorCode::InvalidArgument,
            &format!("limit {limit}"),
        );
    }
    for prefix in ["a b", "a/", &"a".repeat(81)] {
        assert_code(
            e.store.list_queues_page(request(prefix, 10, None)).await,
            ErrorCode::InvalidArgument,
            &format!("prefix {prefix:?}"),
        );
    }
}
