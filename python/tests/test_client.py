"""The client against a real broker: every route of the HTTP API v1."""

from __future__ import annotations

import datetime
import json
import math
import pathlib
import re
import threading
import time
import uuid

import pytest

import sluice
from sluice import ApiError, BodyKind, ErrorCode, InvalidInput, TaskStatus
from conftest import Broker, wait_until


def test_every_route_of_the_openapi_document_has_a_client_method(client: sluice.Client) -> None:
    # The routes this client calls, as the OpenAPI document names them. A route the broker
    # grows without a client method fails this test.
    covered = {
        ("get", "/v1/queues"), ("put", "/v1/queues/{q}"), ("get", "/v1/queues/{q}"),
        ("delete", "/v1/queues/{q}"), ("post", "/v1/queues/{q}/pause"),
        ("post", "/v1/queues/{q}/resume"), ("post", "/v1/queues/{q}/purge"),
        ("post", "/v1/queues/{q}/messages"), ("get", "/v1/queues/{q}/messages"),
        ("post", "/v1/queues/{q}/receive"), ("post", "/v1/queues/{q}/ack"),
        ("post", "/v1/queues/{q}/nack"), ("post", "/v1/queues/{q}/reject"),
        ("post", "/v1/queues/{q}/release"), ("post", "/v1/queues/{q}/move"),
        ("post", "/v1/queues/{q}/extend"), ("post", "/v1/queues/{q}/progress"),
        ("get", "/v1/messages/{id}"), ("delete", "/v1/messages/{id}"),
        ("get", "/v1/queues/{q}/stats"), ("get", "/v1/queues/{q}/stats/history"),
        ("get", "/v1/queues/{q}/keys"),
        ("get", "/v1/stats"), ("get", "/v1/whoami"), ("post", "/v1/queues/{q}/breaker"),
        ("post", "/v1/queues/{q}/keys/{key}/breaker"),
        ("get", "/v1/queues/{q}/summary"),
        ("get", "/v1/tasks/{id}"), ("post", "/v1/tasks/{id}/cancel"),
        ("get", "/v1/tasks/{id}/events"), ("get", "/v1/queues/{q}/scaling"),
        ("post", "/v1/redrives"), ("get", "/v1/redrives"), ("get", "/v1/redrives/{id}"),
        ("post", "/v1/redrives/{id}/cancel"), ("post", "/v1/redrives/{id}/pause"),
        ("post", "/v1/redrives/{id}/resume"), ("get", "/v1/audit"), ("get", "/healthz"),
        ("get", "/v1/schedules"), ("put", "/v1/schedules/{name}"),
        ("get", "/v1/schedules/{name}"), ("delete", "/v1/schedules/{name}"),
        ("post", "/v1/schedules/{name}/pause"), ("post", "/v1/schedules/{name}/resume"),
        ("post", "/v1/schedules/{name}/trigger"),
        ("get", "/readyz"), ("get", "/openapi.json"), ("get", "/metrics"),
    }
    doc = client.openapi()
    served = {(m, p) for p, ops in doc["paths"].items() for m in ops if m in ("get", "put", "post", "delete")}
    assert served - covered == set(), "routes without a client method"
    assert covered - served == set(), "client methods for routes the broker does not serve"


def test_create_queue_refuses_an_existing_queue(client: sluice.Client, queue: str) -> None:
    q = client.create_queue(queue, max_receive_count=3)
    assert q.created and q.config.max_receive_count == 3
    with pytest.raises(ApiError) as e:
        client.create_queue(queue, max_receive_count=7)
    assert e.value.code is ErrorCode.CONFLICT and e.value.status == 409
    assert client.get_queue(queue).config.max_receive_count == 3, "left unchanged"


def test_queue_listing_follows_pages_or_answers_one(client: sluice.Client, queue: str) -> None:
    # The session's broker is shared: everything here is under this test's own prefix.
    names = [f"{queue}.{i}" for i in range(5)]
    for n in names:
        client.create_queue(n, max_receive_count=0, dead_letter_queue=sluice.CLEAR)
    assert [q.name for q in client.list_queues(prefix=f"{queue}.")] == names
    assert set(names) <= {q.name for q in client.list_queues()}
    first = client.list_queues_page(prefix=f"{queue}.", limit=2)
    assert [q.name for q in first.queues] == names[:2] and first.next_cursor
    walked, cursor = [], None
    while True:
        page = client.list_queues_page(prefix=f"{queue}.", limit=2, cursor=cursor)
        walked += [q.name for q in page.queues]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert walked == names
    with pytest.raises(ApiError) as e:
        client.list_queues_page(cursor="garbage")
    assert e.value.code is ErrorCode.INVALID_ARGUMENT and "next_cursor" in str(e.value)
    for n in names:
        client.delete_queue(n)


def test_routing_errors_have_their_own_codes(client: sluice.Client) -> None:
    with pytest.raises(ApiError) as e:
        client._t.request("GET", "/v1/nothing", idempotent=True)
    assert e.value.code is ErrorCode.NOT_FOUND and e.value.status == 404
    with pytest.raises(ApiError) as e:
        client._t.request("PATCH", "/v1/queues", idempotent=True)
    assert e.value.code is ErrorCode.METHOD_NOT_ALLOWED and e.value.status == 405


def test_queue_lifecycle(client: sluice.Client, queue: str) -> None:
    q = client.put_queue(queue, max_receive_count=3, visibility_timeout=12.5, backoff_base=0.2)
    assert q.created and q.name == queue
    assert q.config.max_receive_count == 3
    assert q.config.visibility_timeout == 12.5
    assert q.config.dead_letter_queue == f"{queue}.dlq"
    again = client.put_queue(queue, sluice.QueueSettings(max_depth=10, rate_limit=sluice.RateLimit(5, 1.0)))
    assert not again.created
    assert again.config.max_receive_count == 3, "absent fields keep their value"
    assert again.config.max_depth == 10 and again.config.rate_limit == sluice.RateLimit(5, 1.0)
    cleared = client.put_queue(queue, max_depth=sluice.CLEAR, rate_limit=sluice.CLEAR)
    assert cleared.config.max_depth is None and cleared.config.rate_limit is None
    assert client.get_queue(queue).config == cleared.config
    assert queue in {x.name for x in client.list_queues()}
    assert client.pause_queue(queue).config.paused
    client.send(queue, 1)
    assert client.receive(queue, max=10) == [], "a paused queue delivers nothing"
    assert not client.resume_queue(queue).config.paused
    assert client.purge_queue(queue) == 1
    client.delete_queue(queue)
    client.delete_queue(queue)  # gone already: still a success
    with pytest.raises(ApiError) as e:
        client.get_queue(queue)
    assert e.value.code is ErrorCode.QUEUE_NOT_FOUND and e.value.status == 404


def test_bad_input_is_refused_before_sending(client: sluice.Client, queue: str) -> None:
    with pytest.raises(InvalidInput):
        client.put_queue("no spaces allowed")
    with pytest.raises(InvalidInput):
        client.get_message("not-an-id")
    with pytest.raises(InvalidInput):
        client.put_queue(queue, visibility_timeout=-1)
    with pytest.raises(ApiError) as e:
        client.put_queue(queue, max_receive_count=5000)
    assert e.value.code is ErrorCode.INVALID_ARGUMENT and "max_receive_count" in e.value.message


def test_bodies_come_back_in_the_form_they_were_sent(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue)
    raw = bytes(range(256))
    client.send(queue, {"a": [1, 2.5, "x"], "b": None}, attributes={"tenant": "acme"})
    client.send(queue, raw)
    client.send_raw(queue, b"\xff\x00raw")
    client.send_text(queue, "héllo")
    client.send(queue, "a JSON string")
    got = client.receive(queue, max=10, wait=1)
    assert len(got) == 5
    by_kind = [(d.kind, d.body) for d in sorted(got, key=lambda d: d.enqueued_at + d.id)]
    assert (BodyKind.JSON, {"a": [1, 2.5, "x"], "b": None}) in by_kind
    assert (BodyKind.BYTES, raw) in by_kind
    assert (BodyKind.BYTES, b"\xff\x00raw") in by_kind
    assert (BodyKind.TEXT, "héllo") in by_kind
    assert (BodyKind.JSON, "a JSON string") in by_kind
    first = next(d for d in got if d.kind is BodyKind.JSON and isinstance(d.body, dict))
    assert first.attributes == {"tenant": "acme"} and first.receive_count == 1


def test_batch_dedup_delay_and_idempotency(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue)
    res = client.send_batch(queue, [1, sluice.OutMessage(2, dedup_id="two"), sluice.OutMessage(b"\x01", delay=60)])
    assert len(res) == 3 and not any(r.duplicate for r in res)
    dup = client.send(queue, 2, dedup_id="two")
    assert dup.duplicate and dup.id == res[1].id
    key = uuid.uuid4().hex
    a = client.send(queue, {"once": True}, idempotency_key=key)
    b = client.send(queue, {"once": True}, idempotency_key=key)
    assert a.id == b.id
    with pytest.raises(ApiError) as e:
        client.send(queue, {"once": False}, idempotency_key=key)
    assert e.value.code is ErrorCode.IDEMPOTENCY_MISMATCH and e.value.status == 422
    st = client.stats(queue)
    assert st.totals.sent == 4 and st.delayed == 1 and st.visible == 3
    delayed = client.browse(queue, state="delayed")
    assert [m.body for m in delayed.messages] == [b"\x01"]


def test_fifo_groups_deliver_in_send_order(client: sluice.Client, queue: str) -> None:
    q = client.put_queue(queue, max_in_flight_per_group=1)
    assert q.config.max_in_flight_per_group == 1
    a1 = client.send(queue, "a1", group="a").id
    a2 = client.send_text(queue, "a2", group="a").id
    b1, u1 = client.send_batch(queue, [sluice.OutMessage("b1", group="b"), "u1"])
    task = client.enqueue(queue, "t", [], group="a")
    got = client.receive(queue, max=10, wait=1)
    assert sorted(d.id for d in got) == sorted([a1, b1.id, u1.id])
    by_id = {d.id: d for d in got}
    assert by_id[a1].group == "a" and by_id[u1.id].group is None
    assert client.get_message(a2).group == "a"
    assert client.receive(queue, max=10) == []
    client.ack(queue, by_id[a1].receipt)
    nxt = client.receive(queue, max=10)
    assert [d.id for d in nxt] == [a2] and nxt[0].body == "a2"
    client.ack(queue, nxt[0].receipt)
    assert [d.id for d in client.receive(queue, max=10)] == [task]
    with pytest.raises(ApiError) as e:
        client.send(queue, 1, group="")
    assert e.value.code is ErrorCode.INVALID_ARGUMENT and "group" in e.value.message


def test_non_json_values_fail_at_enqueue_and_nothing_is_sent(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue)
    for args in ([math.nan], [math.inf], [object()], [{1, 2}], [b"bytes"]):
        with pytest.raises(InvalidInput) as e:
            client.enqueue(queue, "t", args)
        assert "cannot be sent as JSON" in str(e.value)
    with pytest.raises(InvalidInput):
        client.enqueue(queue, "t", kwargs={"when": object()})
    with pytest.raises(InvalidInput):
        client.enqueue(queue, "", [])
    with pytest.raises(InvalidInput):
        client.enqueue(queue, "t", "not a list")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        client.send(queue, {"x": math.nan})
    assert client.stats(queue).totals.sent == 0


def test_ack_and_receive_settles_one_batch_and_takes_the_next(
    client: sluice.Client, queue: str
) -> None:
    client.put_queue(queue)
    client.send_batch(queue, [{"n": i} for i in range(4)])
    first = client.receive(queue, max=2)
    acked, nxt = client.ack_and_receive(queue, [d.receipt for d in first], max=2)
    assert [o.ok for o in acked] == [True, True]
    assert len(nxt) == 2 and not {d.id for d in nxt} & {d.id for d in first}
    stale, none = client.ack_and_receive(queue, [first[0].receipt], max=2)
    assert stale[0].error_code == "receipt_stale" and none == []
    assert client.ack_and_receive(queue, [], max=1) == ([], [])
    assert client.stats(queue).totals.acked == 2


def test_settle_ack_nack_reject_release_move_extend(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue, max_receive_count=5, backoff_base=0.05, backoff_max=0.05)
    other = f"{queue}.other"
    client.put_queue(other)
    ids = [client.send(queue, {"n": i}).id for i in range(5)]
    got = {d.body["n"]: d for d in client.receive(queue, max=5, wait=1, consumer="py-test")}
    assert len(got) == 5

    client.ack(queue, got[0].receipt, {"ok": 1})
    with pytest.raises(ApiError) as e:
        client.ack(queue, got[0].receipt)
    assert e.value.code is ErrorCode.RECEIPT_STALE and e.value.status == 409
    done = client.get_message(ids[0])
    assert done.state == "completed" and done.result == {"ok": 1}
    # The acknowledged delivery is the last attempt: who received it and when its lease began.
    acked = done.attempts[-1]
    assert acked.outcome == "acked" and acked.consumer == "py-test"
    # Times are RFC 3339 with as many fraction digits as they need ("…52.26Z"): compare them
    # as times, not as texts.
    def when(t: str) -> datetime.datetime:
        return datetime.datetime.fromisoformat(t.replace("Z", "+00:00"))

    assert acked.started_at is not None and when(acked.started_at) <= when(acked.at)
    t = client.task_status(ids[0])
    assert t.status is TaskStatus.SUCCESS and t.result == {"ok": 1}

    n = client.nack(queue, got[1].receipt, error="upstream 503", consumer="py-test")
    assert n.state in ("delayed", "visible") and n.queue == queue
    assert client.task_status(ids[1]).status is TaskStatus.RETRY
    assert client.get_message(ids[1]).attempts[-1].error == "upstream 503"

    r = client.reject(queue, got[2].receipt, error="bad input")
    assert r.dead_lettered and r.queue == f"{queue}.dlq"
    dead = client.get_message(ids[2])
    assert dead.dead_letter_reason == "rejected" and dead.source_queue == queue
    assert dead.dead_lettered and not client.get_message(ids[1]).dead_lettered
    assert client.task_status(ids[2]).status is TaskStatus.FAILURE

    rel = client.release(queue, got[3].receipt)
    assert rel.state == "visible"
    again = client.receive(queue, max=10, wait=1)
    assert {d.id: d.receive_count for d in again}.get(ids[3]) == 1, "a release does not use an attempt"

    mv = client.move_message(queue, got[4].receipt, other, error="elsewhere")
    assert mv.queue == other
    assert client.get_message(ids[4]).queue == other

    ext_target = next(d for d in again if d.id == ids[3])
    ex = client.extend(queue, ext_target.receipt, 120)
    assert not ex.cancel_requested and ex.lease_deadline > ext_target.lease_deadline

    outcomes = client.ack_batch(queue, [(d.receipt, d.id) for d in again] + ["bogus-receipt"])
    assert [o.ok for o in outcomes[:-1]] == [True] * len(again)
    assert not outcomes[-1].ok and outcomes[-1].error_code


def test_browse_pages_and_delete(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue)
    ids = [r.id for r in client.send_batch(queue, list(range(7)))]
    seen, cursor = [], None
    while True:
        page = client.browse(queue, state="visible", limit=3, cursor=cursor)
        seen += [m.id for m in page.messages]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids)
    client.delete_message(ids[0])
    client.delete_message(ids[0])  # gone already: still a success
    assert client.stats(queue).visible == 6
    with pytest.raises(ApiError) as e:
        client.get_message(ids[0])
    assert e.value.code is ErrorCode.MESSAGE_NOT_FOUND


def test_stats_history_scaling_health_metrics(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue)
    client.send_batch(queue, list(range(25)))
    client.receive(queue, max=5)
    st = client.stats(queue)
    assert (st.visible, st.in_flight, st.totals.sent, st.totals.received) == (20, 5, 25, 5)
    sc = client.scaling(queue, per_worker=10)
    assert (sc.desired_workers, sc.backlog, sc.in_flight) == (3, 20, 5)
    hist = client.stats_history(queue)
    assert hist.queue == queue and hist.interval > 0
    assert client.healthz() and client.readyz()
    assert "sluice" in client.metrics_text()


def test_overview_lists_every_queue_with_its_dlq_and_whoami_says_who(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue, max_receive_count=1)
    client.send_batch(queue, list(range(3)))
    d = client.receive(queue, max=1)[0]
    client.reject(queue, d.receipt, error="bad input")
    rows = {o.stats.queue: o for o in client.overview()}
    mine, dlq = rows[queue], rows[f"{queue}.dlq"]
    assert (mine.stats.visible, mine.stats.dead_letter_depth) == (2, 1)
    assert (mine.dead_letter_queue, mine.paused, mine.is_dead_letter_queue) == (f"{queue}.dlq", False, False)
    assert dlq.is_dead_letter_queue and dlq.stats.visible == 1
    names = [o.stats.queue for o in client.overview()]
    assert names == sorted(names)
    assert [o.stats.queue for o in client.overview(prefix=queue)] == [queue, f"{queue}.dlq"]
    me = client.whoami()
    assert (me.auth, me.name, me.role) == (False, None, "admin")
    assert "redrive" in me.may and me.queues == ["*"]


def test_stats_rates_over_three_windows_and_trends(client: sluice.Client, queue: str) -> None:
    # The broker samples every queue at each 10-s boundary, and a queue reads flat once
    # sampled after its last change: start just after a boundary so none falls in between.
    time.sleep((10 - time.time() % 10) + 0.05)
    client.put_queue(queue)
    for i in range(50):
        client.send(queue, i)
    st = client.stats(queue)
    assert st.totals.sent == 50
    # A new queue counts from zero at its creation, over its age (at least a second): the
    # 50 sends of its first second or so read the same rate over every window.
    assert 0 < st.rates.sent <= 50, st.rates
    assert st.rates.sent == st.rates_5m.sent == st.rates_15m.sent
    assert (st.rates.redriven, st.rates.expired) == (0.0, 0.0)
    assert st.backlog_trend.direction is sluice.TrendDirection.RISING
    assert st.backlog_trend.direction == "rising"
    assert st.backlog_trend.change_1m == 50
    assert st.backlog_trend.slope > 0 and st.backlog_trend.slope_1m == st.backlog_trend.slope
    assert st.backlog_trend.eta is None, "nothing is being consumed"
    assert st.backlog_trend.stalled_for is None, "not for 10 s yet"
    assert st.backlog_slope_per_sec == st.backlog_trend.slope
    assert st.drain_eta == st.backlog_trend.eta
    assert st.dlq_trend == sluice.Trend(), "an empty, untouched DLQ is flat"


def test_task_status_wait_cancel_and_events(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue)
    waiting = client.enqueue(queue, "never-run", [1])
    assert client.task_status(waiting).status is TaskStatus.PENDING
    assert client.cancel(waiting).status is TaskStatus.CANCELLED
    assert client.task_status(waiting).status is TaskStatus.CANCELLED

    tid = client.enqueue(queue, "work", kwargs={"x": 1})
    [d] = client.receive(queue, wait=1)
    events: list = []
    reader = threading.Thread(target=lambda: events.extend(client.task_events(tid)))
    reader.start()
    wait_until(lambda: len(events) >= 1, what="the first event")
    client.progress(queue, d.receipt, 40, "step 2 of 5")
    wait_until(lambda: any(e.progress and e.progress.pct == 40 for e in events), what="a progress event")
    started = time.monotonic()
    poll = threading.Thread(target=lambda: events.append(client.task_status(tid, wait=10)))
    poll.start()
    time.sleep(0.3)
    client.ack(queue, d.receipt, 42)
    poll.join(10)
    reader.join(10)
    assert time.monotonic() - started < 5, "the long poll answered when the task ended"
    assert events[-1].status is TaskStatus.SUCCESS and events[-1].result == 42
    assert any(e.status is TaskStatus.STARTED for e in events)
    unknown = client.task_status("00000000000000ff")
    assert unknown.status is TaskStatus.UNKNOWN


def test_running_task_cancel_reaches_the_lease_holder(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue)
    tid = client.enqueue(queue, "long", [])
    [d] = client.receive(queue, wait=1)
    assert client.cancel(tid).status in (TaskStatus.STARTED, TaskStatus.CANCELLED)
    assert client.extend(queue, d.receipt, 30).cancel_requested
    client.ack(queue, d.receipt, "late")
    assert client.task_status(tid).status is TaskStatus.CANCELLED, "CANCELLED is sticky"


def test_queue_full_is_429_with_retry_after(broker: Broker, queue: str) -> None:
    c = broker.client(retry=sluice.RetryPolicy.none())
    c.put_queue(queue, max_depth=1)
    c.send(queue, 1)
    with pytest.raises(ApiError) as e:
        c.send(queue, 2)
    assert e.value.code is ErrorCode.QUEUE_FULL and e.value.status == 429
    assert e.value.retry_after is not None and e.value.transient


def test_summary_counts_the_whole_dlq(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue, max_receive_count=1)
    client.send_batch(queue, [{"n": i} for i in range(6)])
    got = client.receive(queue, max=6, wait=1)
    for i, d in enumerate(got):
        client.nack(queue, d.receipt, error="timeout" if i < 4 else "HTTP 429")
    dlq = f"{queue}.dlq"
    s = client.summary(dlq)
    assert (s.total, s.group_count, s.more_groups) == (len(got), 2, False)
    assert [(g.key, g.count) for g in s.groups] == [("timeout", 4), ("HTTP 429", len(got) - 4)]
    assert client.get_message(s.groups[0].sample_id).last_error == "timeout"
    r = client.summary(dlq, group_by="reason", error_contains="429")
    assert [(g.key, g.count) for g in r.groups] == [("exhausted", len(got) - 4)]
    none = client.summary(dlq, attributes={"a": "1", "b": "2"})
    assert none.total == 0 and none.groups == []
    # One group exactly: its error text, not every error containing it; by reason and source.
    assert client.summary(dlq, error_is="HTTP 429").total == len(got) - 4
    assert client.summary(dlq, error_is="429").total == 0
    assert client.summary(dlq, reason="exhausted", source_queue=queue).total == len(got)
    assert client.summary(dlq, reason="rejected").total == 0
    page = client.browse(dlq, error_is="timeout")
    assert len(page.messages) == 4
    with pytest.raises(ApiError) as e:
        client.summary(dlq, group_by="colour")
    assert e.value.code is ErrorCode.INVALID_ARGUMENT and "attribute:NAME" in str(e.value)


def test_redrive_and_audit(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue, max_receive_count=1)
    ids = [r.id for r in client.send_batch(queue, [{"n": i} for i in range(4)])]
    for d in client.receive(queue, max=4, wait=1):
        assert client.nack(queue, d.receipt, error=f"payment API: 503 ({d.body['n'] % 2})").dead_lettered
    dlq = f"{queue}.dlq"
    dry = client.create_redrive(dlq, dry_run=True)
    wait_until(lambda: client.get_redrive(dry.id).state == "completed", what="the dry run")
    assert client.get_redrive(dry.id).matched == 4 and client.get_redrive(dry.id).moved == 0
    limited = client.create_redrive(dlq, dry_run=True, limit=1, filter=sluice.RedriveFilter(error_contains="(1)"))
    wait_until(lambda: client.get_redrive(limited.id).state == "completed", what="the limited dry run")
    limited = client.get_redrive(limited.id)
    assert (limited.matched, limited.would_move, limited.skips.filtered) == (2, 1, 2), limited
    assert limited.skip_reasons == ("2 would stay: the filter leaves them out", "1 would stay: beyond the limit of 1")
    job = client.create_redrive(dlq, rate_per_second=100, filter=sluice.RedriveFilter(error_contains="(1)"))
    wait_until(lambda: client.get_redrive(job.id).state == "completed", what="the redrive")
    assert client.get_redrive(job.id).moved == 2
    assert job.id in {r.id for r in client.list_redrives()}
    assert client.stats(queue).visible == 2 and client.stats(dlq).visible == 2
    moved = [i for i in ids if client.get_message(i).queue == queue]
    assert len(moved) == 2 and client.get_message(moved[0]).receive_count == 0
    slow = client.create_redrive(dlq, rate_per_second=1)
    cancelled = client.cancel_redrive(slow.id)
    assert cancelled.state in ("cancelled", "completed")
    actions = {e.action for e in client.audit(queue=dlq)}
    assert any(a.startswith("redrive") for a in actions), actions
    assert re.match(r"\d{4}-\d\d-\d\dT", client.audit(limit=1)[0].at)
    # What people did, under the dead letters the broker recorded after it.
    done = client.audit(queue=queue, kind="operator", limit=3)
    assert done and all(e.actor != "sluice" for e in done), done
    assert [e.action for e in client.audit(queue=queue, actions=["redrive.create", "redrive.cancel"])]
    dead = client.audit(queue=queue, actions=["message.dead_lettered"], actor="sluice")
    assert len(dead) == 4 and {e.message_id for e in dead} == set(ids)
    with pytest.raises(ApiError) as e:
        client.audit(kind="people")
    assert e.value.code is ErrorCode.INVALID_ARGUMENT


def _dead_letters(client: sluice.Client, queue: str, n: int) -> str:
    client.put_queue(queue, max_receive_count=1)
    client.send_batch(queue, list(range(n)))
    for d in client.receive(queue, max=n, wait=1):
        assert client.nack(queue, d.receipt, error="upstream: 429 Too Many Requests").dead_lettered
    return f"{queue}.dlq"


def test_redrive_rate_per_period_and_guard(client: sluice.Client, queue: str) -> None:
    dlq = _dead_letters(client, queue, 3)
    dry = client.create_redrive(
        dlq, rate="30/min", dry_run=True,
        pause_if_failing=sluice.RedriveGuard(10, error_contains="429"),
    )
    assert dry.rate == sluice.RateLimit(30, 60.0)
    assert dry.rate.to_wire() == {"limit": 30, "period_ms": 60000}
    assert dry.rate_per_second is None, "30 a minute is not a whole number per second"
    assert dry.pause_if_failing == sluice.RedriveGuard(10, 20, "429"), "the broker's window"
    wait_until(lambda: client.get_redrive(dry.id).finished, what="the dry run")
    done = client.get_redrive(dry.id)
    assert (done.state, done.matched, done.moved) == ("completed", 3, 0)
    assert done.rate == sluice.RateLimit(30, 60.0)

    # One job per DLQ at a time: each dry run finishes before the next starts.
    pair = client.create_redrive(dlq, rate=(10, 1), dry_run=True, pause_if_failing=25)
    assert pair.rate == sluice.RateLimit(10, 1.0) and pair.rate_per_second == 10
    assert pair.pause_if_failing is not None and pair.pause_if_failing.percent == 25
    wait_until(lambda: client.get_redrive(pair.id).finished, what="the second dry run")
    old = client.create_redrive(dlq, rate_per_second=5, dry_run=True)
    assert old.rate == sluice.RateLimit(5, 1.0) and old.rate_per_second == 5


@pytest.mark.parametrize("rate", ["fast", "0/min", "10/fortnight", "-5/s", "1.5/s", "10/0s", (0, 60), (5, 0), 7])
def test_redrive_rate_nonsense_is_refused_before_sending(client: sluice.Client, rate: object) -> None:
    with pytest.raises(ValueError) as e:
        client.create_redrive("nowhere.dlq", rate=rate)  # type: ignore[arg-type]
    assert isinstance(e.value, InvalidInput)
    assert "rate" in str(e.value) or "period" in str(e.value) or "count" in str(e.value)
    with pytest.raises(InvalidInput, match="not both"):
        client.create_redrive("nowhere.dlq", rate="10/s", rate_per_second=10)


def test_rate_text_reads_like_the_command_line() -> None:
    parse = sluice.RateLimit.parse
    assert parse("50/min") == sluice.RateLimit(50, 60.0)
    assert parse("10/s") == sluice.RateLimit(10, 1.0)
    assert parse("1000/h") == sluice.RateLimit(1000, 3600.0)
    assert parse("1000/60s") == sluice.RateLimit(1000, 60.0)
    assert parse(" 7 / 1500ms ").to_wire() == {"limit": 7, "period_ms": 1500}
    assert parse("2/day") == sluice.RateLimit(2, 86400.0)
    assert [str(parse(t)) for t in ("50/min", "10/sec", "1000/hour", "7/1500ms")] == [
        "50/min", "10/s", "1000/h", "7/1500ms"
    ]


def test_redrive_pause_and_resume(client: sluice.Client, queue: str) -> None:
    dlq = _dead_letters(client, queue, 3)
    # One move a minute: the first goes at once, the rest keep the job running.
    job = client.create_redrive(dlq, rate="1/min")
    assert job.rate == sluice.RateLimit(1, 60.0)
    assert client.get_redrive(job.id).state == "running"
    paused = client.pause_redrive(job.id)
    assert paused.state == "paused" and paused.paused and not paused.finished
    assert paused.paused_reason, "who paused it"
    assert client.get_redrive(job.id).state == "paused"
    assert client.pause_redrive(job.id).state == "paused", "pausing a paused job changes nothing"
    assert job.id in {r.id for r in client.list_redrives() if r.state == "paused"}
    resumed = client.resume_redrive(job.id)
    assert resumed.state == "running" and resumed.paused_reason is None
    cancelled = client.cancel_redrive(job.id)
    assert cancelled.state == "cancelled" and cancelled.finished
    with pytest.raises(ApiError) as e:
        client.resume_redrive(job.id)
    assert e.value.code is ErrorCode.CONFLICT, "a finished job stays finished"
    # The job's story is on its DLQ; a queue's audit includes its DLQ's entries.
    actions = {e.action for e in client.audit(queue=queue)}
    assert {"redrive.create", "redrive.pause", "redrive.resume", "redrive.cancel"} <= actions, actions
    with pytest.raises(InvalidInput):
        client.pause_redrive("../queues")


def test_audit_pages_by_cursor(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue)
    for i in range(5):
        client.put_queue(queue, max_receive_count=i + 2)
    everything = client.audit_page(queue=queue, limit=1000)
    assert not everything.more and everything.next_cursor is None
    updates = [e for e in everything.entries if e.action == "queue.update"]
    assert len(updates) == 5, [e.action for e in everything.entries]
    assert len(everything.entries) >= 6

    pages = []
    cursor = None
    while True:
        page = client.audit_page(queue=queue, limit=2, cursor=cursor)
        assert len(page.entries) <= 2
        pages.append(page)
        if not page.more:
            assert page.next_cursor is None
            break
        assert page.next_cursor and len(page.entries) == 2
        cursor = page.next_cursor
    # Each page is older than the one before it; within a page, oldest first.
    seen = [e for p in reversed(pages) for e in p.entries]
    assert seen == everything.entries, "every entry exactly once, in order"
    assert len(pages) == -(-len(everything.entries) // 2)
    assert client.audit(queue=queue, limit=2, cursor=pages[0].next_cursor) == pages[1].entries
    with pytest.raises(ApiError) as e:
        client.audit(cursor="not-a-cursor")
    assert e.value.code is ErrorCode.INVALID_ARGUMENT


def test_transport_errors_are_typed(sluice_bin: str) -> None:
    c = sluice.Client("http://127.0.0.1:9", retry=sluice.RetryPolicy.none(), connect_timeout=1)
    with pytest.raises(sluice.TransportError) as e:
        c.get_queue("x")
    assert e.value.connect and e.value.transient


def test_schedules_put_read_pause_trigger_and_delete(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue)
    s = client.put_schedule("py-nightly", queue, {"task": "sweep"}, cron="30 2 * * *",
                            timezone="Europe/Berlin", attributes={"team": "a"}, catch_up="one")
    assert (s.cron, s.timezone, s.catch_up, s.fired) == ("30 2 * * *", "Europe/Berlin", "one", 0)
    assert len(s.next) == 5
    assert "py-nightly" in [x.name for x in client.list_schedules()]
    assert client.pause_schedule("py-nightly").next == []
    assert not client.resume_schedule("py-nightly").paused
    sent = client.trigger_schedule("py-nightly")
    got = client.receive(queue, max=1, wait=1)
    assert got[0].id == sent and got[0].attributes["schedule"] == "py-nightly"
    with pytest.raises(sluice.InvalidInput):
        client.put_schedule("x", queue, 1)
    client.delete_schedule("py-nightly")
    with pytest.raises(ApiError) as e:
        client.get_schedule("py-nightly")
    assert e.value.status == 404


def test_a_push_target_receives_signed_messages(
    sluice_bin: str, queue: str, tmp_path: pathlib.Path
) -> None:
    import http.server

    # The hook below listens on loopback, which push calls only when the broker allows it.
    broker = Broker(sluice_bin, tmp_path / "data", ["--push-allow", "127.0.0.1"]).start()
    client = broker.client()

    from sluice.push import sign, verify_signature

    secret = "whsec_0123456789abcdef"
    assert sign(secret, 1_700_000_000, b"hello") == (
        "t=1700000000,v1=7ac1317c3d3d81aaba6ea9f6ffd14ea5a3b1e5a92af3ce7f7a5148d9a909015d"
    ), "the same signature the broker computes"
    seen = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.headers, body))
            ok = verify_signature(secret, self.headers.get("Sluice-Signature"), body)
            self.send_response(204 if ok else 401)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        q = client.put_queue(queue, push={"url": url, "secret": secret})
        assert q.config.push is not None and q.config.push["signed"] is True
        assert "secret" not in q.config.push
        sent = client.send(queue, {"reservation": 42})
        deadline = time.monotonic() + 20
        while client.get_message(sent.id).state != "completed":
            assert time.monotonic() < deadline, "pushed and acknowledged"
            time.sleep(0.05)
        headers, body = seen[0]
        assert json.loads(body) == {"reservation": 42}
        assert headers["Sluice-Message-Id"] == sent.id
        assert not verify_signature("another secret!!", headers["Sluice-Signature"], body)
        assert client.put_queue(queue, push=sluice.CLEAR).config.push is None
    finally:
        server.shutdown()
        client.close()
        broker.kill()


def test_enqueue_many_checks_first_sends_in_batches_and_reports_partial_failures(
    broker: Broker, queue: str
) -> None:
    c = broker.client(retry=sluice.RetryPolicy.none())
    c.put_queue(queue, max_depth=1500)
    # Every item is checked before anything is sent.
    with pytest.raises(InvalidInput) as e:
        c.enqueue_many(queue, [("t", [1]), ("t", [math.nan]), ("t", [3])])
    assert "task #1" in str(e.value)
    with pytest.raises(InvalidInput) as e:
        c.enqueue_many(queue, [("t", [1]), "t"])  # type: ignore[list-item]
    assert "task #1" in str(e.value)
    with pytest.raises(InvalidInput):
        c.enqueue_many(queue, [("", [])])
    assert c.stats(queue).totals.sent == 0
    assert c.enqueue_many(queue, []) == []

    # Options per task, and ids in order.
    ids = c.enqueue_many(queue, [
        sluice.TaskSpec("t", [0], group="g", attributes={"k": "v"}),
        ("t", [1], {"x": 1}),
        sluice.TaskSpec("t", [2], delay=60),
    ])
    got = c.receive(queue, max=10)
    assert [d.id for d in got] == ids[:2]
    assert got[0].body == {"task": "t", "args": [0], "kwargs": {}} and got[0].attributes == {"k": "v"}
    assert got[1].body == {"task": "t", "args": [1], "kwargs": {"x": 1}}
    c.ack_batch(queue, [d.receipt for d in got])
    c.purge_queue(queue)

    # 2,500 tasks go as three batches; the queue holds 1,500, so the second is refused whole.
    tasks = [("t", [i]) for i in range(2500)]
    with pytest.raises(sluice.PartialEnqueue) as p:
        c.enqueue_many(queue, tasks, idempotency_key="load-1")
    assert len(p.value.ids) == 1000 and p.value.total == 2500
    assert isinstance(p.value.error, ApiError) and p.value.error.code is ErrorCode.QUEUE_FULL
    # Once there is room, the same call with the same key enqueues each task once.
    c.put_queue(queue, max_depth=10_000)
    again = c.enqueue_many(queue, tasks, idempotency_key="load-1")
    assert again[:1000] == p.value.ids and len(set(again)) == 2500
    assert c.stats(queue).visible == 2500


def test_a_new_queue_name_with_stray_dots_is_a_clear_400(client: sluice.Client) -> None:
    for bad in [".hidden", "trailing.", "a..b"]:
        with pytest.raises(ApiError) as e:
            client.put_queue(bad)
        assert e.value.status == 400 and e.value.code is ErrorCode.INVALID_ARGUMENT
        assert "no '..'" in e.value.message


def test_a_nack_may_carry_the_dependencys_retry_after(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue)
    client.send(queue, 1)
    d = client.receive(queue, max=1, wait=1)[0]
    with pytest.raises(ValueError):
        client.nack(queue, d.receipt, delay=1, retry_after=1)
    n = client.nack(queue, d.receipt, retry_after=30, error="HTTP 429")
    assert n.state == "delayed"
    assert client.receive(queue, max=1) == [], "it waits the dependency's 30 s"


def test_an_operator_forces_a_breaker(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue, breaker={"probe_every_ms": 100})
    before = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)
    flow = client.force_breaker(queue, "open")
    assert isinstance(flow, sluice.Flow) and flow.adaptive is None
    b = flow.breaker
    assert b is not None and b.state is sluice.BreakerState.OPEN and b.forced
    assert b.state == "open" and b.opened_total == 1 and b.next_probe_at is None
    assert b.since.tzinfo is not None and b.since >= before
    last = b.transitions[-1]
    assert (last.from_state, last.to, last.reason) == ("closed", "open", sluice.BreakerReason.FORCED)
    assert [p.breaker for p in flow.history][-1] is sluice.BreakerState.OPEN
    shown = client.stats(queue).flow
    assert shown is not None and shown.breaker is not None and shown.breaker.forced
    closed = client.force_breaker(queue, "closed").breaker
    assert closed is not None and closed.state is sluice.BreakerState.CLOSED and not closed.forced
    with pytest.raises(ValueError):
        client.force_breaker(queue, "ajar")


def test_stats_show_a_governed_queues_rate_and_breaker(client: sluice.Client, queue: str) -> None:
    client.put_queue(
        queue,
        adaptive={"min_per_min": 60, "max_per_min": 6000},
        breaker={"min_calls": 10},
        rate_limit=sluice.RateLimit(600, 60),
    )
    client.send(queue, 1)
    d = client.receive(queue, max=1, wait=1)[0]
    client.nack(queue, d.receipt, retry_after=30)
    flow = client.stats(queue).flow
    assert flow is not None and flow.adaptive is not None and flow.breaker is not None
    a = flow.adaptive
    assert (a.rate_per_min, a.min_per_min, a.max_per_min, a.ceiling_per_min) == (60, 60, 6000, 600)
    assert a.congestion_total == 1
    assert a.hold_until is not None
    wait = a.hold_until - datetime.datetime.now(datetime.timezone.utc)
    assert 20 < wait.total_seconds() <= 30, "held for the dependency's Retry-After"
    assert flow.breaker.state is sluice.BreakerState.CLOSED
    assert client.put_queue(queue + "-plain") is not None
    assert client.stats(queue + "-plain").flow is None


def test_rfc3339_times_parse_to_utc() -> None:
    from sluice.models import parse_rfc3339

    utc = datetime.timezone.utc
    assert parse_rfc3339("2026-01-01T10:00:00Z") == datetime.datetime(2026, 1, 1, 10, tzinfo=utc)
    assert parse_rfc3339("2026-01-01T10:00:00.25Z").microsecond == 250_000
    assert parse_rfc3339("2026-01-01T10:00:00.123456789Z").microsecond == 123_456
    assert parse_rfc3339("2026-01-01T12:00:00+02:00") == datetime.datetime(2026, 1, 1, 10, tzinfo=utc)
    for bad in ["2026-01-01", "yesterday", "2026-13-01T00:00:00Z"]:
        with pytest.raises(sluice.DecodeError):
            parse_rfc3339(bad)
