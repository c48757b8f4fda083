"""Ray Serve's asynchronous inference on Sluice: a ``TaskProcessorAdapter`` that Ray loads
from ``TaskProcessorConfig(adapter=SluiceAdapter, adapter_config=SluiceConfig(...))``.

How Ray's settings map to Sluice's broker-side rules:

============================================  ===============================================
``TaskProcessorConfig``                       Sluice
============================================  ===============================================
``queue_name``                                the queue the replicas lease from
``max_retries`` (default 3)                   the queue's ``max_receive_count`` =
                                              ``max_retries + 1`` attempts (``None``:
                                              unlimited, no DLQ)
``failed_task_queue_name``                    the queue's ``dead_letter_queue``: a task whose
                                              attempts are used up, or that raised
                                              :class:`sluice.Permanent`, is moved there by
                                              the broker, byte-exact, with its error and
                                              attempt history (default ``<queue>.dlq``)
``unprocessable_task_queue_name``             where bodies that are not a task envelope,
                                              unknown task names and arguments that do not
                                              fit the handler are moved, atomically
                                              (default ``<queue>.unprocessable``)
``@serve.deployment(max_ongoing_requests)``   how many tasks one replica runs at once
============================================  ===============================================

Retries wait the queue's backoff (exponential, full jitter) or, when a handler raises
:class:`sluice.RetryAfter`, the wait it names. Statuses are Sluice's: ``PENDING``,
``STARTED``, ``RETRY``, ``SUCCESS``, ``FAILURE``, ``CANCELLED``, ``UNKNOWN``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Dict, List, Optional

from ray.serve.schema import TaskProcessorAdapter, TaskProcessorConfig, TaskResult

from ..client import CLEAR, Client, QueueSettings
from ..errors import ApiError, ErrorCode, SluiceError
from ..models import TaskStatus
from ..worker import Outcome, Worker
from ..worker.metrics import HANDLER_TIME_BUCKETS
from .config import SluiceConfig

__all__ = ["SluiceAdapter"]

log = logging.getLogger("sluice.ray")

#: What Ray's own default consumer concurrency is when ``initialize`` is called without one.
_DEFAULT_CONCURRENCY = 10


class SluiceAdapter(TaskProcessorAdapter):
    """Ray Serve task processor on a Sluice broker. Every operation is available both
    synchronously and as ``async`` (the latter run the same call in a thread)."""

    def __init__(self, config: TaskProcessorConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._config = config
        self._settings = SluiceConfig.coerce(config.adapter_config)
        self._client: Optional[Client] = None
        self._handlers: Dict[str, Callable[..., Any]] = {}
        self._worker: Optional[Worker] = None
        self._concurrency = _DEFAULT_CONCURRENCY

    # -- set-up ----------------------------------------------------------------------------

    @property
    def queue(self) -> str:
        return self._config.queue_name

    @property
    def failed_task_queue(self) -> str:
        """The DLQ of the queue: ``failed_task_queue_name`` or Sluice's ``<queue>.dlq``."""
        return self._config.failed_task_queue_name or f"{self.queue}.dlq"

    @property
    def unprocessable_queue(self) -> str:
        return self._config.unprocessable_task_queue_name or f"{self.queue}.unprocessable"

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("SluiceAdapter.initialize() was not called")
        return self._client

    def initialize(self, consumer_concurrency: int = _DEFAULT_CONCURRENCY) -> None:
        """Connects to the broker and, unless ``configure_queue`` is off, makes the queue's
        attempt limit and DLQ follow ``max_retries`` and ``failed_task_queue_name``."""
        self._concurrency = max(1, int(consumer_concurrency))
        s = self._settings
        self._client = Client(s.url, token=s.token, timeout=s.timeout)
        if s.configure_queue:
            self._configure_queues()

    def _configure_queues(self) -> None:
        c = self._config
        settings = QueueSettings(
            visibility_timeout=self._settings.visibility_timeout,
            backoff_base=self._settings.backoff_base,
            backoff_max=self._settings.backoff_max,
            result_ttl=self._settings.result_ttl,
        )
        if c.max_retries is None:
            settings.max_receive_count = 0
            settings.dead_letter_queue = CLEAR
        else:
            if c.max_retries < 0:
                raise ValueError(f"max_retries must not be negative, got {c.max_retries}")
            settings.max_receive_count = c.max_retries + 1
            if c.failed_task_queue_name:
                # The DLQ keeps failed tasks for an operator: no attempt limit of its own.
                self.client.put_queue(
                    c.failed_task_queue_name, max_receive_count=0, dead_letter_queue=CLEAR,
                    retention=30 * 86400.0,
                )
                settings.dead_letter_queue = c.failed_task_queue_name
        q = self.client.put_queue(c.queue_name, settings)
        for w in q.warnings:
            log.warning("queue %s: %s", c.queue_name, w)
        log.info(
            "sluice queue %s: %d attempts, DLQ %s, unprocessable %s",
            c.queue_name, q.config.max_receive_count, q.config.dead_letter_queue,
            self.unprocessable_queue,
        )

    def register_task_handle(self, func: Callable[..., Any], name: Optional[str] = None) -> None:
        """Registers a handler (plain or ``async``), called ``func(*args, **kwargs)``."""
        task = name or getattr(func, "__name__", None)
        if not task:
            raise ValueError("a task handler needs a name")
        self._handlers[task] = func
        if self._worker is not None:
            self._worker.register(task, func)

    # -- the consumer ----------------------------------------------------------------------

    def start_consumer(self, **kwargs: Any) -> None:
        """Starts leasing tasks in background threads of this replica; ``async`` handlers
        run on the replica's event loop when there is one."""
        if self._worker is not None and not self._worker.stopping:
            log.info("the sluice consumer of %s is already running", self.queue)
            return
        try:
            loop: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        s = self._settings
        worker = Worker(
            self.client,
            self.queue,
            concurrency=self._concurrency,
            poll_wait=s.poll_wait,
            unprocessable_queue=self.unprocessable_queue,
            shutdown_grace=s.shutdown_grace,
            max_result_bytes=s.max_result_bytes,
            consumer=kwargs.get("consumer") or _consumer_name(),
            loop=loop,
        )
        for name, fn in self._handlers.items():
            worker.register(name, fn)
        self._worker = worker
        worker.start()
        log.info("sluice consumer started on %s (%d at once)", self.queue, self._concurrency)

    def stop_consumer(self, timeout: float = 10.0) -> None:
        """Stops leasing; running tasks get ``timeout`` seconds (at most the configured
        grace) to finish, the rest are released for redelivery without using an attempt."""
        w = self._worker
        if w is None:
            return
        w.shutdown_grace = min(w.shutdown_grace, max(0.0, timeout))
        if not w.stop(timeout + 15.0):
            log.warning("the sluice consumer of %s did not stop within %.1fs", self.queue, timeout)

    # -- producer side ---------------------------------------------------------------------

    def enqueue_task_sync(
        self, task_name: str, args: Optional[Any] = None, kwargs: Optional[Any] = None, **options: Any
    ) -> TaskResult:
        """Enqueues a task. Options: ``delay`` (seconds), ``dedup_id``, ``attributes``,
        ``idempotency_key``. Arguments JSON cannot hold are refused here, before sending."""
        allowed = {"delay", "dedup_id", "attributes", "idempotency_key"}
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise TypeError(f"unknown enqueue options {unknown}; Sluice takes {sorted(allowed)}")
        task_id = self.client.enqueue(self.queue, task_name, list(args or []), dict(kwargs or {}), **options)
        return TaskResult(id=task_id, status=TaskStatus.PENDING.value, created_at=time.time(), result=None)

    def get_task_status_sync(self, task_id: str) -> TaskResult:
        """The task's status; ``result`` is the handler's return value after ``SUCCESS`` and
        the error after ``FAILURE`` or ``RETRY``."""
        info = self.client.task_status(task_id)
        result = info.result if info.status is TaskStatus.SUCCESS else info.error
        return TaskResult(id=info.id, status=info.status.value, result=result)

    def cancel_task_sync(self, task_id: str) -> None:
        """Cancels a task: a waiting one at once; a running one's handler sees
        ``sluice.current_task().cancelled`` at its next lease extension."""
        self.client.cancel(task_id)

    # -- observability ---------------------------------------------------------------------

    def get_metrics_sync(self) -> Dict[str, Any]:
        """Queue depth, in flight and DLQ depth (from the broker), tasks completed by status
        and processing time (from this replica's consumer)."""
        st = self.client.stats(self.queue)
        out: Dict[str, Any] = {
            "queue": self.queue,
            "queue_depth": st.visible + st.delayed,
            "visible": st.visible,
            "delayed": st.delayed,
            "in_flight": st.in_flight,
            "dlq_depth": st.dead_letter_depth,
            "oldest_visible_age_s": st.oldest_visible_age,
            "broker_totals": dict(st.totals.__dict__),
        }
        try:
            out["unprocessable_depth"] = self.client.stats(self.unprocessable_queue).visible
        except ApiError as e:
            if e.code is not ErrorCode.QUEUE_NOT_FOUND:
                raise
            out["unprocessable_depth"] = 0
        w = self._worker
        snap = w.metrics.snapshot() if w is not None else None
        out["completed"] = {o.value: (snap.count(o) if snap else 0) for o in Outcome}
        out["consumer_in_flight"] = snap.in_flight if snap else 0
        out["dead_lettered_by_consumer"] = snap.dead_lettered if snap else 0
        out["broker_errors"] = snap.broker_errors if snap else 0
        count = snap.handler_seconds_count if snap else 0
        total = snap.handler_seconds_sum if snap else 0.0
        out["processing_time"] = {
            "count": count,
            "sum_s": total,
            "avg_s": total / count if count else 0.0,
            "buckets": dict(zip([str(b) for b in HANDLER_TIME_BUCKETS],
                                snap.handler_seconds_buckets if snap else [0] * len(HANDLER_TIME_BUCKETS))),
        }
        return out

    def health_check_sync(self) -> List[Dict[str, Any]]:
        """One entry per consumer, as Celery's ping answers: ``[{"sluice@<name>": {"ok":
        "pong"}}]`` when the broker is ready and the consumer runs, an ``error`` otherwise."""
        w = self._worker
        name = f"sluice@{w.consumer if w else _consumer_name()}"
        try:
            ready = self.client.readyz()
        except SluiceError as e:
            return [{name: {"error": f"broker unreachable: {e}"}}]
        if not ready:
            return [{name: {"error": "broker not ready"}}]
        if w is None or w.stopping:
            return [{name: {"error": "consumer not running"}}]
        return [{name: {"ok": "pong", "in_flight": w.in_flight}}]

    # -- async variants --------------------------------------------------------------------

    async def enqueue_task_async(
        self, task_name: str, args: Optional[Any] = None, kwargs: Optional[Any] = None, **options: Any
    ) -> TaskResult:
        return await asyncio.to_thread(self.enqueue_task_sync, task_name, args, kwargs, **options)

    async def get_task_status_async(self, task_id: str) -> TaskResult:
        return await asyncio.to_thread(self.get_task_status_sync, task_id)

    async def cancel_task_async(self, task_id: str) -> None:
        await asyncio.to_thread(self.cancel_task_sync, task_id)

    async def get_metrics_async(self) -> Dict[str, Any]:
        return await asyncio.to_thread(self.get_metrics_sync)

    async def health_check_async(self) -> List[Dict[str, Any]]:
        return await asyncio.to_thread(self.health_check_sync)


def _consumer_name() -> str:
    """The replica's id inside Ray Serve, the process id elsewhere."""
    try:
        from ray.serve import get_replica_context

        return f"ray-{get_replica_context().replica_tag}"
    except Exception:  # noqa: BLE001 - outside a replica there is no context
        import os

        return f"ray-{os.getpid()}"
