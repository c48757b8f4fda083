"""The Python worker: the task semantics, as in the Rust SDK's worker."""

from .context import TaskContext, current_task, idempotency_key
from .errors import Cancelled, Permanent, RetryAfter, TaskError
from .metrics import HANDLER_TIME_BUCKETS, MetricsSnapshot, Outcome, WorkerMetrics
from .worker import Worker

__all__ = [
    "HANDLER_TIME_BUCKETS",
    "Cancelled",
    "MetricsSnapshot",
    "Outcome",
    "Permanent",
    "RetryAfter",
    "TaskContext",
    "TaskError",
    "Worker",
    "WorkerMetrics",
    "current_task",
    "idempotency_key",
]
