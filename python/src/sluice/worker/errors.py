"""What a handler's failure means for its task.

Any exception a handler raises is *transient*: the task is nacked and the queue's backoff
applies, up to its ``max_receive_count`` attempts, then it is dead-lettered. Raise one of
these to say more:

- :class:`RetryAfter` — transient with a known wait (an upstream's ``Retry-After``): the task
  is retried after that many seconds instead of the backoff;
- :class:`Permanent` — trying again cannot help (bad input, a refused payment): the task goes
  to the DLQ now;
- :class:`Cancelled` — the handler stopped because :attr:`TaskContext.cancelled` said so.
"""

from __future__ import annotations


class TaskError(Exception):
    """Base class of the failures that say how a task is treated."""


class RetryAfter(TaskError):
    """Retry the task after ``delay`` seconds (not the queue's backoff). By default the wait
    is the dependency's own Retry-After (a 429 or 503 that said how long to wait), which a
    queue with an adaptive rate slows down for; pass ``congestion=False`` for a wait the
    handler chose itself."""

    def __init__(self, message: str, delay: float, *, congestion: bool = True) -> None:
        super().__init__(message)
        if delay < 0:
            raise ValueError(f"delay must not be negative, got {delay}")
        self.delay = float(delay)
        self.congestion = congestion


class Permanent(TaskError):
    """Dead-letter the task now, without further attempts."""


class Cancelled(TaskError):
    """The handler stopped because the task was cancelled; it ends ``CANCELLED``."""

    def __init__(self, message: str = "cancelled") -> None:
        super().__init__(message)
