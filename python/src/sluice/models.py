"""What the broker answers, as typed dataclasses.

Durations are seconds (``float``) on the Python side and whole milliseconds on the wire
(fields ending ``_ms``); times are RFC 3339 strings as the broker sends them.

A body (and a task result) comes back in the form it was sent (SPEC §8): a JSON value is
parsed (``kind`` ``json``), a ``text/plain`` body is a ``str`` (``kind`` ``text``), and a
binary body is ``bytes`` (``kind`` ``bytes``), byte-exact.
"""

from __future__ import annotations

import base64
import binascii
import enum
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .errors import DecodeError

__all__ = [
    "AckOutcome",
    "Attempt",
    "AuditEntry",
    "BodyKind",
    "BrowsePage",
    "Delivery",
    "ExtendResult",
    "FailureResult",
    "History",
    "HistorySample",
    "Message",
    "Progress",
    "Queue",
    "QueueConfig",
    "RateLimit",
    "Rates",
    "Redrive",
    "RedriveFilter",
    "Scaling",
    "SendResult",
    "Stats",
    "TaskInfo",
    "TaskStatus",
    "Totals",
]


class BodyKind(str, enum.Enum):
    """The form a body was sent in, and comes back in."""

    JSON = "json"
    TEXT = "text"
    BYTES = "bytes"


def decode_body(obj: Mapping[str, Any], name: str = "body") -> Tuple[Any, Optional[BodyKind]]:
    """The body (or result) of a wire object and its kind; ``(None, None)`` when absent."""
    b64 = obj.get(f"{name}_base64")
    if b64 is not None:
        try:
            return base64.b64decode(b64, validate=True), BodyKind.BYTES
        except (binascii.Error, ValueError) as e:
            raise DecodeError(f"{name}_base64 is not base64: {e}") from e
    if name not in obj:
        return None, None
    if obj.get(f"{name}_encoding") == "text":
        return obj[name], BodyKind.TEXT
    return obj[name], BodyKind.JSON


def _s(ms: Optional[int]) -> Optional[float]:
    return None if ms is None else ms / 1000.0


@dataclass(frozen=True)
class RateLimit:
    """At most ``limit`` deliveries in any window of ``period`` seconds, all consumers."""

    limit: int
    period: float

    def to_wire(self) -> Dict[str, int]:
        return {"limit": self.limit, "period_ms": int(round(self.period * 1000))}


@dataclass(frozen=True)
class QueueConfig:
    """The full configuration of a queue (SPEC §3)."""

    visibility_timeout: float
    max_receive_count: int
    dead_letter_queue: Optional[str]
    backoff_base: float
    backoff_max: float
    delay: float
    retention: float
    max_message_bytes: int
    dedup_window: float
    max_in_flight: Optional[int]
    max_depth: Optional[int]
    rate_limit: Optional[RateLimit]
    result_ttl: float
    paused: bool

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "QueueConfig":
        rl = d.get("rate_limit")
        return cls(
            visibility_timeout=d["visibility_timeout_ms"] / 1000.0,
            max_receive_count=d["max_receive_count"],
            dead_letter_queue=d.get("dead_letter_queue"),
            backoff_base=d["backoff_base_ms"] / 1000.0,
            backoff_max=d["backoff_max_ms"] / 1000.0,
            delay=d["delay_ms"] / 1000.0,
            retention=d["retention_ms"] / 1000.0,
            max_message_bytes=d["max_message_bytes"],
            dedup_window=d["dedup_window_ms"] / 1000.0,
            max_in_flight=d.get("max_in_flight"),
            max_depth=d.get("max_depth"),
            rate_limit=RateLimit(rl["limit"], rl["period_ms"] / 1000.0) if rl else None,
            result_ttl=d["result_ttl_ms"] / 1000.0,
            paused=bool(d.get("paused", False)),
        )


@dataclass(frozen=True)
class Queue:
    """A queue: its name, creation time and configuration."""

    name: str
    created_at: str
    config: QueueConfig
    warnings: List[str] = field(default_factory=list)
    created: bool = False
    """True when the ``put_queue`` that answered this created the queue."""

    @classmethod
    def from_wire(cls, d: Mapping[str, Any], created: bool = False) -> "Queue":
        return cls(
            name=d["name"],
            created_at=d["created_at"],
            config=QueueConfig.from_wire(d["config"]),
            warnings=list(d.get("warnings") or []),
            created=created,
        )


@dataclass(frozen=True)
class SendResult:
    """The id of a sent message; ``duplicate`` when a send with the same ``dedup_id`` inside
    the window stored it already (the id is then the first message's)."""

    id: str
    duplicate: bool = False


@dataclass(frozen=True)
class Delivery:
    """One leased message. Settle it with its ``receipt``."""

    id: str
    receipt: str
    body: Any
    kind: BodyKind
    attributes: Dict[str, str]
    receive_count: int
    max_receive_count: int
    enqueued_at: str
    last_error: Optional[str]
    lease_deadline: str

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Delivery":
        body, kind = decode_body(d)
        return cls(
            id=d["id"],
            receipt=d["receipt"],
            body=body,
            kind=kind or BodyKind.JSON,
            attributes=dict(d.get("attributes") or {}),
            receive_count=d["receive_count"],
            max_receive_count=d["max_receive_count"],
            enqueued_at=d["enqueued_at"],
            last_error=d.get("last_error"),
            lease_deadline=d.get("lease_deadline", ""),
        )


@dataclass(frozen=True)
class AckOutcome:
    """The outcome of one receipt of a batch ack."""

    receipt: str
    ok: bool
    error_code: Optional[str] = None
    error_message: Optional[str] = None


@dataclass(frozen=True)
class FailureResult:
    """Where a nacked, rejected, released or moved message is now: ``state`` is
    ``visible``, ``delayed`` or ``dead_lettered``; ``queue`` the queue it is in."""

    state: str
    queue: str

    @property
    def dead_lettered(self) -> bool:
        return self.state == "dead_lettered"


@dataclass(frozen=True)
class ExtendResult:
    """The new lease end, and whether the task was cancelled meanwhile."""

    lease_deadline: str
    cancel_requested: bool


@dataclass(frozen=True)
class Attempt:
    """One finished delivery that did not succeed."""

    at: str
    outcome: str
    error: Optional[str]
    consumer: Optional[str]


@dataclass(frozen=True)
class Progress:
    """Progress reported by a running handler."""

    pct: float
    detail: Optional[str]
    at: str

    @classmethod
    def from_wire(cls, d: Optional[Mapping[str, Any]]) -> Optional["Progress"]:
        if not d:
            return None
        return cls(pct=float(d["pct"]), detail=d.get("detail"), at=d.get("at", ""))


@dataclass(frozen=True)
class Message:
    """A message as browse and ``get_message`` show it, wherever it is."""

    id: str
    queue: str
    state: str
    body: Any
    kind: Optional[BodyKind]
    attributes: Dict[str, str]
    enqueued_at: str
    receive_count: int
    last_error: Optional[str]
    attempts: List[Attempt]
    dedup_id: Optional[str]
    source_queue: Optional[str]
    dead_letter_reason: Optional[str]
    dead_lettered_at: Optional[str]
    result: Any
    result_kind: Optional[BodyKind]
    completed_at: Optional[str]
    cancelled: bool
    progress: Optional[Progress]
    visible_at: Optional[str] = None
    entered_at: Optional[str] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Message":
        body, kind = decode_body(d)
        result, rkind = decode_body(d, "result")
        return cls(
            id=d["id"],
            queue=d["queue"],
            state=d["state"],
            body=body,
            kind=kind,
            attributes=dict(d.get("attributes") or {}),
            enqueued_at=d["enqueued_at"],
            receive_count=d["receive_count"],
            last_error=d.get("last_error"),
            attempts=[
                Attempt(a["at"], a["outcome"], a.get("error"), a.get("consumer"))
                for a in d.get("attempts") or []
            ],
            dedup_id=d.get("dedup_id"),
            source_queue=d.get("source_queue"),
            dead_letter_reason=d.get("dead_letter_reason"),
            dead_lettered_at=d.get("dead_lettered_at"),
            result=result,
            result_kind=rkind,
            completed_at=d.get("completed_at"),
            cancelled=bool(d.get("cancelled", False)),
            progress=Progress.from_wire(d.get("progress")),
            visible_at=d.get("visible_at"),
            entered_at=d.get("entered_at"),
        )


@dataclass(frozen=True)
class BrowsePage:
    """One page of a browse; pass ``next_cursor`` for the next (``None`` at the end)."""

    messages: List[Message]
    next_cursor: Optional[str]


@dataclass(frozen=True)
class SummaryGroup:
    """One group of a summary: its key (``None`` for messages without a value), how many
    messages, the earliest and latest dead-lettering time (RFC 3339; for a message never
    dead-lettered, when it was sent) and one message id of the group (its smallest)."""

    key: Optional[str]
    count: int
    first_at: str
    last_at: str
    sample_id: str

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "SummaryGroup":
        return cls(
            key=d.get("key"),
            count=d["count"],
            first_at=d["first_at"],
            last_at=d["last_at"],
            sample_id=d["sample_id"],
        )


@dataclass(frozen=True)
class Summary:
    """Every message of a queue counted by one key, largest groups first; ``total`` counts
    every message matched, ``group_count`` every group, and ``more_groups`` says some groups
    were left out of ``groups`` (raise ``limit``, up to 1000)."""

    queue: str
    group_by: str
    total: int
    group_count: int
    more_groups: bool
    groups: List[SummaryGroup]

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Summary":
        return cls(
            queue=d["queue"],
            group_by=d["group_by"],
            total=d["total"],
            group_count=d["group_count"],
            more_groups=bool(d.get("more_groups", False)),
            groups=[SummaryGroup.from_wire(g) for g in d.get("groups") or []],
        )


class TaskStatus(str, enum.Enum):
    """The status of a task (SPEC §6)."""

    PENDING = "PENDING"
    STARTED = "STARTED"
    RETRY = "RETRY"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    UNKNOWN = "UNKNOWN"
    CANCELLED = "CANCELLED"

    @property
    def is_final(self) -> bool:
        """``SUCCESS``, ``FAILURE`` or ``CANCELLED``: it will not change by itself."""
        return self in (TaskStatus.SUCCESS, TaskStatus.FAILURE, TaskStatus.CANCELLED)


@dataclass(frozen=True)
class TaskInfo:
    """The status of a task, with its result or error."""

    id: str
    status: TaskStatus
    queue: Optional[str]
    receive_count: int
    result: Any = None
    result_kind: Optional[BodyKind] = None
    error: Optional[str] = None
    progress: Optional[Progress] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "TaskInfo":
        result, rkind = decode_body(d, "result")
        return cls(
            id=d["id"],
            status=TaskStatus(d["status"]),
            queue=d.get("queue"),
            receive_count=d.get("receive_count", 0),
            result=result,
            result_kind=rkind,
            error=d.get("error"),
            progress=Progress.from_wire(d.get("progress")),
        )


@dataclass(frozen=True)
class Scaling:
    """How many workers a queue wants: ``ceil((backlog + in_flight) / per_worker)``."""

    desired_workers: int
    backlog: int
    in_flight: int


@dataclass(frozen=True)
class Totals:
    """Event totals since the queue was created."""

    sent: int
    received: int
    acked: int
    nacked: int
    dead_lettered: int
    redriven: int
    expired: int

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Totals":
        return cls(**{k: int(d.get(k, 0)) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Rates:
    """Events per second over the last minute."""

    sent: float = 0.0
    received: float = 0.0
    acked: float = 0.0
    nacked: float = 0.0
    dead_lettered: float = 0.0


@dataclass(frozen=True)
class Stats:
    """A queue's numbers: backlog, in flight, DLQ depth, totals, rates and trend."""

    queue: str
    visible: int
    delayed: int
    in_flight: int
    dead_letter_depth: int
    oldest_visible_age: float
    completed: int
    totals: Totals
    rates: Rates
    backlog_slope_per_sec: float
    drain_eta: Optional[float]

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Stats":
        r = d.get("rates") or {}
        return cls(
            queue=d["queue"],
            visible=d["visible"],
            delayed=d["delayed"],
            in_flight=d["in_flight"],
            dead_letter_depth=d["dead_letter_depth"],
            oldest_visible_age=d.get("oldest_visible_age_ms", 0) / 1000.0,
            completed=d.get("completed", 0),
            totals=Totals.from_wire(d.get("totals") or {}),
            rates=Rates(**{k: float(r.get(k, 0.0)) for k in Rates.__dataclass_fields__}),
            backlog_slope_per_sec=float(d.get("backlog_slope_per_sec", 0.0)),
            drain_eta=_s(d.get("drain_eta_ms")),
        )


@dataclass(frozen=True)
class HistorySample:
    """One point of a queue's history."""

    at: str
    visible: int
    delayed: int
    in_flight: int
    dead_letter_depth: int
    oldest_visible_age: float
    totals: Totals


@dataclass(frozen=True)
class History:
    """A queue's history: a point every ``interval`` seconds, oldest first."""

    queue: str
    interval: float
    samples: List[HistorySample]

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "History":
        return cls(
            queue=d["queue"],
            interval=d["interval_ms"] / 1000.0,
            samples=[
                HistorySample(
                    at=s["at"],
                    visible=s["visible"],
                    delayed=s["delayed"],
                    in_flight=s["in_flight"],
                    dead_letter_depth=s["dead_letter_depth"],
                    oldest_visible_age=s["oldest_visible_age_ms"] / 1000.0,
                    totals=Totals.from_wire(s["totals"]),
                )
                for s in d.get("samples") or []
            ],
        )


@dataclass(frozen=True)
class RedriveFilter:
    """Which dead letters a redrive moves; every given condition must hold."""

    error_contains: Optional[str] = None
    attributes: Dict[str, str] = field(default_factory=dict)
    dead_lettered_before: Optional[str] = None
    dead_lettered_after: Optional[str] = None

    def to_wire(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        if self.error_contains is not None:
            out["error_contains"] = self.error_contains
        if self.attributes:
            out["attributes"] = dict(self.attributes)
        if self.dead_lettered_before is not None:
            out["dead_lettered_before"] = self.dead_lettered_before
        if self.dead_lettered_after is not None:
            out["dead_lettered_after"] = self.dead_lettered_after
        return out


@dataclass(frozen=True)
class Redrive:
    """A redrive job and its progress; ``state`` is ``running``, ``completed`` or
    ``cancelled``."""

    id: str
    state: str
    source: str
    destination: Optional[str]
    matched: int
    moved: int
    skipped: int
    blocked: Optional[str]
    limit: Optional[int]
    rate_per_second: Optional[int]
    filter: RedriveFilter
    reset_receive_count: bool
    dry_run: bool
    created_at: str
    updated_at: str
    finished_at: Optional[str]

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Redrive":
        f = d.get("filter") or {}
        return cls(
            id=d["id"],
            state=d["state"],
            source=d["source"],
            destination=d.get("destination"),
            matched=d.get("matched", 0),
            moved=d.get("moved", 0),
            skipped=d.get("skipped", 0),
            blocked=d.get("blocked"),
            limit=d.get("limit"),
            rate_per_second=d.get("rate_per_second"),
            filter=RedriveFilter(
                error_contains=f.get("error_contains"),
                attributes=dict(f.get("attributes") or {}),
                dead_lettered_before=f.get("dead_lettered_before"),
                dead_lettered_after=f.get("dead_lettered_after"),
            ),
            reset_receive_count=bool(d.get("reset_receive_count", True)),
            dry_run=bool(d.get("dry_run", False)),
            created_at=d.get("created_at", ""),
            updated_at=d.get("updated_at", ""),
            finished_at=d.get("finished_at"),
        )


@dataclass(frozen=True)
class AuditEntry:
    """One entry of the audit log."""

    at: str
    actor: str
    action: str
    queue: Optional[str]
    message_id: Optional[str]
    details: Dict[str, str]
    outcome: str
