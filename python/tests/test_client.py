"""The client against a real broker: every route of SPEC §8."""

from __future__ import annotations

import math
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
        ("get", "/v1/queues/{q}/summary"),
        ("get", "/v1/tasks/{id}"), ("post", "/v1/tasks/{id}/cancel"),
        ("get", "/v1/tasks/{id}/events"), ("get", "/v1/queues/{q}/scaling"),
        ("post", "/v1/redrives"), ("get", "/v1/redrives"), ("get", "/v1/redrives/{id}"),
        ("post", "/v1/redrives/{id}/cancel"), ("get", "/v1/audit"), ("get", "/healthz"),
        ("get", "/readyz"), ("get", "/openapi.json"), ("get", "/metrics"),
    }
    doc = client.openapi()
    served = {(m, p) for p, ops in doc["paths"].items() for m in ops if m in ("get", "put", "post", "delete")}
    assert served - covered == set(), "routes without a client method"
    assert covered - served == set(), "client methods for routes the broker does not serve"


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
    assert client.task_status(ids[2]).status is TaskStatus.FAILURE

    rel = client.release(queue, got[3].receipt)
    assert rel.state == "visible"
    again = client.receive(queue, max=10, wait=1)
    assert {d.id: d.receive_count for d in again}.get(ids[3]) == 1, "a release does not use an attempt"

    mv = client.move(queue, got[4].receipt, other, error="elsewhere")
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


def test_transport_errors_are_typed(sluice_bin: str) -> None:
    c = sluice.Client("http://127.0.0.1:9", retry=sluice.RetryPolicy.none(), connect_timeout=1)
    with pytest.raises(sluice.TransportError) as e:
        c.get_queue("x")
    assert e.value.connect and e.value.transient
