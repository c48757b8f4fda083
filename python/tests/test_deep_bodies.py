"""JSON bodies nested deeply: the broker refuses more than 64 levels, and a receive never
fails on a body stored before that rule, however deep."""

from __future__ import annotations

import json

import pytest

import sluice
from test_http import serve

DEEP = 5_000  # far past Python's parser, which stops at about 1,000 levels


def _answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body), body,
    )


def _delivery(n: int, body: str) -> str:
    return (
        f'{{"id":"000000000000000{n}","receipt":"r{n}","body":{body},"attributes":{{}},'
        f'"receive_count":1,"max_receive_count":5,"enqueued_at":"2026-01-01T00:00:00Z",'
        f'"last_error":null,"lease_deadline":"2026-01-01T00:00:30Z"}}'
    )


def test_a_body_too_deep_to_decode_is_delivered_as_its_text_beside_the_rest() -> None:
    deep = "[" * DEEP + "1" + "]" * DEEP
    with pytest.raises(RecursionError):
        json.loads(deep)  # what a receive would otherwise have raised
    receive = '{"messages":[%s,%s,%s]}' % (
        _delivery(1, '{"n": 1, "s": "[[[\\"]]"}'),
        _delivery(2, deep),
        _delivery(3, '"three"'),
    )
    rejected = b'{"state":"dead_lettered","queue":"q.dlq"}'
    url = serve([_answer(receive.encode()), _answer(receive.encode()), _answer(rejected)])
    c = sluice.Client(url, retry=sluice.RetryPolicy.none())

    got = c.receive("q", max=3)
    assert [d.id for d in got] == ["0000000000000001", "0000000000000002", "0000000000000003"]
    assert got[0].body == {"n": 1, "s": '[[["]]'} and got[0].decode_error is None
    assert got[2].body == "three" and got[2].kind is sluice.BodyKind.JSON
    deep_one = got[1]
    assert deep_one.body == deep.encode(), "kept as its exact JSON text"
    assert deep_one.kind is sluice.BodyKind.JSON
    assert deep_one.decode_error is not None and "deeper" in deep_one.decode_error
    assert deep_one.receipt == "r2", "it can be settled"

    # The same through the worker's call, which acknowledges and leases in one.
    acked, again = c.ack_and_receive("q", [], max=3)
    assert acked == [] and [d.decode_error is None for d in again] == [True, False, True]
    assert c.reject("q", deep_one.receipt, error=deep_one.decode_error).dead_lettered


def test_the_broker_refuses_json_nested_past_64_levels(client: sluice.Client, queue: str) -> None:
    def nested(levels: int) -> object:
        value: object = 1
        for _ in range(levels):
            value = [value]
        return value

    client.put_queue(queue)
    client.send(queue, nested(64))
    with pytest.raises(sluice.ApiError) as e:
        client.send(queue, nested(65))
    assert e.value.code is sluice.ErrorCode.INVALID_ARGUMENT and "64" in str(e.value)
    got = client.receive(queue, max=10)
    assert len(got) == 1 and got[0].decode_error is None
    with pytest.raises(sluice.ApiError) as e:
        client.ack(queue, got[0].receipt, result=nested(65))
    assert e.value.code is sluice.ErrorCode.INVALID_ARGUMENT
    client.ack(queue, got[0].receipt, result=nested(64))
