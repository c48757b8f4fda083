"""The worker's own numbers: tasks finished by outcome, dead letters, tasks in flight,
broker errors and handler time. Thread-safe; read them at any time with
:meth:`WorkerMetrics.snapshot`."""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

__all__ = ["HANDLER_TIME_BUCKETS", "MetricsSnapshot", "Outcome", "WorkerMetrics"]

#: Upper bounds (seconds) of the handler-time histogram buckets, as in the Rust SDK.
HANDLER_TIME_BUCKETS: Tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
)


class Outcome(str, enum.Enum):
    """How one delivery ended, from the worker's side."""

    SUCCESS = "success"
    """Acked: the task is ``SUCCESS``."""
    RETRY = "retry"
    """Nacked after a transient error: it will be tried again."""
    FAILURE = "failure"
    """Dead-lettered: a permanent error, or the last attempt failed. ``FAILURE``."""
    CANCELLED = "cancelled"
    """The task was cancelled while it ran. ``CANCELLED``."""
    UNPROCESSABLE = "unprocessable"
    """Not a decodable envelope, an unknown task or arguments that do not fit: moved."""
    RELEASED = "released"
    """Handed back at shutdown before it finished."""
    LOST = "lost"
    """Its settlement did not reach the broker (the lease had moved on): it runs again."""


@dataclass(frozen=True)
class MetricsSnapshot:
    """The worker's numbers at one moment."""

    completed: Dict[Outcome, int]
    in_flight: int
    dead_lettered: int
    broker_errors: int
    results_dropped: int
    handler_seconds_sum: float
    handler_seconds_count: int
    handler_seconds_buckets: List[int] = field(default_factory=list)
    """Cumulative counts per bound of :data:`HANDLER_TIME_BUCKETS`."""

    def count(self, outcome: Outcome) -> int:
        return self.completed.get(outcome, 0)


class WorkerMetrics:
    """Live counters of a worker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._completed: Dict[Outcome, int] = {o: 0 for o in Outcome}
        self._in_flight = 0
        self._dead_lettered = 0
        self._broker_errors = 0
        self._results_dropped = 0
        self._sum = 0.0
        self._count = 0
        self._buckets = [0] * len(HANDLER_TIME_BUCKETS)

    def started(self) -> None:
        with self._lock:
            self._in_flight += 1

    def finished(self, outcome: Outcome) -> None:
        with self._lock:
            self._in_flight -= 1
            self._completed[outcome] += 1

    def handler_time(self, seconds: float) -> None:
        with self._lock:
            self._sum += seconds
            self._count += 1
            for i, bound in enumerate(HANDLER_TIME_BUCKETS):
                if seconds <= bound:
                    self._buckets[i] += 1

    def dead_letter(self) -> None:
        with self._lock:
            self._dead_lettered += 1

    def broker_error(self) -> None:
        with self._lock:
            self._broker_errors += 1

    def result_dropped(self) -> None:
        with self._lock:
            self._results_dropped += 1

    def snapshot(self) -> MetricsSnapshot:
        with self._lock:
            return MetricsSnapshot(
                completed=dict(self._completed),
                in_flight=self._in_flight,
                dead_lettered=self._dead_lettered,
                broker_errors=self._broker_errors,
                results_dropped=self._results_dropped,
                handler_seconds_sum=self._sum,
                handler_seconds_count=self._count,
                handler_seconds_buckets=list(self._buckets),
            )
