"""The errors of the Sluice client.

An answer from the broker keeps the broker's stable error code, so
``receipt_stale`` means the same thing here as in the server, the command line and the
Rust SDK. Match on :attr:`ApiError.code`, never on the message text.
"""

from __future__ import annotations

import enum
from typing import List, Optional


class ErrorCode(str, enum.Enum):
    """The broker's catalogue of error codes, with the HTTP status each one comes with."""

    INVALID_ARGUMENT = "invalid_argument"
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission_denied"
    QUEUE_NOT_FOUND = "queue_not_found"
    MESSAGE_NOT_FOUND = "message_not_found"
    RECEIPT_STALE = "receipt_stale"
    CONFLICT = "conflict"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    IDEMPOTENCY_MISMATCH = "idempotency_mismatch"
    RATE_LIMITED = "rate_limited"
    QUEUE_FULL = "queue_full"
    UNAVAILABLE = "unavailable"
    NOT_FOUND = "not_found"
    """No such route: the broker serves nothing at that path."""
    METHOD_NOT_ALLOWED = "method_not_allowed"
    """The route does not take that method; the ``Allow`` header lists those it takes."""

    @property
    def http_status(self) -> int:
        """The status the broker answers this code with."""
        return _STATUS[self]

    @classmethod
    def parse(cls, code: str, status: int = 0) -> "ErrorCode":
        """The code named ``code``; for an unknown name, the code its ``status`` implies."""
        try:
            return cls(code)
        except ValueError:
            return code_for_status(status)


_STATUS = {
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.QUEUE_NOT_FOUND: 404,
    ErrorCode.MESSAGE_NOT_FOUND: 404,
    ErrorCode.RECEIPT_STALE: 409,
    ErrorCode.CONFLICT: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.IDEMPOTENCY_MISMATCH: 422,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.QUEUE_FULL: 429,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
}


def code_for_status(status: int) -> ErrorCode:
    """The code an answer without an error envelope is given, from its status."""
    if status == 401:
        return ErrorCode.UNAUTHENTICATED
    if status == 403:
        return ErrorCode.PERMISSION_DENIED
    if status == 404:
        return ErrorCode.NOT_FOUND
    if status == 405:
        return ErrorCode.METHOD_NOT_ALLOWED
    if status == 409:
        return ErrorCode.CONFLICT
    if status == 413:
        return ErrorCode.PAYLOAD_TOO_LARGE
    if status == 422:
        return ErrorCode.IDEMPOTENCY_MISMATCH
    if status == 429:
        return ErrorCode.RATE_LIMITED
    if status >= 500:
        return ErrorCode.UNAVAILABLE
    return ErrorCode.INVALID_ARGUMENT


class SluiceError(Exception):
    """Base class of every error this package raises."""

    @property
    def transient(self) -> bool:
        """True when trying again later may succeed (no connection, 503, 429)."""
        return False


class InvalidInput(SluiceError, ValueError):
    """Refused before anything was sent: a value JSON cannot hold, a bad queue name, an
    argument out of range. The message says what and how to fix it."""


class TransportError(SluiceError):
    """The exchange with the broker failed: no connection, a timeout, a broken answer."""

    def __init__(self, message: str, *, connect: bool = False) -> None:
        super().__init__(message)
        self.connect = connect
        """True when the broker was never reached, so the request had no effect."""

    @property
    def transient(self) -> bool:
        return True


class ApiError(SluiceError):
    """An error answer of the broker: ``{"error": {"code", "message"}}``."""

    def __init__(
        self,
        status: int,
        code: ErrorCode,
        message: str,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(f"{message} ({code.value}, HTTP {status})")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        """Seconds the broker asked to wait (sent with 429 and 503)."""

    @property
    def transient(self) -> bool:
        return self.status in (429, 503)


class PartialEnqueue(SluiceError):
    """``enqueue_many`` stopped part-way: the tasks of ``ids`` (whole batches, in order) were
    enqueued before ``error`` stopped the rest. Calling again with the same idempotency key
    enqueues the rest without repeating them."""

    def __init__(self, ids: List[str], total: int, error: SluiceError) -> None:
        super().__init__(
            f"{len(ids)} of {total} tasks were enqueued before an error stopped the rest: {error}"
        )
        self.ids = ids
        self.total = total
        self.error = error


class DecodeError(SluiceError):
    """An answer of the broker that does not have the expected shape."""


class TaskTimeout(SluiceError):
    """A task did not finish within the time given; it is still queued or running."""

    def __init__(self, task_id: str, timeout: float, status: str) -> None:
        super().__init__(
            f"task {task_id} did not finish within {timeout:g}s (it is {status}); it is "
            "still queued or running: wait longer, look it up later with task_status, or "
            "cancel it"
        )
        self.task_id = task_id
        self.timeout = timeout
        self.status = status


class TaskFailed(SluiceError):
    """A task ended ``FAILURE``, ``CANCELLED`` or ``UNKNOWN`` where a result was expected."""

    def __init__(self, task_id: str, status: str, error: Optional[str]) -> None:
        detail = f": {error}" if error else ""
        super().__init__(f"task {task_id} ended {status}{detail}")
        self.task_id = task_id
        self.status = status
        self.error = error
