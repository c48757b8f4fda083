"""What a send carries: a message with its options (:class:`OutMessage`), a task for
``enqueue_many`` (:class:`TaskSpec`), and the request bodies built from them."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

from ._transport import dumps
from .envelope import envelope_wire
from .errors import InvalidInput


def ms(seconds: float, what: str) -> int:
    if seconds < 0:
        raise InvalidInput(f"{what} must not be negative, got {seconds}")
    return int(round(seconds * 1000))


def task_message(
    task: str,
    args: Optional[Sequence[Any]],
    kwargs: Optional[Mapping[str, Any]],
    attributes: Optional[Mapping[str, str]],
    delay: Optional[float],
    dedup_id: Optional[str],
    group: Optional[str],
    key: Optional[str] = None,
    priority: Optional[int] = None,
) -> Dict[str, Any]:
    """The send of one task, as the broker reads it."""
    return with_options(
        {"body": envelope_wire(task, args, kwargs)}, attributes, delay, dedup_id, group, key, priority
    )


def with_options(
    msg: Dict[str, Any],
    attributes: Optional[Mapping[str, str]],
    delay: Optional[float],
    dedup_id: Optional[str],
    group: Optional[str],
    key: Optional[str] = None,
    priority: Optional[int] = None,
) -> Dict[str, Any]:
    """``msg`` with a send's options, those that are given."""
    if attributes:
        msg["attributes"] = dict(attributes)
    if delay is not None:
        msg["delay_ms"] = ms(delay, "delay")
    if dedup_id is not None:
        msg["dedup_id"] = dedup_id
    if group is not None:
        msg["group"] = group
    if key is not None:
        msg["key"] = key
    if priority is not None:
        msg["priority"] = check_priority(priority)
    return msg


def check_priority(priority: Any) -> int:
    """A priority as the broker takes it: a whole number 0 – 9 (9 most urgent)."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
        raise InvalidInput(f"priority must be a whole number from 0 to 9 (9 most urgent), got {priority!r}")
    return priority


def spec_of(item: Any, index: int) -> "TaskSpec":
    if isinstance(item, tuple) and 2 <= len(item) <= 3:
        return TaskSpec(*item)
    raise InvalidInput(
        f"task #{index} of enqueue_many must be a TaskSpec or a tuple (task, args) or "
        f"(task, args, kwargs), got {type(item).__name__}"
    )


#: Most tasks, and most bytes, in one request of ``enqueue_many``.
ENQUEUE_BATCH = 1000
ENQUEUE_BATCH_BYTES = 8 * 1024 * 1024


def chunks(bodies: List[bytes]) -> Iterator[List[bytes]]:
    chunk: List[bytes] = []
    size = 0
    for b in bodies:
        if chunk and (len(chunk) == ENQUEUE_BATCH or size + len(b) > ENQUEUE_BATCH_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(b)
        size += len(b) + 1
    if chunk:
        yield chunk


@dataclass
class OutMessage:
    """One message of a batch send. ``body`` is any JSON value, or ``bytes`` (sent as
    base64 and kept byte-exact). ``group`` puts it in a FIFO message group (1 – 128
    characters): messages of one group are delivered in send order, at most the queue's
    ``max_in_flight_per_group`` (default 1) at a time. ``key`` names the tenant it belongs to
    (deliveries go round-robin across a queue's keys) and ``priority`` (0 – 9, 9 most urgent)
    sends it ahead of lower ones."""

    body: Any
    attributes: Dict[str, str] = field(default_factory=dict)
    delay: Optional[float] = None
    dedup_id: Optional[str] = None
    group: Optional[str] = None
    key: Optional[str] = None
    priority: Optional[int] = None

    def to_wire(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        if isinstance(self.body, (bytes, bytearray, memoryview)):
            out["body_base64"] = base64.b64encode(bytes(self.body)).decode("ascii")
        else:
            dumps(self.body, "the body")
            out["body"] = self.body
        return with_options(
            out, self.attributes, self.delay, self.dedup_id, self.group, self.key, self.priority
        )


@dataclass(frozen=True)
class TaskSpec:
    """One task of :meth:`Client.enqueue_many`, with the options of :meth:`Client.enqueue`."""

    task: str
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    delay: Optional[float] = None
    dedup_id: Optional[str] = None
    attributes: Mapping[str, str] = field(default_factory=dict)
    group: Optional[str] = None
    key: Optional[str] = None
    priority: Optional[int] = None
