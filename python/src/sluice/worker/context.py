"""What a running handler knows and can do: its task's identity and attempt, progress
reports, cooperative cancellation and stable idempotency keys for its side effects.

A handler is called with its task's arguments only; it reaches its context with
:func:`current_task`, which works in plain and ``async`` handlers alike.
"""

from __future__ import annotations

import contextvars
import hashlib
import threading
from typing import TYPE_CHECKING, Dict, Optional

if TYPE_CHECKING:
    from ..client import Client

__all__ = ["TaskContext", "current_task", "idempotency_key"]

_CURRENT: "contextvars.ContextVar[TaskContext]" = contextvars.ContextVar("sluice_task")


def idempotency_key(task_id: str, label: str) -> str:
    """A stable key for side effect ``label`` of task ``task_id``: the same on every attempt
    of the task, different for another task or label; 32 lowercase hex digits, the same as
    the Rust SDK's ``idempotency_key``. A downstream that deduplicates by it acts once even
    when the task runs twice (at-least-once delivery)."""
    h = hashlib.sha256()
    h.update(b"sluice-task-effect\0")
    h.update(task_id.encode())
    h.update(b"\0")
    h.update(label.encode())
    return h.digest()[:16].hex()


class TaskContext:
    """The context of one task run."""

    def __init__(
        self,
        *,
        client: "Client",
        queue: str,
        task_id: str,
        task: str,
        receipt: str,
        attempt: int,
        max_attempts: int,
        attributes: Dict[str, str],
        key: Optional[str] = None,
        priority: int = 4,
    ) -> None:
        self.client = client
        """The worker's client, e.g. to enqueue follow-up tasks."""
        self.queue = queue
        self.id = task_id
        """The task id (its message id)."""
        self.task = task
        self.attempt = attempt
        """This attempt's number, from 1."""
        self.max_attempts = max_attempts
        """The queue's attempt limit (0 = unlimited)."""
        self.attributes = dict(attributes)
        self.key = key
        """The key the task was sent with (its tenant, customer or account), or None."""
        self.priority = priority
        """The priority it was delivered at (0 – 9, 9 most urgent)."""
        self._receipt = receipt
        self._cancel = threading.Event()

    def __repr__(self) -> str:
        return f"TaskContext(queue={self.queue!r}, id={self.id!r}, task={self.task!r}, attempt={self.attempt})"

    @property
    def is_last_attempt(self) -> bool:
        """True when a failure now dead-letters the task."""
        return self.max_attempts > 0 and self.attempt >= self.max_attempts

    @property
    def cancelled(self) -> bool:
        """True once the task was cancelled (heard at a lease extension or a progress
        report). The handler should stop soon, e.g. by raising :class:`Cancelled`."""
        return self._cancel.is_set()

    def wait_cancelled(self, timeout: Optional[float] = None) -> bool:
        """Blocks up to ``timeout`` seconds for a cancel; True when the task was cancelled.
        A handler that sleeps between steps sleeps here instead."""
        return self._cancel.wait(timeout)

    def progress(self, pct: float, detail: Optional[str] = None) -> None:
        """Reports progress (``pct`` 0 – 100, a short detail); it shows in the task's status
        and event stream. The answer also delivers a pending cancel."""
        r = self.client.progress(self.queue, self._receipt, pct, detail)
        if r.cancel_requested:
            self._cancel.set()

    def idempotency_key(self, label: str) -> str:
        """A stable key for side effect ``label`` of this task (see :func:`idempotency_key`)."""
        return idempotency_key(self.id, label)

    def _mark_cancelled(self) -> None:
        self._cancel.set()


def current_task() -> TaskContext:
    """The context of the task the calling handler runs.

    Raises ``RuntimeError`` outside a handler."""
    try:
        return _CURRENT.get()
    except LookupError:
        raise RuntimeError("current_task() is only available inside a task handler") from None
