"""Keys, priorities, per-key limits, spread rate limits and per-key breakers against a real
broker."""

from __future__ import annotations

import pytest

import sluice
from sluice import ApiError, ErrorCode
from conftest import wait_until


def test_keys_and_priorities_order_deliveries(client: sluice.Client, queue: str) -> None:
    q = client.put_queue(queue, default_priority=3, key_weights={"gold-*": 2})
    assert (q.config.default_priority, q.config.key_weights) == (3, {"gold-*": 2})
    low = client.send(queue, "low", key="acme").id
    text = client.send_text(queue, "text", key="acme", priority=6).id
    urgent = client.enqueue(queue, "t", [], key="beta", priority=9)
    batch = client.enqueue_many(queue, [sluice.TaskSpec("t", key="gold-1", priority=7)])
    got = [client.receive(queue, max=1)[0] for _ in range(4)]
    assert [d.id for d in got] == [urgent, batch[0], text, low], "by priority"
    assert [(d.key, d.priority) for d in got] == [("beta", 9), ("gold-1", 7), ("acme", 6), ("acme", 3)]
    view = client.get_message(low)
    assert (view.key, view.priority) == ("acme", None), "a view shows the priority sent, none here"
    with pytest.raises(sluice.InvalidInput):
        client.send(queue, 1, priority=10)
    with pytest.raises(ApiError) as e:
        client.send(queue, 1, key="")
    assert e.value.code is ErrorCode.INVALID_ARGUMENT and "key" in e.value.message


def test_key_limits_hold_a_key_not_the_others(client: sluice.Client, queue: str) -> None:
    q = client.put_queue(queue, key_limits={"max_in_flight": 1})
    assert q.config.key_limits == {"max_in_flight": 1}
    for k in ("a", "a", "a", "b"):
        client.send(queue, k, key=k)
    got = client.receive(queue, max=10)
    assert sorted(d.key for d in got) == ["a", "b"], "one of each key at a time"
    cleared = client.put_queue(queue, key_limits=sluice.CLEAR)
    assert cleared.config.key_limits is None
    assert len(client.receive(queue, max=10)) == 2


def test_rate_limit_burst_round_trips_and_spreads(client: sluice.Client, queue: str) -> None:
    q = client.put_queue(queue, rate_limit=sluice.RateLimit(10, 10.0, burst=2))
    assert q.config.rate_limit == sluice.RateLimit(10, 10.0, 2)
    client.send_batch(queue, list(range(5)))
    assert len(client.receive(queue, max=10)) == 2, "the burst, then one a second"


def test_keys_lists_what_each_tenant_holds(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue, key_weights={"vip-*": 4}, key_limits={"max_in_flight": 5})
    for _ in range(3):
        client.send(queue, 1, key="acme")
    client.send(queue, 1, key="vip-beta")
    client.send(queue, 1)
    client.receive(queue, max=1)
    assert client.stats(queue).active_keys == 2
    page = client.keys(queue)
    assert [k.key for k in page.keys][0] == "acme", "most waiting first"
    by_key = {k.key: k for k in page.keys}
    assert set(by_key) == {"acme", "vip-beta", None}, "None is the messages sent without a key"
    assert by_key["vip-beta"].weight == 4 and by_key["acme"].weight == 1
    assert by_key["acme"].max_in_flight == 5
    assert sum(k.in_flight for k in page.keys) == 1
    assert sum(k.delivered_1m or 0 for k in page.keys) == 1
    assert page.active_keys == 2 and page.next_cursor is None
    first = client.keys(queue, order="oldest", limit=1)
    assert len(first.keys) == 1 and first.next_cursor is not None
    rest = client.keys(queue, order="oldest", limit=10, cursor=first.next_cursor)
    assert len(rest.keys) == 2
    assert len(client.keys(queue, order="backlog", cursor=first.next_cursor).keys) == 3, (
        "a cursor of another order starts over"
    )
    with pytest.raises(ApiError) as e:
        client.keys(queue, limit=0)
    assert e.value.code is ErrorCode.INVALID_ARGUMENT


def test_dead_letters_by_key_counted_listed_and_redriven(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue, max_receive_count=1)
    for i, tenant in enumerate(["acme", "acme", "acme", "globex", None]):
        client.send(queue, {"n": i}, key=tenant)
    for d in client.receive(queue, max=5, wait=1):
        client.reject(queue, d.receipt, error="upstream refused")
    dlq = f"{queue}.dlq"
    s = client.summary(dlq, group_by="key")
    assert [(g.key, g.count) for g in s.groups] == [("acme", 3), ("globex", 1), (None, 1)]
    assert client.summary(dlq, group_by="reason", key="globex").total == 1
    page = client.browse(dlq, key="acme")
    assert sorted(m.body["n"] for m in page.messages) == [0, 1, 2]
    job = client.create_redrive(dlq, filter=sluice.RedriveFilter(key="acme"))
    assert job.filter.key == "acme"
    wait_until(lambda: client.get_redrive(job.id).state == "completed", what="the redrive by key")
    assert client.get_redrive(job.id).moved == 3
    assert [(g.key, g.count) for g in client.summary(dlq, group_by="key").groups] == [
        ("globex", 1), (None, 1)
    ]
    with pytest.raises(ApiError) as e:
        client.browse(dlq, key="a\u0001b")
    assert e.value.code is ErrorCode.INVALID_ARGUMENT and "key" in str(e.value)
    with pytest.raises(ApiError) as e:
        client.create_redrive(dlq, filter=sluice.RedriveFilter(key="a\u0001b"))
    assert e.value.code is ErrorCode.INVALID_ARGUMENT and "filter.key" in str(e.value)


def test_a_schedules_messages_carry_its_key_and_priority(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue)
    t = client.put_schedule("py-tenant", queue, {"task": "sync"}, every=60, key="acme", priority=7)
    assert (t.key, t.priority) == ("acme", 7)
    client.trigger_schedule("py-tenant")
    [d] = client.receive(queue, max=1, wait=1)
    assert (d.key, d.priority) == ("acme", 7)
    with pytest.raises(ApiError) as e:
        client.put_schedule("py-bad", queue, 1, every=60, priority=12)
    assert e.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(ApiError) as e:
        client.put_schedule("py-bad", queue, 1, every=60, key="")
    assert e.value.code is ErrorCode.INVALID_ARGUMENT and "key" in str(e.value)
    client.delete_schedule("py-tenant")


def test_key_rates_hold_a_spent_key_not_the_others(client: sluice.Client, queue: str) -> None:
    rate = {"limit": 2, "period_ms": 60000, "burst": 2}
    q = client.put_queue(queue, key_limits={"rate_limit": rate})
    assert q.config.key_limits == {"rate_limit": rate}
    for k in ("a", "a", "a", "b"):
        client.send(queue, k, key=k)
    got = client.receive(queue, max=10)
    assert sorted(d.key for d in got) == ["a", "a", "b"], "two of a in the minute, b its own"
    for d in got:
        client.ack(queue, d.receipt)
    assert client.receive(queue, max=10) == [], "a spent its rate; acks do not give it back"
    listed = {k.key: k for k in client.keys(queue).keys}
    assert listed["a"].rate_limit == sluice.RateLimit(2, 60.0, 2)
    with pytest.raises(ApiError) as e:
        client.put_queue(queue, key_limits={"rate_limit": {"limit": 0, "period_ms": 1000}})
    assert "key_limits.rate_limit.limit" in e.value.message


def test_an_operator_forces_one_keys_breaker(client: sluice.Client, queue: str) -> None:
    client.put_queue(queue, breaker={"scope": "key"}, adaptive={"min_per_min": 60, "max_per_min": 600, "scope": "key"})
    tenant = "acme/eu west"  # a slash and a space: the key travels as one path segment
    client.send(queue, 1, key=tenant)
    client.send(queue, 2, key="other")
    f = client.force_key_breaker(queue, tenant, "open")
    assert isinstance(f, sluice.KeyFlow) and (f.breaker, f.forced) == ("open", True)
    assert f.rate_per_min == 60
    got = client.receive(queue, max=10, wait=1)
    assert [d.key for d in got] == ["other"], "the forced key waits, the other goes"
    keys = {k.key: k for k in client.keys(queue, order="breaker").keys}
    assert keys[tenant].flow is not None and keys[tenant].flow.breaker == "open"
    assert client.keys(queue, order="breaker").keys[0].key == tenant, "open breakers first"
    closed = client.force_key_breaker(queue, tenant, "closed")
    assert (closed.breaker, closed.forced) == ("closed", False)
    assert [d.key for d in client.receive(queue, max=10, wait=1)] == [tenant]
    plain = queue + "-plain"
    client.put_queue(plain, breaker={})
    with pytest.raises(ApiError) as e:
        client.force_key_breaker(plain, tenant, "open")
    assert e.value.code is ErrorCode.CONFLICT and "per-key breaker" in str(e.value)
    with pytest.raises(ValueError):
        client.force_key_breaker(queue, tenant, "ajar")


def test_deliveries_and_views_carry_the_trace_context_sent(
    broker: "object", client: sluice.Client, queue: str
) -> None:
    import httpx

    client.put_queue(queue)
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    r = httpx.post(
        f"{broker.url}/v1/queues/{queue}/messages",  # type: ignore[attr-defined]
        json={"body": 1},
        headers={"traceparent": parent, "tracestate": "rojo=1"},
    )
    assert r.status_code == 201, r.text
    untraced = client.send(queue, 2).id
    got = client.receive(queue, max=10)
    assert [d.trace for d in got] == [{"traceparent": parent, "tracestate": "rojo=1"}, None]
    assert client.get_message(r.json()["id"]).trace == {"traceparent": parent, "tracestate": "rojo=1"}
    assert client.get_message(untraced).trace is None
