"""What the broker answers, as typed dataclasses.

Durations are seconds (``float``) on the Python side and whole milliseconds on the wire
(fields ending ``_ms``); times are RFC 3339 strings as the broker sends them, except in a
governed queue's :class:`Flow`, where they are timezone-aware ``datetime`` values in UTC.

A body (and a task result) comes back in the form it was sent: a JSON value is
parsed (``kind`` ``json``), a ``text/plain`` body is a ``str`` (``kind`` ``text``), and a
binary body is ``bytes`` (``kind`` ``bytes``), byte-exact.

Over 1,000 lines: one dataclass per view the API answers, each with its parsing, in one module
so that ``from sluice.models import ...`` names every answer; they share the small parsing
helpers at the top.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import enum
import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .errors import DecodeError, InvalidInput

__all__ = [
    "AckOutcome",
    "Attempt",
    "AuditEntry",
    "AuditPage",
    "AdaptiveRate",
    "BodyKind",
    "Breaker",
    "BreakerReason",
    "BreakerState",
    "BreakerTransition",
    "BrowsePage",
    "Delivery",
    "ExtendResult",
    "FailureResult",
    "Flow",
    "FlowPoint",
    "History",
    "HistorySample",
    "Message",
    "Progress",
    "Queue",
    "QueueConfig",
    "QueuePage",
    "RateLimit",
    "Rates",
    "Redrive",
    "RedriveFilter",
    "RedriveGuard",
    "Scaling",
    "SendResult",
    "Stats",
    "TaskInfo",
    "TaskStatus",
    "Totals",
    "Trend",
    "TrendDirection",
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


_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)


def parse_rfc3339(s: str) -> _dt.datetime:
    """An RFC 3339 time as the broker writes it (``2026-01-01T10:00:00.25Z``), as a
    timezone-aware ``datetime`` in UTC. Fractions beyond microseconds are cut."""
    m = _RFC3339.match(s) if isinstance(s, str) else None
    if not m:
        raise DecodeError(f"{s!r} is not an RFC 3339 time (like 2026-01-01T10:00:00Z)")
    y, mo, d, h, mi, sec, frac, z, sign, oh, om = m.groups()
    micros = int((frac or "0")[:6].ljust(6, "0"))
    tz = _dt.timezone.utc
    if not z:
        off = _dt.timedelta(hours=int(oh), minutes=int(om))
        tz = _dt.timezone(off if sign == "+" else -off)
    try:
        t = _dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), micros, tzinfo=tz)
    except ValueError as e:
        raise DecodeError(f"{s!r} is not an RFC 3339 time: {e}") from None
    return t.astimezone(_dt.timezone.utc)


def _t(s: Optional[str]) -> Optional[_dt.datetime]:
    return None if s is None else parse_rfc3339(s)


_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\S.*?)\s*$")
_RATE_UNITS = {
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class RateLimit:
    """At most ``limit`` events in any window of ``period`` seconds: a queue's deliveries
    (all consumers together), or the moves of a redrive job."""

    limit: int
    period: float
    burst: Optional[int] = None
    """How many may go at once after a quiet spell (1 – ``limit``); the rest are spread one per
    ``period / limit``. None: a tenth of ``limit``, at least 1."""

    def to_wire(self) -> Dict[str, int]:
        out = {"limit": self.limit, "period_ms": int(round(self.period * 1000))}
        if self.burst is not None:
            out["burst"] = self.burst
        return out

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "RateLimit":
        burst = d.get("burst")
        return cls(int(d["limit"]), d["period_ms"] / 1000.0, int(burst) if burst is not None else None)

    @classmethod
    def parse(cls, text: str) -> "RateLimit":
        """Reads a rate written the way the ``sluice`` command line takes it:
        ``<count>/<period>``, where the period is a unit (``s``, ``sec``, ``min``, ``m``,
        ``h``, ``hour``, ``d``, ``day``, plurals too) or a duration (``60s``, ``500ms``,
        ``1.5h``). ``"50/min"`` is ``RateLimit(50, 60.0)``; ``"1000/60s"`` is
        ``RateLimit(1000, 60.0)``.

        Raises :class:`~sluice.InvalidInput` (a ``ValueError``) for anything else, for a
        count of 0 and for a period shorter than a millisecond.
        """
        hint = "write it like 50/min, 10/s, 1000/h or 1000/60s"
        if not isinstance(text, str):
            raise InvalidInput(f"a rate is a string like 50/min, got {text!r}")
        m = _RATE.match(text)
        if not m:
            raise InvalidInput(f"{text!r} is not a rate; {hint}")
        unit = m.group(2).lower()
        if unit in _RATE_UNITS:
            period = _RATE_UNITS[unit]
        else:
            d = _DURATION.match(unit)
            if not d:
                raise InvalidInput(f"{text!r} is not a rate: {m.group(2)!r} is not a period; {hint}")
            period = float(d.group(1)) * _DURATION_UNITS[d.group(2)]
        return cls.of(int(m.group(1)), period, what=repr(text))

    @classmethod
    def of(cls, limit: int, period: float, *, what: str = "the rate") -> "RateLimit":
        """A checked ``RateLimit``: ``limit`` a whole number of at least 1, ``period`` at
        least a millisecond (seconds). :class:`~sluice.InvalidInput` otherwise."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInput(f"{what}: the count must be a whole number of at least 1, got {limit!r}")
        if (
            isinstance(period, bool)
            or not isinstance(period, (int, float))
            or not math.isfinite(period)
            or round(period * 1000) < 1
        ):
            raise InvalidInput(f"{what}: the period must be at least 1 ms (in seconds), got {period!r}")
        return cls(limit, float(period))

    def __str__(self) -> str:
        ms = int(round(self.period * 1000))
        unit = {1000: "s", 60_000: "min", 3_600_000: "h", 86_400_000: "d"}.get(ms)
        if unit is None:
            unit = f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"
        return f"{self.limit}/{unit}"


@dataclass(frozen=True)
class QueueConfig:
    """The full configuration of a queue."""

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
    push: Optional[Dict[str, Any]] = None
    """The push target (without its secret: ``signed`` says whether there is one), or None."""
    max_in_flight_per_group: int = 1
    default_priority: int = 4
    """The priority of messages sent without one."""
    key_weights: Dict[str, int] = field(default_factory=dict)
    """Fairness weights by key pattern; keys no pattern matches weigh 1."""
    key_limits: Optional[Dict[str, Any]] = None
    """What each key may have at once (``{"max_in_flight": 2, "overrides": {...}}``), or None."""

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
            rate_limit=RateLimit.from_wire(rl) if rl else None,
            result_ttl=d["result_ttl_ms"] / 1000.0,
            paused=bool(d.get("paused", False)),
            push=d.get("push"),
            max_in_flight_per_group=int(d.get("max_in_flight_per_group", 1)),
            default_priority=int(d.get("default_priority", 4)),
            key_weights=dict(d.get("key_weights") or {}),
            key_limits=d.get("key_limits"),
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
    group: Optional[str] = None
    """Its FIFO message group, if it was sent with one."""
    key: Optional[str] = None
    """Its key (the tenant it belongs to), if it was sent with one."""
    priority: int = 4
    """The priority it was delivered at (0 – 9): its own, else its queue's default."""
    trace: Optional[Dict[str, str]] = None
    """The W3C trace context it was sent with (``traceparent``, and ``tracestate`` if any),
    if it was sent with one: the parent of the span that handles it."""
    decode_error: Optional[str] = None
    """Set when the JSON body could not be decoded (nested deeper than Python's parser
    follows, about 1,000 levels; brokers refuse more than 64, but a body stored before that
    rule may remain): ``body`` is then its exact JSON text as ``bytes``. The rest of the
    batch is decoded as usual; settle this delivery like any other (e.g. ``reject`` it)."""

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Delivery":
        from ._deep_json import RAW_BODY

        raw = d.get(RAW_BODY)
        decode_error: Optional[str] = None
        if raw is not None:
            text, decode_error = raw
            body: Any = text.encode("utf-8")
            kind: Optional[BodyKind] = BodyKind.JSON
        else:
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
            group=d.get("group"),
            key=d.get("key"),
            priority=int(d.get("priority", 4)),
            trace=dict(d["trace"]) if d.get("trace") else None,
            decode_error=decode_error,
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
    """One finished delivery: when it ended (``at``) and how, the error reported, the
    consumer that held it, and when its lease began (``started_at``; ``None`` for
    deliveries recorded before lease starts were kept)."""

    at: str
    outcome: str
    error: Optional[str]
    consumer: Optional[str]
    started_at: Optional[str] = None


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
    dead_lettered: bool = False
    """True while it sits in a dead-letter queue (``queue``); ``state`` is then its state
    there (usually ``visible``) and ``dead_letter_reason`` says why."""
    group: Optional[str] = None
    """Its FIFO message group, if it was sent with one (kept in a dead-letter queue)."""
    key: Optional[str] = None
    """Its key, if it was sent with one (kept in a dead-letter queue)."""
    priority: Optional[int] = None
    """The priority it was sent with; None when it named none (its queue's default applies)."""
    trace: Optional[Dict[str, str]] = None
    """The W3C trace context it was sent with, if any (kept through retries, dead-lettering
    and redrives; none on a completed record)."""

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
                Attempt(
                    a["at"],
                    a["outcome"],
                    a.get("error"),
                    a.get("consumer"),
                    a.get("started_at"),
                )
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
            dead_lettered=bool(d.get("dead_lettered", False)),
            group=d.get("group"),
            key=d.get("key"),
            priority=d.get("priority"),
            trace=dict(d["trace"]) if d.get("trace") else None,
        )


@dataclass(frozen=True)
class BrowsePage:
    """One page of a browse; pass ``next_cursor`` for the next (``None`` at the end)."""

    messages: List[Message]
    next_cursor: Optional[str]


@dataclass(frozen=True)
class QueuePage:
    """One page of the queue listing, by name; pass ``next_cursor`` for the next (``None``
    at the end)."""

    queues: List[Queue]
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
    """The status of a task."""

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
    """Events per second over one window (the last 1, 5 or 15 minutes). A queue younger
    than the window counts from zero at its creation, divided by the whole window: 50 sends
    into a new queue read ``sent == 50 / 60`` over the last minute at once."""

    sent: float = 0.0
    received: float = 0.0
    acked: float = 0.0
    nacked: float = 0.0
    dead_lettered: float = 0.0
    """Messages this queue sent to its DLQ."""
    redriven: float = 0.0
    """Messages a redrive moved into this queue."""
    expired: float = 0.0
    """Messages that outlived the queue's retention."""

    @classmethod
    def from_wire(cls, d: Optional[Mapping[str, Any]]) -> "Rates":
        d = d or {}
        return cls(**{k: float(d.get(k) or 0.0) for k in cls.__dataclass_fields__})


class TrendDirection(str, enum.Enum):
    """Which way a depth is going. A ``str``: ``TrendDirection.RISING == "rising"``."""

    RISING = "rising"
    """More goes in than out."""
    FALLING = "falling"
    """More goes out than in."""
    FLAT = "flat"
    """Nothing moved since the latest 10-s sample, or in and out balance."""

    @classmethod
    def from_wire(cls, s: Optional[str]) -> "TrendDirection":
        try:
            return cls(s or "flat")
        except ValueError:
            raise DecodeError(f"unknown trend direction {s!r}") from None


@dataclass(frozen=True)
class Trend:
    """Where one depth is heading: a queue's backlog (visible + delayed + in flight), or
    its DLQ depth. Every reading is defined in the broker's docs/readings.md."""

    direction: TrendDirection = TrendDirection.FLAT
    """The sign of ``change_1m``; flat when it is at most one message or 5 % of the events
    through the depth in that minute."""
    change_1m: int = 0
    """The depth's change over the last minute (positive: growing)."""
    slope: float = 0.0
    """That change per second."""
    slope_1m: float = 0.0
    """Deprecated, dropped in 0.2: equals ``slope``."""
    slope_5m: float = 0.0
    """The change over the last five minutes, per second."""
    eta: Optional[float] = None
    """While messages are being taken out: seconds until none is left at the rate they
    leave at (at most a delivery cap's rate); ``None`` otherwise, and while paused or
    stalled."""
    stalled_for: Optional[float] = None
    """Messages are visible and nothing has left for this many seconds (10 or more) while no
    delivery cap holds them: consumers are gone or stuck. ``None`` otherwise."""

    @classmethod
    def from_wire(cls, d: Optional[Mapping[str, Any]]) -> "Trend":
        if not d:
            return cls()
        return cls(
            direction=TrendDirection.from_wire(d.get("direction")),
            change_1m=int(d.get("change_1m") or 0),
            slope=float(d.get("slope") or 0.0),
            slope_1m=float(d.get("slope_1m") or 0.0),
            slope_5m=float(d.get("slope_5m") or 0.0),
            eta=_s(d.get("eta_ms")),
            stalled_for=_s(d.get("stalled_for_ms")),
        )


class BreakerState(str, enum.Enum):
    """Where a circuit breaker stands. A ``str``: ``BreakerState.OPEN == "open"``."""

    CLOSED = "closed"
    """Delivering; calls are counted."""
    OPEN = "open"
    """Not delivering: too many calls failed, or an operator forced it open."""
    HALF_OPEN = "half_open"
    """Letting a few probe deliveries through to see if the dependency is back."""

    @classmethod
    def from_wire(cls, s: Any) -> "BreakerState":
        try:
            return cls(s)
        except ValueError:
            raise DecodeError(f"unknown breaker state {s!r}") from None


class BreakerReason(str, enum.Enum):
    """Why a circuit breaker changed state. A ``str``: ``BreakerReason.FORCED == "forced"``."""

    FAILURES = "failures"
    """The failed share over the window reached ``failure_share`` (closed → open)."""
    PAUSE_OVER = "pause_over"
    """The pause of ``probe_every_ms`` is over (open → half-open)."""
    PROBES_SUCCEEDED = "probes_succeeded"
    """Every probe succeeded (half-open → closed)."""
    PROBE_FAILED = "probe_failed"
    """A probe failed (half-open → open)."""
    FORCED = "forced"
    """An operator forced it."""

    @classmethod
    def from_wire(cls, s: Any) -> "BreakerReason":
        try:
            return cls(s)
        except ValueError:
            raise DecodeError(f"unknown breaker reason {s!r}") from None


@dataclass(frozen=True)
class AdaptiveRate:
    """A governed queue's adaptive delivery rate now, in deliveries per minute."""

    rate_per_min: int
    """The governed rate now."""
    min_per_min: int
    max_per_min: int
    congestion_total: int
    """Congestion signals observed."""
    decreases_total: int
    """Times the rate was cut."""
    ceiling_per_min: Optional[int] = None
    """The queue's ``rate_limit`` as a rate per minute, which the rate never exceeds."""
    hold_until: Optional[_dt.datetime] = None
    """Nothing is delivered until then: the latest Retry-After a consumer reported."""

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "AdaptiveRate":
        return cls(
            rate_per_min=int(d["rate_per_min"]),
            min_per_min=int(d["min_per_min"]),
            max_per_min=int(d["max_per_min"]),
            congestion_total=int(d.get("congestion_total", 0)),
            decreases_total=int(d.get("decreases_total", 0)),
            ceiling_per_min=d.get("ceiling_per_min"),
            hold_until=_t(d.get("hold_until")),
        )


@dataclass(frozen=True)
class BreakerTransition:
    """One change of a circuit breaker's state."""

    at: _dt.datetime
    from_state: BreakerState
    """The state it left (``from`` on the wire)."""
    to: BreakerState
    reason: BreakerReason
    failure_share: float
    """The failed share of the calls in the window when it changed, 0 to 1."""
    calls: int
    """The calls in the window when it changed."""

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "BreakerTransition":
        return cls(
            at=parse_rfc3339(d["at"]),
            from_state=BreakerState.from_wire(d["from"]),
            to=BreakerState.from_wire(d["to"]),
            reason=BreakerReason.from_wire(d["reason"]),
            failure_share=int(d.get("failure_share_permille", 0)) / 1000.0,
            calls=int(d.get("calls", 0)),
        )


@dataclass(frozen=True)
class Breaker:
    """A governed queue's circuit breaker now."""

    state: BreakerState
    since: _dt.datetime
    forced: bool
    """An operator forced it open: it stays open, without probes, until forced closed."""
    failure_share: float
    """The failed share of the calls in the window, 0 to 1."""
    calls_in_window: int
    opened_total: int
    """Times it opened."""
    open_time: float
    """Seconds spent open or half-open, the current spell included."""
    probes_left: int
    """Probes a half-open breaker may still let through."""
    transitions: List[BreakerTransition] = field(default_factory=list)
    """The last transitions, oldest first."""
    next_probe_at: Optional[_dt.datetime] = None
    """When an open breaker lets probes through (not when forced open)."""

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Breaker":
        return cls(
            state=BreakerState.from_wire(d["state"]),
            since=parse_rfc3339(d["since"]),
            forced=bool(d.get("forced", False)),
            failure_share=int(d.get("failure_share_permille", 0)) / 1000.0,
            calls_in_window=int(d.get("calls_in_window", 0)),
            opened_total=int(d.get("opened_total", 0)),
            open_time=int(d.get("open_ms_total", 0)) / 1000.0,
            probes_left=int(d.get("probes_left", 0)),
            transitions=[BreakerTransition.from_wire(t) for t in d.get("transitions") or []],
            next_probe_at=_t(d.get("next_probe_at")),
        )


@dataclass(frozen=True)
class FlowPoint:
    """One point of a governed queue's recent history: its rate and breaker state from
    ``at`` on."""

    at: _dt.datetime
    rate_per_min: Optional[int] = None
    breaker: Optional[BreakerState] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "FlowPoint":
        b = d.get("breaker")
        return cls(
            at=parse_rfc3339(d["at"]),
            rate_per_min=d.get("rate_per_min"),
            breaker=None if b is None else BreakerState.from_wire(b),
        )


@dataclass(frozen=True)
class Flow:
    """A governed queue's adaptive rate and circuit breaker (``Stats.flow``, and the answer
    of :meth:`Client.force_breaker`); each part is ``None`` when the queue does not have it."""

    adaptive: Optional[AdaptiveRate] = None
    breaker: Optional[Breaker] = None
    history: List[FlowPoint] = field(default_factory=list)
    """Changes of the rate (by a tenth or more) and of the breaker state, oldest first."""

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Flow":
        a, b = d.get("adaptive"), d.get("breaker")
        return cls(
            adaptive=None if a is None else AdaptiveRate.from_wire(a),
            breaker=None if b is None else Breaker.from_wire(b),
            history=[FlowPoint.from_wire(p) for p in d.get("history") or []],
        )


@dataclass(frozen=True)
class Stats:
    """A queue's numbers: backlog, in flight, DLQ depth, totals, rates and trends.

    ``rates`` is the last minute, ``rates_5m`` and ``rates_15m`` the last 5 and 15.
    ``backlog_trend`` says where the backlog is heading and ``dlq_trend`` where the DLQ depth
    is (its ``eta`` is the time to empty the DLQ while a redrive takes messages out).
    ``backlog_slope_per_sec`` and ``drain_eta`` are ``backlog_trend.slope`` and
    ``backlog_trend.eta``, deprecated and dropped in 0.2. ``flow`` is a governed queue's adaptive
    rate and breaker, ``None`` for a queue that has neither. ``active_keys`` counts the named
    keys with messages waiting or in flight (:meth:`Client.keys` lists them).
    """

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
    rates_5m: Rates = field(default_factory=Rates)
    rates_15m: Rates = field(default_factory=Rates)
    backlog_trend: Trend = field(default_factory=Trend)
    dlq_trend: Trend = field(default_factory=Trend)
    flow: Optional[Flow] = None
    active_keys: int = 0

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Stats":
        return cls(
            queue=d["queue"],
            visible=d["visible"],
            delayed=d["delayed"],
            in_flight=d["in_flight"],
            dead_letter_depth=d["dead_letter_depth"],
            oldest_visible_age=d.get("oldest_visible_age_ms", 0) / 1000.0,
            completed=d.get("completed", 0),
            totals=Totals.from_wire(d.get("totals") or {}),
            rates=Rates.from_wire(d.get("rates")),
            backlog_slope_per_sec=float(d.get("backlog_slope_per_sec", 0.0)),
            drain_eta=_s(d.get("drain_eta_ms")),
            rates_5m=Rates.from_wire(d.get("rates_5m")),
            rates_15m=Rates.from_wire(d.get("rates_15m")),
            backlog_trend=Trend.from_wire(d.get("backlog_trend")),
            dlq_trend=Trend.from_wire(d.get("dlq_trend")),
            flow=None if d.get("flow") is None else Flow.from_wire(d["flow"]),
            active_keys=d.get("active_keys", 0),
        )


@dataclass(frozen=True)
class QueueOverview:
    """One queue of :meth:`Client.overview`: its stats, where its dead letters go, whether
    it is paused, and whether it is itself some queue's DLQ."""

    stats: Stats
    dead_letter_queue: Optional[str]
    paused: bool
    is_dead_letter_queue: bool

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "QueueOverview":
        return cls(
            stats=Stats.from_wire(d),
            dead_letter_queue=d.get("dead_letter_queue"),
            paused=bool(d.get("paused", False)),
            is_dead_letter_queue=bool(d.get("is_dead_letter_queue", False)),
        )


@dataclass(frozen=True)
class WhoAmI:
    """The caller's key as the broker sees it (:meth:`Client.whoami`). ``may`` lists what the
    role allows (``inspect``, ``redrive``, ``send`` …); without keys ``auth`` is false and
    everything is allowed."""

    auth: bool
    name: Optional[str]
    role: str
    queues: List[str]
    may: List[str]

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "WhoAmI":
        return cls(
            auth=bool(d["auth"]), name=d.get("name"), role=d["role"],
            queues=list(d.get("queues") or []), may=list(d.get("may") or []),
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
    #: The last error is exactly this text (one group of a summary by error).
    error_is: Optional[str] = None
    #: Dead-lettered for this reason: ``exhausted``, ``lease_expired``, ``rejected``, ``expired``.
    reason: Optional[str] = None
    #: Dead-lettered or moved from this queue.
    source_queue: Optional[str] = None
    #: Sent with this key (one group of a summary by key).
    key: Optional[str] = None

    def to_wire(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for name in ("error_contains", "error_is", "reason", "source_queue", "key"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.attributes:
            out["attributes"] = dict(self.attributes)
        if self.dead_lettered_before is not None:
            out["dead_lettered_before"] = self.dead_lettered_before
        if self.dead_lettered_after is not None:
            out["dead_lettered_after"] = self.dead_lettered_after
        return out


@dataclass(frozen=True)
class RedriveGuard:
    """``pause_if_failing`` of a redrive job: it pauses itself when more than ``percent`` %
    (1 – 100) of the last ``window`` messages it moved failed again (nacked, rejected,
    dead-lettered or moved away), counting only errors that contain ``error_contains`` when
    given. It never pauses before ``window`` outcomes (1 – 10,000; the broker's default 20
    when ``None``) are in."""

    percent: int
    window: Optional[int] = None
    error_contains: Optional[str] = None

    def to_wire(self) -> Dict[str, Any]:
        if isinstance(self.percent, bool) or not isinstance(self.percent, int):
            raise InvalidInput(f"pause_if_failing.percent must be a whole number, got {self.percent!r}")
        out: Dict[str, Any] = {"percent": self.percent}
        if self.window is not None:
            out["window"] = self.window
        if self.error_contains is not None:
            out["error_contains"] = self.error_contains
        return out

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "RedriveGuard":
        return cls(int(d["percent"]), d.get("window"), d.get("error_contains"))


@dataclass(frozen=True)
class RedriveSkips:
    """What a redrive's scan passed without moving, by reason: left out by its ``filtered``,
    matching with ``no_destination`` (no source queue recorded and none named), or matching
    with a ``missing_destination`` (their queue no longer exists; ``missing_queues`` names up
    to 8)."""

    filtered: int = 0
    no_destination: int = 0
    missing_destination: int = 0
    missing_queues: Tuple[str, ...] = ()

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "RedriveSkips":
        return cls(
            int(d.get("filtered", 0)),
            int(d.get("no_destination", 0)),
            int(d.get("missing_destination", 0)),
            tuple(d.get("missing_queues") or ()),
        )


@dataclass(frozen=True)
class Redrive:
    """A redrive job and its progress.

    ``state`` is ``running``, ``paused`` (by an operator, or by its guard: ``paused_reason``
    says which and why), ``completed`` or ``cancelled``; see :attr:`finished`. ``rate`` is the
    pace asked for (at most ``rate.limit`` moves in any sliding ``rate.period`` seconds);
    ``rate_per_second`` repeats it when its period is one second. ``to_move`` is how many it
    will move in all while it runs or is paused (what it moved, plus its source's messages
    that match its filter, within its limit); ``None`` once it has finished and for a dry run.
    ``would_move`` is, for a dry run, what it would move (matches with a queue to go to,
    within the limit). ``skips`` counts what its scan passed without moving, by reason, and
    ``skip_reasons`` says each reason in a sentence with what to do about it.
    """

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
    rate: Optional[RateLimit] = None
    pause_if_failing: Optional[RedriveGuard] = None
    paused_reason: Optional[str] = None
    to_move: Optional[int] = None
    would_move: Optional[int] = None
    skips: RedriveSkips = RedriveSkips()
    skip_reasons: Tuple[str, ...] = ()

    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        """``completed`` or ``cancelled``: the job moves nothing more. A ``paused`` job is not
        finished; it goes on once resumed."""
        return self.state in (self.COMPLETED, self.CANCELLED)

    @property
    def paused(self) -> bool:
        return self.state == self.PAUSED

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Redrive":
        f = d.get("filter") or {}
        rate = d.get("rate")
        guard = d.get("pause_if_failing")
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
                error_is=f.get("error_is"),
                reason=f.get("reason"),
                source_queue=f.get("source_queue"),
                key=f.get("key"),
            ),
            reset_receive_count=bool(d.get("reset_receive_count", True)),
            dry_run=bool(d.get("dry_run", False)),
            created_at=d.get("created_at", ""),
            updated_at=d.get("updated_at", ""),
            finished_at=d.get("finished_at"),
            rate=RateLimit.from_wire(rate) if rate else None,
            pause_if_failing=RedriveGuard.from_wire(guard) if guard else None,
            paused_reason=d.get("paused_reason"),
            to_move=d.get("to_move"),
            would_move=d.get("would_move"),
            skips=RedriveSkips.from_wire(d.get("skips") or {}),
            skip_reasons=tuple(d.get("skip_reasons") or ()),
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

    @classmethod
    def from_wire(cls, e: Mapping[str, Any]) -> "AuditEntry":
        return cls(
            e["at"], e["actor"], e["action"], e.get("queue"), e.get("message_id"),
            dict(e.get("details") or {}), e.get("outcome", "ok"),
        )


@dataclass(frozen=True)
class AuditPage:
    """One page of the audit log: the newest ``limit`` entries that match (before the
    cursor asked with), oldest first. When older entries match too, ``more`` is true and
    ``next_cursor`` asks for the page before this one; ``None`` at the oldest page."""

    entries: List[AuditEntry]
    more: bool
    next_cursor: Optional[str]

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "AuditPage":
        entries = [AuditEntry.from_wire(e) for e in d.get("entries") or []]
        return cls(entries, bool(d.get("more", False)), d.get("next_cursor"))


@dataclass(frozen=True)
class Schedule:
    """A schedule: a message the broker enqueues on a cron expression (read in ``timezone``)
    or every ``every_ms`` milliseconds, with its progress and its next five firings (RFC 3339;
    none while paused). ``body`` is the JSON value, or ``bytes`` for a binary body."""

    name: str
    queue: str
    body: Any
    attributes: Dict[str, str]
    catch_up: str
    paused: bool
    created_at: str
    updated_at: str
    fired: int
    missed: int
    next: List[str]
    cron: Optional[str] = None
    timezone: Optional[str] = None
    every_ms: Optional[int] = None
    last_fired: Optional[str] = None
    #: The key of every message it enqueues, if it gives one.
    key: Optional[str] = None
    #: The priority of every message it enqueues, if it names one.
    priority: Optional[int] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Schedule":
        import base64 as _b64

        body: Any = d.get("body")
        if d.get("body_base64") is not None:
            body = _b64.b64decode(d["body_base64"])
        return cls(
            name=d["name"],
            queue=d["queue"],
            body=body,
            attributes=dict(d.get("attributes") or {}),
            catch_up=d.get("catch_up", "none"),
            paused=bool(d.get("paused", False)),
            created_at=d.get("created_at", ""),
            updated_at=d.get("updated_at", ""),
            fired=d.get("fired", 0),
            missed=d.get("missed", 0),
            next=list(d.get("next") or []),
            cron=d.get("cron"),
            timezone=d.get("timezone"),
            every_ms=d.get("every_ms"),
            last_fired=d.get("last_fired"),
            key=d.get("key"),
            priority=d.get("priority"),
        )
