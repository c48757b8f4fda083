"""The worker against a real broker: the task semantics, case by case."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List

import pytest

import sluice
from sluice import Outcome, TaskStatus
from conftest import Broker, wait_until


def fast_queue(client: sluice.Client, queue: str, **kw: Any) -> None:
    settings: Dict[str, Any] = dict(backoff_base=0.05, backoff_max=0.2)
    settings.update(kw)
    client.put_queue(queue, **settings)


def worker_of(client: sluice.Client, queue: str, **kw: Any) -> sluice.Worker:
    kw.setdefault("poll_wait", 0.2)
    kw.setdefault("max_backoff", 0.2)
    return sluice.Worker(client, queue, **kw)


def test_flaky_handler_succeeds_on_retry(client: sluice.Client, queue: str) -> None:
    fast_queue(client, queue, max_receive_count=3)
    w = worker_of(client, queue)
    calls: List[int] = []

    @w.task
    def charge(order: int, amount: float = 0.0) -> Dict[str, Any]:
        ctx = sluice.current_task()
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("payment API: 503")
        return {"order": order, "amount": amount, "attempt": ctx.attempt, "key": ctx.key, "priority": ctx.priority}

    w.start()
    try:
        tid = client.enqueue(queue, "charge", [7], {"amount": 9.5}, key="acme", priority=8)
        info = client.wait_for(tid, timeout=20)
    finally:
        w.stop()
    assert info.status is TaskStatus.SUCCESS
    assert info.result == {"order": 7, "amount": 9.5, "attempt": 2, "key": "acme", "priority": 8}
    assert info.receive_count == 2 and calls == [1, 2]
    snap = w.metrics.snapshot()
    assert snap.count(Outcome.RETRY) == 1 and snap.count(Outcome.SUCCESS) == 1


def test_always_failing_lands_in_the_dlq_after_max_attempts_and_the_hook_fires_once(
    client: sluice.Client, queue: str
) -> None:
    fast_queue(client, queue, max_receive_count=3)
    w = worker_of(client, queue)
    hooks: List[tuple] = []
    attempts: List[int] = []

    @w.task("sync_inventory")
    def sync(sku: str) -> None:
        attempts.append(sluice.current_task().attempt)
        raise RuntimeError("database is down")

    @w.on_dead_letter
    def alert(task_id: str, error: str) -> None:
        hooks.append((task_id, error))
        raise ValueError("the pager is down too")  # a failing hook changes nothing

    w.start()
    try:
        tid = client.enqueue(queue, "sync_inventory", ["sku-1"])
        info = client.wait_for(tid, timeout=20)
        time.sleep(0.3)  # nothing more may happen
    finally:
        w.stop()
    assert info.status is TaskStatus.FAILURE
    assert info.error == "RuntimeError: database is down"
    assert attempts == [1, 2, 3]
    dead = client.get_message(tid)
    assert dead.queue == f"{queue}.dlq" and dead.dead_letter_reason == "exhausted"
    assert len(dead.attempts) == 3 and dead.source_queue == queue
    assert hooks == [(tid, "RuntimeError: database is down")]
    snap = w.metrics.snapshot()
    assert snap.count(Outcome.FAILURE) == 1 and snap.count(Outcome.RETRY) == 2 and snap.dead_lettered == 1


def test_on_dead_letter_fires_once_per_task_permanent_and_exhausted(client: sluice.Client, queue: str) -> None:
    fast_queue(client, queue, max_receive_count=2)
    w = worker_of(client, queue, concurrency=4)
    hooks: List[str] = []
    lock = threading.Lock()

    @w.task
    def pay(n: int) -> str:
        if n % 2:
            raise sluice.Permanent(f"card {n} refused")
        raise TimeoutError("gateway timeout")

    @w.on_dead_letter
    async def alert(task_id: str, error: str) -> None:  # async hooks work too
        await asyncio.sleep(0)
        with lock:
            hooks.append(task_id)

    w.start()
    try:
        ids = [client.enqueue(queue, "pay", [n]) for n in range(6)]
        infos = [client.wait_for(i, timeout=20) for i in ids]
        time.sleep(0.3)
    finally:
        w.stop()
    assert all(i.status is TaskStatus.FAILURE for i in infos)
    assert sorted(hooks) == sorted(ids), "exactly once per task"
    for n, i in enumerate(infos):
        assert i.receive_count == (1 if n % 2 else 2)
        m = client.get_message(i.id)
        assert m.dead_letter_reason == ("rejected" if n % 2 else "exhausted")
    assert infos[1].error == "card 1 refused"


def test_malformed_bodies_are_moved_byte_exact_to_the_unprocessable_queue(client: sluice.Client, queue: str) -> None:
    fast_queue(client, queue)
    w = worker_of(client, queue)
    ran: List[int] = []

    @w.task
    def add(a: int, b: int) -> int:
        ran.append(1)
        return a + b

    raw = b"\xff\xfe\x00not json\x00\x01"
    sent = {
        client.send_raw(queue, raw).id: ("bytes", raw),
        client.send_text(queue, "plain text").id: ("text", "plain text"),
        client.send(queue, [1, 2, 3]).id: ("json", [1, 2, 3]),
        client.send(queue, {"args": [1]}).id: ("json", {"args": [1]}),
        client.enqueue(queue, "nope", [1]): ("unknown task", None),
        client.enqueue(queue, "add", [1], {"c": 2}): ("misfit", None),
    }
    good = client.enqueue(queue, "add", [1, 2])
    w.start()
    try:
        assert client.wait_for(good, timeout=20).result == 3
        wait_until(lambda: client.stats(f"{queue}.unprocessable").visible == len(sent), what="6 moves")
    finally:
        w.stop()
    assert ran == [1]
    unp = client.get_queue(f"{queue}.unprocessable")
    assert unp.config.max_receive_count == 0 and unp.config.dead_letter_queue is None
    for mid, (what, body) in sent.items():
        m = client.get_message(mid)
        assert m.queue == f"{queue}.unprocessable", what
        assert m.source_queue == queue
        assert m.last_error, what
        if body is not None:
            assert m.body == body, what
    assert client.get_message(next(iter(sent))).body == raw
    errors = {client.get_message(i).last_error for i in sent}
    assert any("unknown task 'nope'" in e for e in errors)
    assert any("do not fit" in e and "'b'" in e for e in errors)
    assert client.stats(f"{queue}.dlq").visible == 0, "nothing was dead-lettered"
    assert w.metrics.snapshot().count(Outcome.UNPROCESSABLE) == 6


def test_oversized_result_is_dropped_and_the_task_succeeds(client: sluice.Client, queue: str) -> None:
    fast_queue(client, queue)
    w = worker_of(client, queue)

    @w.task
    def render(size: int) -> str:
        return "x" * size

    w.start()
    try:
        big = client.enqueue(queue, "render", [5 * 1024 * 1024])
        small = client.enqueue(queue, "render", [10])
        big_info = client.wait_for(big, timeout=30)
        small_info = client.wait_for(small, timeout=30)
    finally:
        w.stop()
    assert big_info.status is TaskStatus.SUCCESS and big_info.result is None
    assert small_info.result == "x" * 10
    assert w.metrics.snapshot().results_dropped == 1


def test_retry_after_waits_the_named_delay(client: sluice.Client, queue: str) -> None:
    fast_queue(client, queue, max_receive_count=3)
    w = worker_of(client, queue)
    seen: List[float] = []

    @w.task
    def call_upstream() -> str:
        seen.append(time.monotonic())
        if len(seen) == 1:
            raise sluice.RetryAfter("429 from upstream", 1.0)
        return "ok"

    w.start()
    try:
        info = client.wait_for(client.enqueue(queue, "call_upstream"), timeout=20)
    finally:
        w.stop()
    assert info.status is TaskStatus.SUCCESS
    assert seen[1] - seen[0] >= 0.95, "the retry waited the Retry-After, not the 50 ms backoff"


def test_long_task_keeps_its_lease_and_real_concurrency(client: sluice.Client, queue: str) -> None:
    fast_queue(client, queue, visibility_timeout=1.0)
    w = worker_of(client, queue, concurrency=6)
    running = [0, 0]
    lock = threading.Lock()

    @w.task
    def infer(i: int) -> int:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        time.sleep(2.2)  # over two lease lengths: only extensions keep it ours
        with lock:
            running[0] -= 1
        return i

    w.start()
    started = time.monotonic()
    try:
        ids = [client.enqueue(queue, "infer", [i]) for i in range(6)]
        infos = [client.wait_for(i, timeout=30) for i in ids]
    finally:
        w.stop()
    took = time.monotonic() - started
    assert [i.result for i in infos] == list(range(6))
    assert all(i.receive_count == 1 for i in infos), "no lease expired"
    assert running[1] == 6 and took < 5, (running, took)


def test_async_handlers_and_request_reply(client: sluice.Client, queue: str) -> None:
    fast_queue(client, queue)
    w = worker_of(client, queue)

    @w.task
    async def slow_add(a: int, b: int) -> int:
        await asyncio.sleep(0.05)
        assert sluice.current_task().task == "slow_add"
        return a + b

    w.start()
    try:
        assert client.call(queue, "slow_add", [2, 3], timeout=10) == 5
        late = client.enqueue(queue, "slow_add", [1, 1], delay=5)
        with pytest.raises(sluice.TaskTimeout):
            client.wait_for(late, timeout=0.3)
    finally:
        w.stop()


def test_progress_and_cooperative_cancel(client: sluice.Client, queue: str) -> None:
    fast_queue(client, queue)
    w = worker_of(client, queue, extend_every=0.1)
    saw_cancel = threading.Event()

    @w.task
    def export(rows: int) -> int:
        ctx = sluice.current_task()
        for i in range(rows):
            ctx.progress(100.0 * (i + 1) / rows, f"row {i + 1}")
            if ctx.wait_cancelled(0.1):
                saw_cancel.set()
                raise sluice.Cancelled()
        return rows

    w.start()
    try:
        tid = client.enqueue(queue, "export", [1000])
        wait_until(lambda: (client.task_status(tid).progress or sluice.Progress(0, None, "")).pct > 0, what="progress")
        info = client.task_status(tid)
        assert info.status is TaskStatus.STARTED and info.progress and info.progress.detail
        client.cancel(tid)
        final = client.wait_for(tid, timeout=10)
    finally:
        w.stop()
    assert saw_cancel.is_set()
    assert final.status is TaskStatus.CANCELLED
    assert w.metrics.snapshot().count(Outcome.CANCELLED) == 1


def test_graceful_shutdown_finishes_or_releases(client: sluice.Client, queue: str) -> None:
    fast_queue(client, queue, max_receive_count=1)
    w = worker_of(client, queue, shutdown_grace=0.5)
    release = threading.Event()

    @w.task
    def job(seconds: float) -> str:
        if seconds > 1:
            release.wait(10)  # outlives the grace period
        else:
            time.sleep(seconds)
        return "done"

    w.start()
    quick = client.enqueue(queue, "job", [0.3])
    slow = client.enqueue(queue, "job", [5])
    wait_until(lambda: w.in_flight == 2, what="both running")
    assert w.stop(15), "the worker stopped"
    release.set()
    assert client.task_status(quick).status is TaskStatus.SUCCESS, "finished within the grace"
    m = client.get_message(slow)
    assert m.state == "visible" and m.receive_count == 0, "released without using its only attempt"
    assert w.metrics.snapshot().count(Outcome.RELEASED) == 1
    w2 = worker_of(client, queue)
    w2.register("job", lambda seconds: "second worker")
    w2.start()
    try:
        info = client.wait_for(slow, timeout=10)
    finally:
        w2.stop()
    assert info.status is TaskStatus.SUCCESS and info.result == "second worker"


def test_broker_restart_mid_run(own_broker: Broker) -> None:
    client = own_broker.client()
    queue = "outage"
    client.put_queue(queue, backoff_base=0.05, backoff_max=0.2, visibility_timeout=5)
    w = worker_of(client, queue, concurrency=4, max_backoff=0.3)
    done: List[int] = []

    @w.task
    def step(i: int) -> int:
        time.sleep(0.4)
        done.append(i)
        return i * 10

    w.start()
    ids = [client.enqueue(queue, "step", [i]) for i in range(12)]
    wait_until(lambda: len(done) >= 2, what="work under way")
    own_broker.kill()
    time.sleep(1.5)  # the worker's receives and acks fail meanwhile
    own_broker.start()
    try:
        infos = [client.wait_for(i, timeout=60) for i in ids]
    finally:
        w.stop()
    assert [i.status for i in infos] == [TaskStatus.SUCCESS] * 12
    assert [i.result for i in infos] == [i * 10 for i in range(12)]
    assert w.metrics.snapshot().broker_errors > 0


KILLED_WORKER = """
import os, sys, time
import sluice

client = sluice.Client(sys.argv[1])
worker = sluice.Worker(client, sys.argv[2], concurrency=8, poll_wait=0.2)

@worker.task
def square(i):
    time.sleep(0.002)
    with open(sys.argv[3], "a") as f:  # the test kills us once enough have run
        f.write(f"{i}\\n")
    return i * i

worker.run()
"""


def test_a_worker_killed_mid_batch_loses_no_result(client: sluice.Client, queue: str, tmp_path: Any) -> None:
    """Acks go in batches; a worker killed with some finished tasks not yet acked leaves
    them leased, and they run again elsewhere: every task ends SUCCESS with its result."""
    import os
    import signal
    import subprocess
    import sys

    fast_queue(client, queue, visibility_timeout=2)
    ids = client.enqueue_many(queue, [("square", [i]) for i in range(400)])
    ran = tmp_path / "ran"
    ran.touch()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WORKER, client.base_url, queue, str(ran)], env=env)
    try:
        wait_until(lambda: len(ran.read_text().split()) >= 100, timeout=30, what="the worker under way")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finished_before = len(ran.read_text().split())
    assert finished_before < 400, "killed mid-run"
    w = worker_of(client, queue, concurrency=8)
    w.register("square", lambda i: i * i)
    w.start()
    try:
        infos = [client.wait_for(t, timeout=30) for t in ids]
    finally:
        w.stop()
    assert [i.status for i in infos] == [TaskStatus.SUCCESS] * 400
    assert [i.result for i in infos] == [i * i for i in range(400)]
