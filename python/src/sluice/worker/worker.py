"""The worker: runs registered task handlers on the tasks of one queue and turns each
handler's outcome into the task lifecycle, the same way the Rust worker does.

========================================  ==============================================  ==============
handler outcome                           the worker                                      the task
========================================  ==============================================  ==============
returns a value                           ack with the value as result (dropped with a    ``SUCCESS``
                                          warning above the size cap)
raises any exception                      nack: the queue's backoff applies               ``RETRY``, or
                                                                                          ``FAILURE``
                                                                                          after the last
                                                                                          attempt
raises :class:`RetryAfter`                nack with that delay                            ``RETRY``
raises :class:`Permanent`                 reject: DLQ now                                 ``FAILURE``
a body that is not an envelope, an        move to ``<queue>.unprocessable`` with the      (moved)
unknown task, arguments that do not fit   reason, byte-exact
anything, after ``Client.cancel``         settle; the broker keeps it cancelled           ``CANCELLED``
========================================  ==============================================  ==============

When the worker dead-letters a task (permanent error, or a failed last attempt) the
``on_dead_letter(task_id, error)`` hook runs once; its failure is logged and changes nothing.

Why threads: handlers are ordinary (often blocking: HTTP calls, model inference) Python
functions, so they run on ``concurrency`` threads started with the worker, one task each at
a time; ``async def`` handlers run on an event loop (the one given, or a fresh one in the
task's thread). Deliveries are leased in batches, and the acks of finished tasks go to the
broker in batches too (``settle.py``): one round trip per batch, not per task. One
keeper thread extends the leases of running tasks every third of the visibility timeout, so
a long task is not handed to a second worker; the extension's answer also carries a cancel.

Why settlements retry without a limit: a settlement records work that is already done.
Giving up on an ack because the broker was restarting would turn a success into a second
run. Each is safe to repeat: a receipt names one delivery, so a repeat whose first answer
was lost answers ``receipt_stale`` instead of acting twice.

On shutdown the worker stops leasing, lets running tasks finish within the grace period and
releases the rest at once for redelivery (a release does not count as an attempt).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import queue as queues
import random
import signal
import threading
import time
from concurrent.futures import Future
from typing import Any, Awaitable, Callable, Dict, List, Optional, TypeVar, Union, cast

from .._transport import dumps
from ..client import CLEAR, NO_RESULT, Client
from ..envelope import EnvelopeError, TaskEnvelope
from ..errors import ApiError, ErrorCode, InvalidInput, SluiceError
from ..models import Delivery, TaskStatus
from .context import _CURRENT, TaskContext
from .errors import Cancelled, Permanent, RetryAfter
from .metrics import Outcome, WorkerMetrics
from .settle import AckBatcher

__all__ = ["Worker"]

log = logging.getLogger("sluice.worker")

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
Hook = Callable[[str, str], Any]

#: How long after the grace period a stopping worker waits for releases to reach the broker.
RELEASE_WAIT = 10.0
#: How long the lease loop waits for more free slots once one is free.
LEASE_GATHER = 0.002


class _Running:
    """One delivery whose handler runs; ``owner`` says who settles it."""

    def __init__(self, d: Delivery, ctx: Optional[TaskContext], extend_at: float) -> None:
        self.delivery = d
        self.ctx = ctx
        self.next_extend = extend_at
        self.lease_lost = False
        self.owner: Optional[str] = None  # "handler" once it settles, "shutdown" once released
        self.counted = False  # its outcome is in the metrics already


class Worker:
    """A worker of one queue.

    ::

        client = sluice.Client("http://127.0.0.1:7878")
        worker = sluice.Worker(client, "images", concurrency=8)

        @worker.task("resize")
        def resize(url: str, width: int) -> str:
            if width <= 0:
                raise sluice.Permanent("width must be positive")
            return f"{url} at {width}px"

        @worker.on_dead_letter
        def alert(task_id: str, error: str) -> None:
            print(f"ALERT: task {task_id} failed for good: {error}")

        worker.run()   # until Ctrl-C or SIGTERM, then a graceful shutdown
    """

    def __init__(
        self,
        client: Client,
        queue: str,
        *,
        concurrency: int = 16,
        batch: Optional[int] = None,
        poll_wait: float = 1.0,
        visibility: Optional[float] = None,
        extend_every: Optional[float] = None,
        unprocessable_queue: Optional[str] = None,
        shutdown_grace: float = 30.0,
        max_result_bytes: Optional[int] = None,
        max_backoff: float = 5.0,
        consumer: Optional[str] = None,
        loop: Optional[asyncio.AbstractEventLoop] = None,
    ) -> None:
        """
        :param concurrency: most tasks running at once.
        :param batch: most tasks leased per receive (1 – 1000); default the concurrency.
        :param poll_wait: long-poll wait of each receive (0 – 30 s); also the longest a
            shutdown waits for a receive in progress.
        :param visibility: lease length of this worker's deliveries; default the queue's.
        :param extend_every: how often a running task's lease is extended (and a cancel
            looked for); default a third of the lease length.
        :param unprocessable_queue: where undecodable bodies and unknown tasks go; default
            ``<queue>.unprocessable``, created at start when missing.
        :param shutdown_grace: how long a shutdown lets running tasks finish.
        :param max_result_bytes: largest result kept (JSON bytes); default the queue's
            ``max_message_bytes``.
        :param max_backoff: longest wait between tries while the broker is unreachable.
        :param consumer: the name recorded in each attempt; default ``python-worker-<pid>``.
        :param loop: the event loop ``async def`` handlers run on; default a fresh loop in
            the task's thread.
        """
        if concurrency < 1:
            raise InvalidInput("concurrency must be at least 1")
        if batch is not None and not 1 <= batch <= 1000:
            raise InvalidInput(f"batch must be 1 to 1000, got {batch}")
        if not 0 <= poll_wait <= 30:
            raise InvalidInput(f"poll_wait must be 0 to 30 seconds, got {poll_wait}")
        self.client = client
        self.queue = queue
        self.concurrency = concurrency
        self.batch = batch or min(concurrency, 1000)
        self.poll_wait = poll_wait
        self.visibility = visibility
        self.extend_every = extend_every
        self.unprocessable_queue = unprocessable_queue or f"{queue}.unprocessable"
        self.shutdown_grace = shutdown_grace
        self.max_result_bytes = max_result_bytes
        self.max_backoff = max_backoff
        self.consumer = consumer or f"python-worker-{os.getpid()}"
        self.loop = loop
        self.metrics = WorkerMetrics()
        self._handlers: Dict[str, Callable[..., Any]] = {}
        self._hook: Optional[Hook] = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self._started = threading.Event()
        self._start_error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Condition()
        self._running: Dict[str, _Running] = {}
        self._inbox: "queues.SimpleQueue[Optional[Delivery]]" = queues.SimpleQueue()
        self._acks: Optional[AckBatcher] = None
        self._busy = 0
        self._visibility = 30.0
        self._extend_every = 10.0
        self._max_result = 256 * 1024

    # -- registration ----------------------------------------------------------------------

    def register(self, name: str, fn: Callable[..., Any]) -> None:
        """Registers ``fn`` as the handler of task ``name``; it is called
        ``fn(*args, **kwargs)`` with the envelope's arguments."""
        if not isinstance(name, str) or not name:
            raise InvalidInput("a handler needs a non-empty task name")
        if not callable(fn):
            raise InvalidInput(f"the handler of {name!r} is not callable")
        self._handlers[name] = fn

    def task(self, name: Union[str, F, None] = None) -> Any:
        """Decorator registering a handler, under ``name`` or the function's name:
        ``@worker.task`` or ``@worker.task("resize")``."""
        if callable(name):
            fn = cast(F, name)
            self.register(fn.__name__, fn)
            return fn

        def deco(fn: F) -> F:
            self.register(cast(Optional[str], name) or fn.__name__, fn)
            return fn

        return deco

    def on_dead_letter(self, hook: Hook) -> Hook:
        """Sets the hook run once for each task this worker dead-letters, with the task id
        and its error. Usable as a decorator."""
        self._hook = hook
        return hook

    @property
    def tasks(self) -> List[str]:
        """The registered task names."""
        return sorted(self._handlers)

    # -- running ---------------------------------------------------------------------------

    def run(self) -> None:
        """Runs in the calling thread until :meth:`stop` (or, in the main thread, SIGINT or
        SIGTERM), then shuts down gracefully. Broker outages are waited out, at start too.

        Raises ``queue_not_found`` (an :class:`ApiError`) when the queue does not exist."""
        restore: Dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                restore[sig] = signal.signal(sig, lambda *_: self._stop.set())
        try:
            self._main()
        finally:
            for sig, old in restore.items():
                signal.signal(sig, old)
        if self._start_error is not None:
            raise self._start_error

    def start(self) -> "Worker":
        """Runs the worker in a background thread; returns once it leases (or raises what
        stopped it from starting)."""
        if self._thread is not None:
            raise RuntimeError("the worker was started already")
        self._thread = threading.Thread(target=self._main, name=f"sluice-worker-{self.queue}", daemon=True)
        self._thread.start()
        while not self._started.wait(0.05):
            if self._done.is_set():
                break
        if self._start_error is not None:
            raise self._start_error
        return self

    def stop(self, timeout: Optional[float] = None) -> bool:
        """Stops leasing, lets running tasks finish within the grace period, releases the rest;
        waits up to ``timeout`` seconds (default: grace + 10 s + one poll) for all that.
        True when the worker has stopped."""
        self._stop.set()
        if timeout is None:
            timeout = self.shutdown_grace + RELEASE_WAIT + self.poll_wait + 5.0
        return self._done.wait(timeout)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def in_flight(self) -> int:
        """Tasks running now."""
        with self._lock:
            return len(self._running)

    # -- the main loop ---------------------------------------------------------------------

    def _main(self) -> None:
        try:
            if not self._handlers:
                raise InvalidInput("a worker needs at least one handler: register one with @worker.task")
            if not self._start_up():
                return
            self._acks = AckBatcher(
                self.client, self.queue, self.metrics, lambda n: _backoff(n, self.max_backoff),
                max_pending=self.concurrency,
            )
            for i in range(self.concurrency):
                threading.Thread(target=self._runner, name=f"sluice-task-{i}", daemon=True).start()
            self._started.set()
            keeper = threading.Thread(target=self._keeper, name="sluice-lease-keeper", daemon=True)
            keeper.start()
            log.info(
                "worker started: queue=%s concurrency=%d batch=%d visibility=%.1fs tasks=%s",
                self.queue, self.concurrency, self.batch, self._visibility, self.tasks,
            )
            self._lease_loop()
            self._shut_down()
        except BaseException as e:  # noqa: BLE001 - handed to the caller of run/start
            self._start_error = e
        finally:
            for _ in range(self.concurrency):
                self._inbox.put(None)
            if self._acks is not None:
                self._acks.close(RELEASE_WAIT)
            self._done.set()

    def _start_up(self) -> bool:
        """Waits for the broker, reads the queue's settings, makes sure the unprocessable
        queue exists. False when stopped meanwhile."""
        q = self._retry("reading the queue's settings", lambda: self.client.get_queue(self.queue))
        if q is None:
            return False
        self._visibility = self.visibility if self.visibility is not None else q.config.visibility_timeout
        self._extend_every = max(0.01, self.extend_every if self.extend_every is not None else self._visibility / 3)
        self._max_result = self.max_result_bytes if self.max_result_bytes is not None else q.config.max_message_bytes
        self._unprocessable_max = q.config.max_message_bytes
        return self._ensure_unprocessable()

    def _ensure_unprocessable(self) -> bool:
        def ensure() -> bool:
            try:
                self.client.get_queue(self.unprocessable_queue)
            except ApiError as e:
                if e.code is not ErrorCode.QUEUE_NOT_FOUND:
                    raise
                self.client.put_queue(
                    self.unprocessable_queue, max_receive_count=0, dead_letter_queue=CLEAR,
                    retention=30 * 86400.0, max_message_bytes=self._unprocessable_max,
                )
                log.info("created the unprocessable queue %s", self.unprocessable_queue)
            return True

        return self._retry("making sure the unprocessable queue exists", ensure) is not None

    def _lease_loop(self) -> None:
        failures = 0
        # Lease when half the slots a receive could fill are free, or soon after the first
        # one frees up: one request then fills several slots instead of one each.
        want = max(1, min(self.batch, self.concurrency) // 2)
        while not self._stop.is_set():
            with self._lock:
                first_free: Optional[float] = None
                while not self._stop.is_set():
                    free = self.concurrency - self._busy
                    if free >= want:
                        break
                    if free <= 0:
                        first_free = None
                        self._lock.wait(0.1)
                        continue
                    now = time.monotonic()
                    if first_free is None:
                        first_free = now
                    elif now - first_free >= LEASE_GATHER:
                        break
                    self._lock.wait(LEASE_GATHER)
                if self._stop.is_set():
                    break
                n = min(self.batch, self.concurrency - self._busy)
                self._busy += n  # reserve the slots for what this receive brings
            try:
                got = self.client.receive(
                    self.queue, max=n, wait=self.poll_wait, visibility=self.visibility,
                    consumer=self.consumer,
                )
            except SluiceError as e:
                self._free(n)
                failures += 1
                self.metrics.broker_error()
                wait = _backoff(failures, self.max_backoff)
                if failures == 1:
                    log.warning("cannot lease from the broker (%s); backing off until it answers", e)
                else:
                    log.debug("leasing failed again (%d): %s", failures, e)
                self._stop.wait(wait)
                continue
            if failures:
                log.info("broker reachable again after %d failures; leasing resumed", failures)
                failures = 0
            self._free(n - len(got))
            for d in got:
                self._inbox.put(d)

    def _runner(self) -> None:
        """One of ``concurrency`` threads running handlers, until the worker stops."""
        while True:
            d = self._inbox.get()
            if d is None:
                return
            self._process(d)

    def _free(self, n: int) -> None:
        if n:
            with self._lock:
                self._busy -= n
                self._lock.notify_all()

    def _shut_down(self) -> None:
        with self._lock:
            running = self._busy
        log.info("worker stopping: no new leases; %d running, grace %.1fs", running, self.shutdown_grace)
        deadline = time.monotonic() + self.shutdown_grace
        with self._lock:
            while self._busy > 0 and time.monotonic() < deadline:
                self._lock.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            left = [r for r in self._running.values() if r.owner is None]
            for r in left:
                r.owner = "shutdown"
        if left:
            log.warning("grace period over: handing %d unfinished tasks back for redelivery", len(left))
            release_deadline = time.monotonic() + RELEASE_WAIT
            for r in left:
                self._release(r, release_deadline)
        log.info("worker stopped")

    def _release(self, r: _Running, deadline: float) -> None:
        d = r.delivery
        failures = 0
        while True:
            try:
                self.client.release(self.queue, d.receipt)
                log.info("unfinished task %s handed back for redelivery", d.id)
                with self._lock:
                    count = not r.counted
                    r.counted = True
                if count:
                    self.metrics.finished(Outcome.RELEASED)
                return
            except SluiceError as e:
                if not e.transient or time.monotonic() >= deadline:
                    log.error(
                        "task %s could not be handed back (%s); its lease will expire and it "
                        "will be delivered again", d.id, e,
                    )
                    return
                failures += 1
                self.metrics.broker_error()
                time.sleep(_backoff(failures, self.max_backoff))

    # -- lease extension -------------------------------------------------------------------

    def _keeper(self) -> None:
        tick = min(0.05, self._extend_every / 4)
        while not self._done.is_set():
            now = time.monotonic()
            with self._lock:
                due = [r for r in self._running.values()
                       if r.owner is None and not r.lease_lost and r.next_extend <= now]
            for r in due:
                self._extend(r)
            self._done.wait(tick)

    def _extend(self, r: _Running) -> None:
        try:
            res = self.client.extend(self.queue, r.delivery.receipt, self._visibility)
        except ApiError as e:
            if e.code is ErrorCode.RECEIPT_STALE:
                log.warning("task %s: lease lost (it expired or the task is gone); it may run again", r.delivery.id)
                r.lease_lost = True
                return
            self._extend_failed(r, e)
            return
        except SluiceError as e:
            self._extend_failed(r, e)
            return
        r.next_extend = time.monotonic() + self._extend_every
        if res.cancel_requested and r.ctx is not None and not r.ctx.cancelled:
            log.info("task %s cancelled; telling the handler", r.delivery.id)
            r.ctx._mark_cancelled()

    def _extend_failed(self, r: _Running, e: Exception) -> None:
        self.metrics.broker_error()
        log.warning("extending the lease of task %s failed (%s); trying again soon", r.delivery.id, e)
        r.next_extend = time.monotonic() + max(0.01, self._extend_every / 4)

    # -- one delivery ----------------------------------------------------------------------

    def _process(self, d: Delivery) -> None:
        self.metrics.started()
        run = _Running(d, None, time.monotonic() + self._extend_every)
        with self._lock:
            self._running[d.receipt] = run
        outcome: Optional[Outcome] = Outcome.LOST
        try:
            outcome = self._run_delivery(run)
        except BaseException:  # noqa: BLE001 - a bug here must not kill the worker silently
            log.exception("task %s: unexpected error in the worker", d.id)
        finally:
            with self._lock:
                self._running.pop(d.receipt, None)
                self._busy -= 1
                self._lock.notify_all()
                count = not run.counted
                run.counted = True
            # None: acked in the background, counted when the broker answers.
            if count and outcome is not None:
                self.metrics.finished(outcome)

    def _claim(self, run: _Running) -> bool:
        """Takes the right to settle; False when the shutdown released the task meanwhile."""
        with self._lock:
            if run.owner is None:
                run.owner = "handler"
                return True
            return False

    def _run_delivery(self, run: _Running) -> Optional[Outcome]:
        d = run.delivery
        if d.decode_error is not None:
            return self._unprocessable(run, d.decode_error)
        try:
            env = TaskEnvelope.from_body(d.body, d.kind)
        except EnvelopeError as e:
            return self._unprocessable(run, str(e))
        fn = self._handlers.get(env.task)
        if fn is None:
            return self._unprocessable(
                run,
                f"unknown task {env.task!r}: no handler is registered under that name "
                f"(this worker runs {', '.join(self.tasks)})",
            )
        why = _misfit(fn, env)
        if why is not None:
            return self._unprocessable(run, f"the arguments of task {env.task!r} do not fit its handler: {why}")
        ctx = TaskContext(
            client=self.client, queue=self.queue, task_id=d.id, task=env.task, receipt=d.receipt,
            attempt=d.receive_count, max_attempts=d.max_receive_count, attributes=d.attributes,
            key=d.key, priority=d.priority)
        run.ctx = ctx
        log.debug("task %s (%s) started, attempt %d", d.id, env.task, d.receive_count)
        started = time.monotonic()
        error: Optional[BaseException] = None
        value: Any = None
        try:
            value = self._call(fn, ctx, env)
        except Exception as e:  # noqa: BLE001 - every handler failure is classified below
            error = e
        self.metrics.handler_time(time.monotonic() - started)
        if not self._claim(run):
            return Outcome.RELEASED
        cancelled = ctx.cancelled
        if error is None:
            self._succeed(run, value, Outcome.CANCELLED if cancelled else Outcome.SUCCESS)
            return None
        if cancelled or isinstance(error, Cancelled):
            self._nack(run, None, "cancelled")
            return Outcome.CANCELLED
        elif isinstance(error, Permanent):
            outcome = self._reject(run, _describe(error))
        elif isinstance(error, RetryAfter):
            outcome = self._fail(run, error.delay, _describe(error), congestion=error.congestion)
        else:
            outcome = self._fail(run, None, _describe(error))
        if cancelled and outcome in (Outcome.SUCCESS, Outcome.RETRY, Outcome.FAILURE):
            log.info("task %s was cancelled while it ran", d.id)
            return Outcome.CANCELLED
        return outcome

    def _call(self, fn: Callable[..., Any], ctx: TaskContext, env: TaskEnvelope) -> Any:
        token = _CURRENT.set(ctx)
        try:
            if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
                async def with_context() -> Any:
                    _CURRENT.set(ctx)
                    return await cast(Awaitable[Any], fn(*env.args, **env.kwargs))

                if self.loop is not None and self.loop.is_running():
                    fut: Future[Any] = asyncio.run_coroutine_threadsafe(with_context(), self.loop)
                    return fut.result()
                return asyncio.run(with_context())
            return fn(*env.args, **env.kwargs)
        finally:
            _CURRENT.reset(token)

    # -- settling --------------------------------------------------------------------------

    def _succeed(self, run: _Running, value: Any, outcome: Outcome) -> None:
        """Hands the ack (with the result) to the batcher; ``outcome`` is counted once the
        broker has it."""
        d = run.delivery
        result: Any = NO_RESULT
        size = 0
        if isinstance(value, (bytes, bytearray)):
            size = len(value) * 4 // 3  # base64 on the wire
            result = bytes(value)
        elif value is not None:
            try:
                size = len(dumps(value, "the task's result"))
                result = value
            except InvalidInput as e:
                log.error("task %s: the handler's result is not JSON (%s); acking without a result", d.id, e)
        else:
            result = None
        if result is not NO_RESULT and size > self._max_result:
            log.warning(
                "task %s: result of %d bytes is over the size cap of %d and was dropped; the task "
                "still succeeds", d.id, size, self._max_result,
            )
            self.metrics.result_dropped()
            result, size = NO_RESULT, 0
        self._ack(d, result, size, outcome, False)

    def _ack(self, d: Delivery, result: Any, size: int, outcome: Outcome, retried: bool) -> None:
        def done(err: Optional[SluiceError], was_retried: bool) -> None:
            again = retried or was_retried
            if err is None:
                log.debug("task %s succeeded", d.id)
                if outcome is Outcome.CANCELLED:
                    log.info("task %s was cancelled while it ran", d.id)
                self.metrics.finished(outcome)
            elif isinstance(err, ApiError) and err.code is ErrorCode.PAYLOAD_TOO_LARGE and result is not NO_RESULT:
                log.warning("task %s: the broker refused the result as too large; dropped, the task still succeeds", d.id)
                self.metrics.result_dropped()
                self._ack(d, NO_RESULT, 0, outcome, again)
            else:
                self.metrics.finished(self._lost_ack(d, err, again))

        assert self._acks is not None, "the batcher starts with the worker"
        self._acks.submit(d.receipt, result, size, done)

    def _lost_ack(self, d: Delivery, e: SluiceError, retried: bool) -> Outcome:
        if retried and isinstance(e, ApiError) and e.code is ErrorCode.RECEIPT_STALE:
            # An earlier try may have gone through before the broker stopped answering.
            try:
                if self.client.task_status(d.id).status is TaskStatus.SUCCESS:
                    return Outcome.SUCCESS
            except SluiceError:
                pass
        return _lost(d, e)

    def _nack(self, run: _Running, delay: Optional[float], error: str, congestion: bool = False) -> Optional[str]:
        d = run.delivery
        wait = {"retry_after": delay} if congestion and delay is not None else {"delay": delay}
        try:
            r = self._settle(
                "reporting a failed task",
                lambda: self.client.nack(self.queue, d.receipt, error=error, consumer=self.consumer, **wait),
            )
        except SluiceError as e:
            _lost(d, e)
            return None
        return r.state

    def _fail(self, run: _Running, delay: Optional[float], error: str, congestion: bool = False) -> Outcome:
        d = run.delivery
        state = self._nack(run, delay, error, congestion)
        if state is None:
            return Outcome.LOST
        if state == "dead_lettered":
            log.error("task %s failed on its last attempt (%s); dead-lettered", d.id, error)
            self._dead_letter(d, error)
            return Outcome.FAILURE
        log.warning("task %s failed (%s); it will be retried%s", d.id, error,
                    f" in {delay:g}s" if delay is not None else "")
        return Outcome.RETRY

    def _reject(self, run: _Running, error: str) -> Outcome:
        d = run.delivery
        try:
            self._settle(
                "dead-lettering a failed task",
                lambda: self.client.reject(self.queue, d.receipt, error=error, consumer=self.consumer),
            )
        except ApiError as e:
            if e.code is ErrorCode.CONFLICT:
                log.warning("task %s: the queue has no DLQ; the permanent failure is nacked instead", d.id)
                return self._fail(run, None, error)
            return _lost(d, e)
        except SluiceError as e:
            return _lost(d, e)
        log.error("task %s failed permanently (%s); dead-lettered", d.id, error)
        self._dead_letter(d, error)
        return Outcome.FAILURE

    def _unprocessable(self, run: _Running, reason: str) -> Outcome:
        d = run.delivery
        if not self._claim(run):
            return Outcome.RELEASED
        log.warning("task %s is unprocessable (%s); moved to %s", d.id, reason, self.unprocessable_queue)
        for _ in range(2):
            try:
                self._settle(
                    "moving an unprocessable message",
                    lambda: self.client.move_message(
                        self.queue, d.receipt, self.unprocessable_queue, error=reason, consumer=self.consumer
                    ),
                )
                return Outcome.UNPROCESSABLE
            except ApiError as e:
                if e.code is ErrorCode.QUEUE_NOT_FOUND:
                    # Deleted while we ran: create it again, once.
                    if not self._ensure_unprocessable():
                        return Outcome.LOST
                    continue
                return _lost(d, e)
            except SluiceError as e:
                return _lost(d, e)
        return Outcome.LOST

    def _dead_letter(self, d: Delivery, error: str) -> None:
        """Counts a dead letter and runs the hook once; its failure is only logged."""
        self.metrics.dead_letter()
        if self._hook is None:
            return
        try:
            out = self._hook(d.id, error)
            if inspect.isawaitable(out):
                asyncio.run(_awaited(out))
        except Exception:  # noqa: BLE001 - a failing hook changes nothing
            log.exception("the on_dead_letter hook failed for task %s", d.id)

    def _settle(self, what: str, fn: Callable[[], T], retried: Optional[List[bool]] = None) -> T:
        """Runs a settlement until it succeeds or fails for good; broker outages are waited
        out without a limit (the work is done; only its record is missing)."""
        failures = 0
        while True:
            try:
                out = fn()
                if failures:
                    log.info("%s went through after %d tries", what, failures + 1)
                return out
            except SluiceError as e:
                if not e.transient:
                    raise
                failures += 1
                if retried is not None:
                    retried[0] = True
                self.metrics.broker_error()
                if failures == 1:
                    log.warning("%s failed (%s); retrying until the broker answers", what, e)
                time.sleep(_backoff(failures, self.max_backoff))

    def _retry(self, what: str, fn: Callable[[], T]) -> Optional[T]:
        """Like ``_settle`` but gives up (``None``) when the worker is stopped meanwhile."""
        failures = 0
        while not self._stop.is_set():
            try:
                return fn()
            except SluiceError as e:
                if not e.transient:
                    if isinstance(e, ApiError) and e.code is ErrorCode.QUEUE_NOT_FOUND:
                        raise ApiError(
                            e.status, e.code,
                            f"the worker's queue {self.queue!r} does not exist; create it first "
                            f"(client.put_queue({self.queue!r}) or `sluice queue create {self.queue}`)",
                        ) from e
                    raise
                failures += 1
                self.metrics.broker_error()
                if failures == 1:
                    log.warning("%s failed (%s); retrying until the broker answers", what, e)
                self._stop.wait(_backoff(failures, self.max_backoff))
        return None


async def _awaited(aw: Awaitable[Any]) -> Any:
    return await aw


def _lost(d: Delivery, e: Exception) -> Outcome:
    log.warning("could not settle task %s (%s); it will run again", d.id, e)
    return Outcome.LOST


def _describe(e: BaseException) -> str:
    """The error stored as the task's ``last_error``: the message, or the exception's type
    when it has none. Typed failures (RetryAfter, Permanent) keep their own message."""
    msg = str(e)
    if isinstance(e, (RetryAfter, Permanent, Cancelled)):
        return msg or type(e).__name__
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


#: Handler signatures, read once per handler: reading one costs more than a trivial task.
_SIGNATURES: Dict[Callable[..., Any], Optional[inspect.Signature]] = {}


def _misfit(fn: Callable[..., Any], env: TaskEnvelope) -> Optional[str]:
    """Why ``fn`` cannot be called with the envelope's arguments, or None when it can (or
    its signature cannot be read)."""
    try:
        sig = _SIGNATURES[fn]
    except (KeyError, TypeError):
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None
        try:
            _SIGNATURES[fn] = sig
        except TypeError:  # an unhashable callable
            pass
    if sig is None:
        return None
    try:
        sig.bind(*env.args, **env.kwargs)
    except TypeError as e:
        return str(e)
    return None


def _backoff(failures: int, cap: float) -> float:
    """A jittered wait before try ``failures + 1``: 50 ms doubling up to ``cap``; half fixed,
    half jitter, so waits keep growing while clients still spread out."""
    top = min(cap, 0.05 * (2 ** min(max(failures - 1, 0), 16)))
    return top / 2 + random.uniform(0, top / 2)
