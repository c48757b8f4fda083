"""Sluice for Python: a typed client for every route of the HTTP API, a worker with the
semantics of the Rust SDK (retries, DLQ, unprocessable queue, results, progress, cancel,
lease extension, graceful shutdown, outage resilience), and ``sluice.ray``, a Ray Serve
task-processor adapter.

::

    import sluice

    client = sluice.Client("http://127.0.0.1:7878")
    client.put_queue("jobs", max_receive_count=3)
    task_id = client.enqueue("jobs", "add", [2, 3])
"""

from ._transport import RetryPolicy
from ._version import __version__
from .client import CLEAR, NO_RESULT, Client, OutMessage, QueueSettings
from .envelope import EnvelopeError, TaskEnvelope
from .errors import (
    ApiError,
    DecodeError,
    ErrorCode,
    InvalidInput,
    SluiceError,
    TaskFailed,
    TaskTimeout,
    TransportError,
)
from .models import (
    AckOutcome,
    Attempt,
    AuditEntry,
    AuditPage,
    BodyKind,
    BrowsePage,
    Delivery,
    ExtendResult,
    FailureResult,
    History,
    HistorySample,
    Message,
    Progress,
    Queue,
    QueueConfig,
    RateLimit,
    Rates,
    Redrive,
    RedriveFilter,
    RedriveGuard,
    Scaling,
    SendResult,
    Stats,
    Summary,
    SummaryGroup,
    TaskInfo,
    TaskStatus,
    Totals,
    Trend,
    TrendDirection,
)
from .worker import (
    Cancelled,
    MetricsSnapshot,
    Outcome,
    Permanent,
    RetryAfter,
    TaskContext,
    TaskError,
    Worker,
    WorkerMetrics,
    current_task,
    idempotency_key,
)

__all__ = [
    "CLEAR",
    "NO_RESULT",
    "AckOutcome",
    "ApiError",
    "Attempt",
    "AuditEntry",
    "AuditPage",
    "BodyKind",
    "BrowsePage",
    "Cancelled",
    "Client",
    "DecodeError",
    "Delivery",
    "EnvelopeError",
    "ErrorCode",
    "ExtendResult",
    "FailureResult",
    "History",
    "HistorySample",
    "InvalidInput",
    "Message",
    "MetricsSnapshot",
    "OutMessage",
    "Outcome",
    "Permanent",
    "Progress",
    "Queue",
    "QueueConfig",
    "QueueSettings",
    "RateLimit",
    "Rates",
    "Redrive",
    "RedriveFilter",
    "RedriveGuard",
    "RetryAfter",
    "RetryPolicy",
    "Scaling",
    "SendResult",
    "SluiceError",
    "Stats",
    "Summary",
    "SummaryGroup",
    "TaskContext",
    "TaskEnvelope",
    "TaskError",
    "TaskFailed",
    "TaskInfo",
    "TaskStatus",
    "TaskTimeout",
    "Totals",
    "TransportError",
    "Trend",
    "TrendDirection",
    "Worker",
    "WorkerMetrics",
    "__version__",
    "current_task",
    "idempotency_key",
]
