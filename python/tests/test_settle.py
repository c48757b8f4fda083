"""The worker's ack batcher against a fake client: batches, outcomes, and that it neither
deadlocks nor hangs a shutdown."""

from __future__ import annotations

import threading
import time
from typing import Any, List, Optional, Tuple

from sluice import NO_RESULT, AckOutcome, ApiError, ErrorCode, TransportError
from sluice.worker.metrics import WorkerMetrics
from sluice.worker.settle import AckBatcher


class FakeClient:
    """Answers ack batches as told; records what it was sent."""

    def __init__(self, answer: Any = None, gate: Optional[threading.Event] = None) -> None:
        self.batches: List[List[Tuple[str, Any]]] = []
        self.answer = answer
        self.gate = gate

    def ack_batch(self, queue: str, items: List[Tuple[str, Any]]) -> List[AckOutcome]:
        if self.gate is not None:
            self.gate.wait(10)
        self.batches.append(list(items))
        if isinstance(self.answer, BaseException):
            raise self.answer
        if callable(self.answer):
            return self.answer(items)
        return [AckOutcome(r, True) for r, _ in items]


def outcomes() -> Tuple[List[Any], Any]:
    got: List[Any] = []
    lock = threading.Lock()

    def done(err: Any, retried: bool) -> None:
        with lock:
            got.append(err)

    return got, done


def test_acks_that_arrive_together_share_a_batch() -> None:
    gate = threading.Event()
    client = FakeClient(gate=gate)
    b = AckBatcher(client, "q", WorkerMetrics(), lambda n: 0.01, max_pending=100)  # type: ignore[arg-type]
    got, done = outcomes()
    for i in range(10):
        b.submit(f"r{i}", i, 1, done)
    gate.set()
    b.close(5)
    assert sum(len(x) for x in client.batches) == 10 and len(client.batches) <= 2
    assert got == [None] * 10


def test_an_ack_resubmitted_from_its_callback_does_not_deadlock_a_full_batcher() -> None:
    def too_large_once(items: List[Tuple[str, Any]]) -> List[AckOutcome]:
        return [
            AckOutcome(r, False, "payload_too_large", "too large") if res is not NO_RESULT and r == "big"
            else AckOutcome(r, True)
            for r, res in items
        ]

    client = FakeClient(answer=too_large_once)
    b = AckBatcher(client, "q", WorkerMetrics(), lambda n: 0.01, max_pending=1)  # type: ignore[arg-type]
    final: List[Any] = []

    def done(err: Any, retried: bool) -> None:
        if isinstance(err, ApiError) and err.code is ErrorCode.PAYLOAD_TOO_LARGE:
            b.submit("big", NO_RESULT, 0, done)  # on the batcher's own thread
        else:
            final.append(err)

    b.submit("big", {"x": 1}, 10, done)
    for i in range(3):
        b.submit(f"r{i}", 1, 1, lambda e, r: final.append(e))
    b.close(5)
    assert final == [None] * 4, final


def test_an_unexpected_error_fails_its_batch_and_the_batcher_goes_on() -> None:
    calls = []

    def broken_once(items: List[Tuple[str, Any]]) -> List[AckOutcome]:
        calls.append(items)
        if len(calls) == 1:
            raise KeyError("results")
        return [AckOutcome(r, True) for r, _ in items]

    client = FakeClient(answer=broken_once)
    b = AckBatcher(client, "q", WorkerMetrics(), lambda n: 0.01, max_pending=1)  # type: ignore[arg-type]
    got, done = outcomes()
    b.submit("a", 1, 1, done)
    while not got:
        time.sleep(0.01)
    b.submit("b", 1, 1, done)
    b.close(5)
    assert len(got) == 2 and got[1] is None and "acknowledging failed" in str(got[0])


def test_close_gives_up_on_an_unreachable_broker() -> None:
    client = FakeClient(answer=TransportError("down", connect=True))
    b = AckBatcher(client, "q", WorkerMetrics(), lambda n: 0.05, max_pending=10)  # type: ignore[arg-type]
    got, done = outcomes()
    b.submit("a", 1, 1, done)
    started = time.monotonic()
    b.close(0.5)
    assert time.monotonic() - started < 3
    assert len(got) == 1 and isinstance(got[0], TransportError)
