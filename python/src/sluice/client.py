"""The :class:`Client`: every route of the HTTP API v1, typed.

Thread-safe and cheap to share: one connection pool serves every thread. Every call has a
timeout (a long poll's wait is added to it) and is retried by the rules of
:mod:`sluice._transport`.

Over 1,000 lines: one typed method per route of the API, each documented, in one class; the
wire models live in :mod:`sluice.models` and the retry rules in :mod:`sluice._transport`.
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote

from ._version import __version__
from ._transport import RetryPolicy, Transport, api_error, dumps
from ._deep_json import loads_receive_answer
from ._keys import KeyFlow, KeysPage
from ._messages import OutMessage, TaskSpec, check_priority, chunks, ms as _ms, spec_of, task_message
from .errors import (
    ApiError, DecodeError, ErrorCode, InvalidInput, PartialEnqueue, SluiceError, TaskFailed, TaskTimeout,
)
from .models import (
    AckOutcome,
    AuditEntry,
    AuditPage,
    BrowsePage,
    ExtendResult,
    FailureResult,
    Flow,
    History,
    Message,
    Delivery,
    Queue,
    QueueOverview,
    QueuePage,
    RateLimit,
    Redrive,
    RedriveFilter,
    RedriveGuard,
    Scaling,
    Schedule,
    SendResult,
    Stats,
    Summary,
    TaskInfo,
    TaskStatus,
    WhoAmI,
)

__all__ = ["CLEAR", "Client", "OutMessage", "QueueSettings", "NO_RESULT"]

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")
_ID = re.compile(r"^[0-9a-f]{16}$")
_JOB = re.compile(r"^[0-9A-Fa-f]{16}$")

#: Longest long poll the broker holds (seconds).
MAX_WAIT = 30.0


class _Clear:
    def __repr__(self) -> str:
        return "CLEAR"


#: Pass as a nullable queue setting (``dead_letter_queue``, ``max_in_flight``, ``max_depth``,
#: ``rate_limit``) to clear it.
CLEAR: Any = _Clear()


class _NoResult:
    def __repr__(self) -> str:
        return "NO_RESULT"


#: ``ack`` without a result (``None`` stores a JSON ``null``).
NO_RESULT: Any = _NoResult()


def _deprecated(old: str, new: str) -> None:
    warnings.warn(
        f"{old} is deprecated and will be dropped in 0.2; use {new}",
        DeprecationWarning,
        stacklevel=3,
    )


def _ack_outcome(o: Mapping[str, Any]) -> AckOutcome:
    err = o.get("error") or {}
    return AckOutcome(o["receipt"], bool(o["ok"]), err.get("code"), err.get("message"))


def _queue(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(
            f"queue name {name!r} is invalid: use 1 to 80 characters of A-Z, a-z, 0-9, '_', '.', '-'"
        )
    return name


def _id(task_id: str) -> str:
    if not isinstance(task_id, str) or not _ID.match(task_id):
        raise InvalidInput(f"{task_id!r} is not a message id (16 lowercase hex digits)")
    return task_id


def _job(redrive_id: str) -> str:
    if not isinstance(redrive_id, str) or not _JOB.match(redrive_id):
        raise InvalidInput(f"{redrive_id!r} is not a redrive job id (16 hex digits)")
    return redrive_id


def _schedule(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(
            f"schedule name {name!r} is invalid: use 1 to 80 characters of A-Z, a-z, 0-9, '_', '.', '-'"
        )
    return name


def _redrive_rate(rate: Union[str, Tuple[int, float], RateLimit]) -> RateLimit:
    if isinstance(rate, str):
        return RateLimit.parse(rate)
    if isinstance(rate, RateLimit):
        return RateLimit.of(rate.limit, rate.period)
    if isinstance(rate, tuple) and len(rate) == 2:
        return RateLimit.of(rate[0], rate[1])
    raise InvalidInput(
        f"rate must be text like '50/min', a (limit, period_seconds) pair or a RateLimit, got {rate!r}"
    )


@dataclass
class QueueSettings:
    """Settings for ``put_queue``. ``None`` keeps the current value (or the default on
    creation); :data:`CLEAR` clears a nullable one. Durations are seconds."""

    visibility_timeout: Optional[float] = None
    max_receive_count: Optional[int] = None
    dead_letter_queue: Any = None
    backoff_base: Optional[float] = None
    backoff_max: Optional[float] = None
    delay: Optional[float] = None
    retention: Optional[float] = None
    max_message_bytes: Optional[int] = None
    dedup_window: Optional[float] = None
    max_in_flight: Any = None
    max_depth: Any = None
    rate_limit: Any = None
    result_ttl: Optional[float] = None
    paused: Optional[bool] = None
    push: Any = None
    """A push target as the API takes it (``{"url": ..., "secret": ..., "concurrency": ...}``),
    or :data:`CLEAR` to stop pushing. Its request timeout is ``"timeout"``, in seconds like
    every duration of this SDK; the API's ``"timeout_ms"`` is still accepted, with a
    ``DeprecationWarning``, until 0.2."""
    max_in_flight_per_group: Optional[int] = None
    """Messages of one FIFO group that may be in flight at once (1 – 1000; default 1)."""
    default_priority: Optional[int] = None
    """The priority of messages sent without one (0 – 9; default 4)."""
    key_weights: Optional[Dict[str, int]] = None
    """Fairness weights by key pattern (``{"gold-*": 3}``), replaced whole; ``{}`` removes them."""
    key_limits: Any = None
    """What each key may have at once, as the API takes it (``{"max_in_flight": 2,
    "overrides": {"vip-*": {"max_in_flight": 10}}}``), or :data:`CLEAR`."""
    adaptive: Any = None
    """An adaptive delivery rate as the API takes it (``{"min_per_min": 10, "max_per_min":
    600}``), or :data:`CLEAR`."""
    breaker: Any = None
    """A circuit breaker as the API takes it (``{"failure_share": 0.5}``), or :data:`CLEAR`."""

    def to_wire(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for name in ("visibility_timeout", "backoff_base", "backoff_max", "delay", "retention",
                     "dedup_window", "result_ttl"):
            v = getattr(self, name)
            if v is not None:
                out[f"{name}_ms"] = _ms(v, name)
        for name in ("max_receive_count", "max_message_bytes", "paused", "max_in_flight_per_group",
                     "default_priority"):
            v = getattr(self, name)
            if v is not None:
                out[name] = v
        for name in ("dead_letter_queue", "max_in_flight", "max_depth"):
            v = getattr(self, name)
            if v is CLEAR:
                out[name] = None
            elif v is not None:
                out[name] = v
        if self.key_weights is not None:
            out["key_weights"] = dict(self.key_weights)
        if self.rate_limit is CLEAR:
            out["rate_limit"] = None
        elif isinstance(self.rate_limit, RateLimit):
            out["rate_limit"] = self.rate_limit.to_wire()
        elif self.rate_limit is not None:
            raise InvalidInput("rate_limit must be a RateLimit(limit, period_seconds) or CLEAR")
        for name, example in (("push", '{"url": "https://..."}'), ("adaptive", '{"min_per_min": 10, '
                              '"max_per_min": 600}'), ("breaker", '{"failure_share": 0.5}'),
                              ("key_limits", '{"max_in_flight": 2}')):
            v = getattr(self, name)
            if v is CLEAR:
                out[name] = None
            elif isinstance(v, dict):
                out[name] = _push_wire(v) if name == "push" else dict(v)
            elif v is not None:
                raise InvalidInput(f"{name} must be a dict like {example} or CLEAR")
        return out


def _push_wire(target: Mapping[str, Any]) -> Dict[str, Any]:
    """A push target with its ``timeout`` (seconds) as the API's ``timeout_ms``."""
    out = dict(target)
    if "timeout" in out:
        if "timeout_ms" in out:
            raise InvalidInput("give the push target's timeout (seconds) or timeout_ms, not both")
        out["timeout_ms"] = _ms(out.pop("timeout"), "push timeout")
    elif "timeout_ms" in out:
        warnings.warn(
            'a push target\'s "timeout_ms" is deprecated and will be dropped in 0.2; give '
            '"timeout" in seconds',
            DeprecationWarning,
            stacklevel=4,
        )
    return out


class Client:
    """A client of one Sluice broker.

    >>> client = Client("http://127.0.0.1:7878")              # doctest: +SKIP
    >>> client.put_queue("jobs", QueueSettings(max_receive_count=3))  # doctest: +SKIP
    >>> task_id = client.enqueue("jobs", "resize", ["cat.png"], {"width": 64})  # doctest: +SKIP
    >>> client.wait_for(task_id, timeout=30).status        # doctest: +SKIP
    <TaskStatus.SUCCESS: 'SUCCESS'>
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:7878",
        *,
        token: Optional[str] = None,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        retry: Optional[RetryPolicy] = None,
        idempotent_sends: bool = False,
        user_agent: Optional[str] = None,
        ca_cert: Optional[str] = None,
        client_cert: Optional[str] = None,
        client_key: Optional[str] = None,
    ) -> None:
        """``idempotent_sends`` gives every send a fresh ``Idempotency-Key``, which makes
        it safe to retry (the broker replays the first answer); it costs the broker 24 h of
        memory per key, so it is off by default.

        For an ``https://`` broker whose certificate a private CA signed, ``ca_cert`` names
        that CA's PEM file (default: ``SLUICE_CA_CERT``); ``client_cert`` and ``client_key``
        name the client certificate for a broker that requires one (default:
        ``SLUICE_CLIENT_CERT``, ``SLUICE_CLIENT_KEY``)."""
        self._t = Transport(
            base_url,
            token=token,
            timeout=timeout,
            connect_timeout=connect_timeout,
            retry=retry or RetryPolicy(),
            user_agent=user_agent or f"sluice-python/{__version__}",
            ca_cert=ca_cert,
            client_cert=client_cert,
            client_key=client_key,
        )
        self.idempotent_sends = idempotent_sends

    @property
    def base_url(self) -> str:
        return self._t.base_url

    def close(self) -> None:
        """Closes the connection pool."""
        self._t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- plumbing --------------------------------------------------------------------------

    def _json(self, method: str, path: str, *, idempotent: bool = True, **kw: Any) -> Any:
        resp = self._t.request(method, path, idempotent=idempotent, **kw)
        try:
            return resp.json()
        except ValueError as e:
            raise DecodeError(f"{method} {path}: the answer is not JSON: {e}") from e
        except RecursionError as e:
            raise DecodeError(
                f"{method} {path}: the answer nests deeper than Python's JSON parser follows: {e}"
            ) from e

    # -- queues ----------------------------------------------------------------------------

    def put_queue(
        self, name: str, settings: Optional[QueueSettings] = None, **fields: Any
    ) -> Queue:
        """Creates queue ``name`` or updates its settings (idempotent). Settings come as a
        :class:`QueueSettings` or as its fields: ``put_queue("jobs", max_receive_count=3)``.
        Its DLQ ``<name>.dlq`` is created with it."""
        s = settings or QueueSettings()
        if fields:
            s = QueueSettings(**{**s.__dict__, **fields})
        resp = self._t.request(
            "PUT", f"/v1/queues/{_queue(name)}", idempotent=True, json_body=s.to_wire()
        )
        return Queue.from_wire(resp.json(), created=resp.status_code == 201)

    def create_queue(
        self, name: str, settings: Optional[QueueSettings] = None, **fields: Any
    ) -> Queue:
        """Creates queue ``name`` only if it does not exist (``If-None-Match: *``); an
        existing queue is left as it is and raises ``conflict``. Settings as in
        :meth:`put_queue`."""
        s = settings or QueueSettings()
        if fields:
            s = QueueSettings(**{**s.__dict__, **fields})
        resp = self._t.request(
            "PUT",
            f"/v1/queues/{_queue(name)}",
            idempotent=False,
            json_body=s.to_wire(),
            headers={"if-none-match": "*"},
        )
        return Queue.from_wire(resp.json(), created=True)

    def get_queue(self, name: str) -> Queue:
        """A queue and its configuration; ``queue_not_found`` when it does not exist."""
        return Queue.from_wire(self._json("GET", f"/v1/queues/{_queue(name)}"))

    def list_queues(self, prefix: Optional[str] = None) -> List[Queue]:
        """Every queue the caller may see (whose name starts with ``prefix``, if given), by
        name: follows the listing's pages to the end. A queue that exists for the whole walk
        is listed exactly once; see :meth:`list_queues_page` for one page at a time."""
        queues: List[Queue] = []
        cursor: Optional[str] = None
        while True:
            page = self.list_queues_page(prefix=prefix, cursor=cursor)
            queues.extend(page.queues)
            if page.next_cursor is None:
                return queues
            if page.next_cursor == cursor:
                raise DecodeError(
                    f"the broker answered the same next_cursor ({cursor}) twice while listing queues"
                )
            cursor = page.next_cursor

    def list_queues_page(
        self, *, prefix: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> QueuePage:
        """One page of the queues the caller may see, by name: those starting with ``prefix``,
        at most ``limit`` (1 - 1000; the broker's default is 1000), after ``cursor`` (the
        previous page's ``next_cursor``, which is ``None`` on the last page)."""
        params = {"prefix": prefix or None, "limit": limit, "cursor": cursor}
        d = self._json("GET", "/v1/queues", params=params)
        return QueuePage([Queue.from_wire(q) for q in d["queues"]], d.get("next_cursor"))

    def delete_queue(self, name: str) -> None:
        """Deletes a queue and its messages (a retry that finds it gone is a success)."""
        try:
            self._t.request("DELETE", f"/v1/queues/{_queue(name)}", idempotent=True)
        except ApiError as e:
            if e.code is not ErrorCode.QUEUE_NOT_FOUND:
                raise

    def pause_queue(self, name: str) -> Queue:
        """Stops deliveries (sends are still accepted)."""
        return Queue.from_wire(self._json("POST", f"/v1/queues/{_queue(name)}/pause"))

    def force_breaker(self, name: str, state: str) -> Flow:
        """Forces the queue's circuit breaker ``"open"`` (deliveries stop, without probes,
        until forced closed) or ``"closed"`` (an empty window, automatic from then on);
        ``conflict`` for a queue without a breaker. Answers the queue's adaptive rate and
        breaker afterwards (as ``Stats.flow``)."""
        if state not in ("open", "closed"):
            raise ValueError(f'state must be "open" or "closed", got {state!r}')
        return Flow.from_wire(
            self._json("POST", f"/v1/queues/{_queue(name)}/breaker", json_body={"state": state})
        )

    def force_key_breaker(self, name: str, key: str, state: str) -> KeyFlow:
        """Forces the breaker of one key of a queue whose breaker is per key (``"scope":
        "key"``) ``"open"`` (that key's deliveries stop until forced closed; other keys go on)
        or ``"closed"``; ``conflict`` for a queue whose breaker is not per key. Answers the
        key's rate and breaker afterwards."""
        if state not in ("open", "closed"):
            raise ValueError(f'state must be "open" or "closed", got {state!r}')
        if not isinstance(key, str) or not key:
            raise InvalidInput(f"key must be a non-empty string, got {key!r}")
        path = f"/v1/queues/{_queue(name)}/keys/{quote(key, safe='')}/breaker"
        return KeyFlow.from_wire(self._json("POST", path, json_body={"state": state}))

    def resume_queue(self, name: str) -> Queue:
        """Resumes deliveries."""
        return Queue.from_wire(self._json("POST", f"/v1/queues/{_queue(name)}/resume"))

    def purge_queue(self, name: str) -> int:
        """Removes every message of the queue; answers how many."""
        return int(self._json("POST", f"/v1/queues/{_queue(name)}/purge", idempotent=False)["purged"])

    # -- send ------------------------------------------------------------------------------

    def _send_headers(self, key: Optional[str], dedup: bool) -> Tuple[Dict[str, str], bool]:
        if key is None and self.idempotent_sends:
            key = uuid.uuid4().hex
        return ({"idempotency-key": key} if key else {}), bool(key) or dedup

    def send(
        self,
        queue: str,
        body: Any,
        *,
        attributes: Optional[Mapping[str, str]] = None,
        delay: Optional[float] = None,
        dedup_id: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        group: Optional[str] = None,
        key: Optional[str] = None,
        priority: Optional[int] = None,
    ) -> SendResult:
        """Sends one message. ``body`` is any JSON value (refused with
        :class:`InvalidInput` before sending when JSON cannot hold it), or ``bytes`` (kept
        byte-exact and delivered as ``bytes``). ``group`` puts it in a FIFO message group;
        ``key`` names its tenant (deliveries go round-robin across keys); ``priority`` (0 – 9,
        9 most urgent) sends it ahead of lower ones."""
        m = OutMessage(body, dict(attributes or {}), delay, dedup_id, group, key, priority).to_wire()
        headers, safe = self._send_headers(idempotency_key, dedup_id is not None)
        d = self._json(
            "POST", f"/v1/queues/{_queue(queue)}/messages", idempotent=safe, json_body=m,
            headers=headers,
        )
        return SendResult(d["id"], bool(d.get("duplicate", False)))

    def send_text(
        self,
        queue: str,
        text: str,
        *,
        delay: Optional[float] = None,
        dedup_id: Optional[str] = None,
        group: Optional[str] = None,
        key: Optional[str] = None,
        priority: Optional[int] = None,
    ) -> SendResult:
        """Sends UTF-8 text as ``text/plain``; it is delivered as text (``BodyKind.TEXT``)."""
        params: Dict[str, Any] = {"dedup_id": dedup_id, "group": group, "key": key}
        if priority is not None:
            params["priority"] = check_priority(priority)
        if delay is not None:
            params["delay_ms"] = _ms(delay, "delay")
        headers, safe = self._send_headers(None, dedup_id is not None)
        d = self._json(
            "POST", f"/v1/queues/{_queue(queue)}/messages", idempotent=safe,
            content=text.encode("utf-8"), content_type="text/plain; charset=utf-8",
            params=params, headers=headers,
        )
        return SendResult(d["id"], bool(d.get("duplicate", False)))

    def send_raw(self, queue: str, data: bytes) -> SendResult:
        """Sends raw bytes as ``application/octet-stream``, byte-exact."""
        headers, safe = self._send_headers(None, False)
        d = self._json(
            "POST", f"/v1/queues/{_queue(queue)}/messages", idempotent=safe,
            content=bytes(data), content_type="application/octet-stream", headers=headers,
        )
        return SendResult(d["id"], bool(d.get("duplicate", False)))

    def send_batch(
        self,
        queue: str,
        messages: Sequence[Union[OutMessage, Any]],
        *,
        idempotency_key: Optional[str] = None,
    ) -> List[SendResult]:
        """Sends 1 – 1000 messages in one request, stored all or nothing. Items are
        :class:`OutMessage` or plain bodies."""
        items = [m if isinstance(m, OutMessage) else OutMessage(m) for m in messages]
        if not 1 <= len(items) <= 1000:
            raise InvalidInput(f"a batch holds 1 to 1000 messages, got {len(items)}")
        wire = [m.to_wire() for m in items]
        headers, safe = self._send_headers(
            idempotency_key, all(m.dedup_id is not None for m in items)
        )
        d = self._json(
            "POST", f"/v1/queues/{_queue(queue)}/messages", idempotent=safe,
            json_body={"messages": wire}, headers=headers,
        )
        dups = d.get("duplicates") or [False] * len(d["ids"])
        return [SendResult(i, bool(x)) for i, x in zip(d["ids"], dups)]

    # -- receive and settle ----------------------------------------------------------------

    def receive(
        self,
        queue: str,
        *,
        max: int = 1,
        wait: float = 0.0,
        visibility: Optional[float] = None,
        consumer: Optional[str] = None,
    ) -> List[Delivery]:
        """Leases up to ``max`` (1 – 1000) messages, long-polling up to ``wait`` seconds
        (0 – 30) for the first one."""
        return self._lease(queue, max, wait, visibility, consumer, None)[1]

    def ack_and_receive(
        self,
        queue: str,
        receipts: Sequence[str],
        *,
        max: int = 1,
        wait: float = 0.0,
        visibility: Optional[float] = None,
        consumer: Optional[str] = None,
    ) -> Tuple[List[AckOutcome], List[Delivery]]:
        """Acknowledges ``receipts`` (0 – 1000, as :meth:`ack_batch`) and then leases as
        :meth:`receive` does, in one round trip: the loop of a worker that settles each batch
        before taking the next. Returns one outcome per receipt, in order, and the new
        deliveries. If the call fails after the broker applied the acks, acking those
        receipts again reports ``receipt_stale``."""
        if len(receipts) > 1000:
            raise InvalidInput(f"an ack holds at most 1000 receipts, got {len(receipts)}")
        return self._lease(queue, max, wait, visibility, consumer, list(receipts))

    def _lease(
        self,
        queue: str,
        max: int,
        wait: float,
        visibility: Optional[float],
        consumer: Optional[str],
        ack: Optional[List[str]],
    ) -> Tuple[List[AckOutcome], List[Delivery]]:
        req: Dict[str, Any] = {"max": max, "wait_ms": _ms(wait, "wait")}
        if visibility is not None:
            req["visibility_timeout_ms"] = _ms(visibility, "visibility")
        if consumer is not None:
            req["consumer"] = consumer
        if ack:
            req["ack"] = ack
        path = f"/v1/queues/{_queue(queue)}/receive"
        resp = self._t.request("POST", path, idempotent=True, json_body=req, extra_timeout=wait)
        try:
            # A body too deep to decode is that delivery's own `decode_error`: a receive that
            # raised would leave the whole batch leased.
            d = loads_receive_answer(resp.content)
        except ValueError as e:
            raise DecodeError(f"POST {path}: the answer is not JSON: {e}") from e
        acked = [_ack_outcome(o) for o in d.get("acked") or []]
        return acked, [Delivery.from_wire(m) for m in d["messages"]]

    def ack(self, queue: str, receipt: str, result: Any = NO_RESULT) -> None:
        """Acknowledges a delivery, keeping ``result`` (any JSON value, or ``bytes``) for the
        queue's ``result_ttl``. A stale receipt raises ``receipt_stale``."""
        req: Dict[str, Any] = {"receipt": receipt}
        if isinstance(result, (bytes, bytearray)):
            req["result_base64"] = base64.b64encode(bytes(result)).decode("ascii")
        elif result is not NO_RESULT:
            dumps(result, "the result")
            req["result"] = result
        self._json("POST", f"/v1/queues/{_queue(queue)}/ack", json_body=req)

    def ack_batch(
        self, queue: str, items: Sequence[Union[str, Tuple[str, Any]]]
    ) -> List[AckOutcome]:
        """Acknowledges 1 – 1000 deliveries: receipts, or ``(receipt, result)`` pairs. Each
        has its own outcome, in order."""
        acks = []
        for it in items:
            if isinstance(it, str):
                acks.append({"receipt": it})
            else:
                r, res = it
                a: Dict[str, Any] = {"receipt": r}
                if isinstance(res, (bytes, bytearray)):
                    a["result_base64"] = base64.b64encode(bytes(res)).decode("ascii")
                elif res is not NO_RESULT:
                    a["result"] = res
                acks.append(a)
        d = self._json("POST", f"/v1/queues/{_queue(queue)}/ack", json_body={"acks": acks})
        return [_ack_outcome(o) for o in d["results"]]

    def nack(
        self,
        queue: str,
        receipt: str,
        *,
        delay: Optional[float] = None,
        retry_after: Optional[float] = None,
        error: Optional[str] = None,
        consumer: Optional[str] = None,
    ) -> FailureResult:
        """Returns a delivery for another attempt, after ``delay`` seconds or the queue's
        backoff; on its last attempt it is dead-lettered (state ``dead_lettered``).
        ``retry_after`` instead of ``delay`` is the dependency's own Retry-After (it answered
        429 or 503 and said how long to wait): the delivery waits that long, and a queue with
        an adaptive rate counts it as congestion."""
        if delay is not None and retry_after is not None:
            raise ValueError("give delay or retry_after, not both")
        req: Dict[str, Any] = {"receipt": receipt}
        if delay is not None:
            req["delay_ms"] = _ms(delay, "delay")
        if retry_after is not None:
            req["retry_after_ms"] = _ms(retry_after, "retry_after")
        if error is not None:
            req["error"] = error
        if consumer is not None:
            req["consumer"] = consumer
        d = self._json("POST", f"/v1/queues/{_queue(queue)}/nack", json_body=req)
        return FailureResult(d["state"], d["queue"])

    def reject(
        self, queue: str, receipt: str, *, error: Optional[str] = None,
        consumer: Optional[str] = None,
    ) -> FailureResult:
        """Dead-letters a delivery now, whatever its count (``conflict`` without a DLQ)."""
        req: Dict[str, Any] = {"receipt": receipt}
        if error is not None:
            req["error"] = error
        if consumer is not None:
            req["consumer"] = consumer
        d = self._json("POST", f"/v1/queues/{_queue(queue)}/reject", json_body=req)
        return FailureResult(d["state"], d["queue"])

    def release(self, queue: str, receipt: str) -> FailureResult:
        """Hands a delivery back without counting the attempt (visible again at once)."""
        d = self._json("POST", f"/v1/queues/{_queue(queue)}/release", json_body={"receipt": receipt})
        return FailureResult(d["state"], d["queue"])

    def move_message(
        self, queue: str, receipt: str, to: str, *, error: Optional[str] = None,
        consumer: Optional[str] = None,
    ) -> FailureResult:
        """Moves a delivery to queue ``to`` atomically, byte-exact (the unprocessable
        queue's way in)."""
        req: Dict[str, Any] = {"receipt": receipt, "to": _queue(to)}
        if error is not None:
            req["error"] = error
        if consumer is not None:
            req["consumer"] = consumer
        d = self._json("POST", f"/v1/queues/{_queue(queue)}/move", json_body=req)
        return FailureResult(d.get("state", "visible"), d.get("queue", to))

    def move(
        self, queue: str, receipt: str, to: str, *, error: Optional[str] = None,
        consumer: Optional[str] = None,
    ) -> FailureResult:
        """Deprecated, dropped in 0.2: :meth:`move_message`, the name the Rust SDK and the
        API's operation use."""
        _deprecated("Client.move", "Client.move_message")
        return self.move_message(queue, receipt, to, error=error, consumer=consumer)

    def extend(self, queue: str, receipt: str, visibility: float) -> ExtendResult:
        """Sets the lease to end ``visibility`` seconds from now; the answer says whether the
        task was cancelled meanwhile."""
        d = self._json(
            "POST", f"/v1/queues/{_queue(queue)}/extend",
            json_body={"receipt": receipt, "visibility_timeout_ms": _ms(visibility, "visibility")},
        )
        return ExtendResult(d["lease_deadline"], bool(d.get("cancel_requested", False)))

    def progress(
        self, queue: str, receipt: str, pct: float, detail: Optional[str] = None
    ) -> ExtendResult:
        """Reports a running task's progress (``pct`` 0 – 100); the answer also says whether
        it was cancelled. A handler calls ``TaskContext.progress`` instead."""
        d = self._json(
            "POST", f"/v1/queues/{_queue(queue)}/progress",
            json_body={"receipt": receipt, "pct": float(pct), "detail": detail},
        )
        return ExtendResult(d.get("lease_deadline", ""), bool(d.get("cancel_requested", False)))

    # -- inspect ---------------------------------------------------------------------------

    def browse(
        self,
        queue: str,
        *,
        state: str = "all",
        limit: int = 100,
        cursor: Optional[str] = None,
        error_contains: Optional[str] = None,
        attribute: Optional[Tuple[str, str]] = None,
        dead_lettered_before: Optional[str] = None,
        dead_lettered_after: Optional[str] = None,
        error_is: Optional[str] = None,
        reason: Optional[str] = None,
        source_queue: Optional[str] = None,
        key: Optional[str] = None,
    ) -> BrowsePage:
        """One page of a queue's messages without leasing them; ``state`` is ``visible``,
        ``delayed``, ``in_flight`` or ``all``; ``key`` keeps the messages sent with that key."""
        params = {
            "state": state, "limit": limit, "cursor": cursor, "error_contains": error_contains,
            "attribute": f"{attribute[0]}={attribute[1]}" if attribute else None,
            "dead_lettered_before": dead_lettered_before,
            "dead_lettered_after": dead_lettered_after,
            "error_is": error_is, "reason": reason, "source_queue": source_queue, "key": key,
        }
        d = self._json("GET", f"/v1/queues/{_queue(queue)}/messages", params=params)
        return BrowsePage([Message.from_wire(m) for m in d["messages"]], d.get("next_cursor"))

    def get_message(self, message_id: str) -> Message:
        """One message wherever it is (queue, DLQ, completed record)."""
        return Message.from_wire(self._json("GET", f"/v1/messages/{_id(message_id)}"))

    def delete_message(self, message_id: str) -> None:
        """Deletes one message (a retry that finds it gone is a success)."""
        try:
            self._t.request("DELETE", f"/v1/messages/{_id(message_id)}", idempotent=True)
        except ApiError as e:
            if e.code is not ErrorCode.MESSAGE_NOT_FOUND:
                raise

    def stats(self, queue: str) -> Stats:
        """Backlog, in flight, DLQ depth, totals, rates and trend of a queue."""
        return Stats.from_wire(self._json("GET", f"/v1/queues/{_queue(queue)}/stats"))

    def keys(
        self,
        queue: str,
        *,
        order: str = "backlog",
        limit: int = 100,
        cursor: Optional[str] = None,
    ) -> KeysPage:
        """One page of a queue's keys with messages waiting or in flight: each one's backlog,
        in flight, oldest visible age, deliveries in the last minute, weight, limit and (on a
        queue that governs keys one by one) own rate and breaker. ``order`` is ``backlog``
        (most waiting first), ``in_flight``, ``oldest`` or ``breaker`` (open breakers first)."""
        params = {"order": order, "limit": limit, "cursor": cursor}
        return KeysPage.from_wire(
            self._json("GET", f"/v1/queues/{_queue(queue)}/keys", params=params)
        )

    def overview(self, prefix: Optional[str] = None) -> List[QueueOverview]:
        """Every queue the key may see (whose name starts with ``prefix``, if given), by name,
        with its stats, rates and trends: one call per 1000 queues for a dashboard instead of
        one per queue. Follows the pages to the end, as :meth:`list_queues` does."""
        rows: List[QueueOverview] = []
        cursor: Optional[str] = None
        while True:
            d = self._json("GET", "/v1/stats", params={"prefix": prefix or None, "cursor": cursor})
            rows.extend(QueueOverview.from_wire(q) for q in d["queues"])
            following = d.get("next_cursor")
            if following is None:
                return rows
            if following == cursor:
                raise DecodeError(
                    f"the broker answered the same next_cursor ({cursor}) twice while reading the overview"
                )
            cursor = following

    def whoami(self) -> WhoAmI:
        """The key this client uses: its name, role, queue patterns and what it may do."""
        return WhoAmI.from_wire(self._json("GET", "/v1/whoami"))

    def summary(
        self,
        queue: str,
        *,
        group_by: str = "error",
        limit: int = 100,
        error_contains: Optional[str] = None,
        attributes: Optional[Mapping[str, str]] = None,
        dead_lettered_before: Optional[str] = None,
        dead_lettered_after: Optional[str] = None,
        error_is: Optional[str] = None,
        reason: Optional[str] = None,
        source_queue: Optional[str] = None,
        key: Optional[str] = None,
    ) -> Summary:
        """Every message of a queue (typically a DLQ) counted by ``group_by``: ``error``,
        ``reason``, ``source``, ``key`` or ``attribute:NAME``, with the browse's filters (every
        attribute given must match; ``error_is``, ``reason``, ``source_queue`` and ``key``
        select one group exactly); the largest ``limit`` groups (at most 1000) come back."""
        params = {
            "group_by": group_by, "limit": limit, "error_contains": error_contains,
            "attribute": [f"{k}={v}" for k, v in (attributes or {}).items()] or None,
            "dead_lettered_before": dead_lettered_before,
            "dead_lettered_after": dead_lettered_after,
            "error_is": error_is, "reason": reason, "source_queue": source_queue, "key": key,
        }
        return Summary.from_wire(self._json("GET", f"/v1/queues/{_queue(queue)}/summary", params=params))

    def stats_history(self, queue: str, since: Optional[str] = None) -> History:
        """A queue's numbers every 10 s (the last hour, or since an RFC 3339 time)."""
        return History.from_wire(
            self._json("GET", f"/v1/queues/{_queue(queue)}/stats/history", params={"since": since})
        )

    # -- tasks -----------------------------------------------------------------------------

    def enqueue(
        self,
        queue: str,
        task: str,
        args: Optional[Sequence[Any]] = None,
        kwargs: Optional[Mapping[str, Any]] = None,
        *,
        delay: Optional[float] = None,
        dedup_id: Optional[str] = None,
        attributes: Optional[Mapping[str, str]] = None,
        idempotency_key: Optional[str] = None,
        group: Optional[str] = None,
        key: Optional[str] = None,
        priority: Optional[int] = None,
    ) -> str:
        """Enqueues task ``task`` with ``args`` and ``kwargs`` and returns the task id.
        Arguments JSON cannot hold (a NaN, an object, a set) are refused with
        :class:`InvalidInput` before anything is sent. Tasks of one ``group`` run in
        enqueue order (see FIFO message groups); ``key`` names the tenant the task is for
        (one tenant's backlog does not hold back another's) and ``priority`` (0 – 9, 9 most
        urgent) runs it before lower ones."""
        msg = task_message(task, args, kwargs, attributes, delay, dedup_id, group, key, priority)
        body = dumps(msg, f"the arguments of task {task!r}")
        headers, safe = self._send_headers(idempotency_key, dedup_id is not None)
        d = self._json(
            "POST", f"/v1/queues/{_queue(queue)}/messages", idempotent=safe,
            content=body, content_type="application/json", headers=headers,
        )
        return str(d["id"])

    def enqueue_many(
        self,
        queue: str,
        tasks: Iterable[Union["TaskSpec", Tuple[Any, ...]]],
        *,
        idempotency_key: Optional[str] = None,
    ) -> List[str]:
        """Enqueues many tasks, in order, with as few requests as the broker allows, and
        returns their ids. Each item is a :class:`TaskSpec` or a tuple ``(task, args)`` /
        ``(task, args, kwargs)``.

        Every item is checked before anything is sent (:class:`InvalidInput` naming the
        item). The tasks go in batches of up to 1,000 (and 8 MiB), each stored all or
        nothing; if one fails after others were stored, :class:`PartialEnqueue` carries the
        ids enqueued so far. With ``idempotency_key`` each batch gets a key derived from it,
        so calling again with the same key after any failure enqueues each task once."""
        bodies: List[bytes] = []
        dedup = True
        for i, item in enumerate(tasks):
            spec = item if isinstance(item, TaskSpec) else spec_of(item, i)
            msg = task_message(
                spec.task, spec.args, spec.kwargs, spec.attributes, spec.delay, spec.dedup_id,
                spec.group, spec.key, spec.priority,
            )
            bodies.append(dumps(msg, f"task #{i} ({spec.task!r})"))
            dedup = dedup and spec.dedup_id is not None
        ids: List[str] = []
        path = f"/v1/queues/{_queue(queue)}/messages"
        for n, chunk in enumerate(chunks(bodies)):
            key = f"{idempotency_key}.{n}" if idempotency_key else None
            headers, safe = self._send_headers(key, dedup)
            try:
                d = self._json(
                    "POST", path, idempotent=safe, headers=headers,
                    content=b'{"messages":[' + b",".join(chunk) + b"]}",
                    content_type="application/json",
                )
            except SluiceError as e:
                if ids:
                    raise PartialEnqueue(ids, len(bodies), e) from e
                raise
            ids.extend(str(x) for x in d["ids"])
        return ids
    def task_status(self, task_id: str, wait: Optional[float] = None) -> TaskInfo:
        """The status of a task; with ``wait`` (seconds, at most 30) the broker holds the
        answer until the task is final or the wait is over."""
        params = {"wait_ms": _ms(min(wait, MAX_WAIT), "wait")} if wait else None
        return TaskInfo.from_wire(
            self._json("GET", f"/v1/tasks/{_id(task_id)}", params=params, extra_timeout=wait or 0.0)
        )

    def wait_for(self, task_id: str, timeout: float) -> TaskInfo:
        """Waits until the task is final (or ``UNKNOWN``), long-polling in rounds of at most
        30 s; :class:`TaskTimeout` when it is not final after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            info = self.task_status(task_id, wait=min(left, MAX_WAIT) or None)
            if info.status.is_final or info.status is TaskStatus.UNKNOWN:
                return info
            if time.monotonic() >= deadline:
                raise TaskTimeout(task_id, timeout, info.status.value)
            if left == 0:
                time.sleep(0.01)

    def call(
        self,
        queue: str,
        task: str,
        args: Optional[Sequence[Any]] = None,
        kwargs: Optional[Mapping[str, Any]] = None,
        *,
        timeout: float = 30.0,
    ) -> Any:
        """Request/reply on top of the queue: enqueues the task, waits up to ``timeout``
        seconds and returns its result. :class:`TaskFailed` when it ended ``FAILURE``,
        ``CANCELLED`` or ``UNKNOWN``; :class:`TaskTimeout` when it is not final in time (it
        is not cancelled)."""
        task_id = self.enqueue(queue, task, args, kwargs)
        info = self.wait_for(task_id, timeout)
        if info.status is not TaskStatus.SUCCESS:
            raise TaskFailed(task_id, info.status.value, info.error)
        return info.result

    def cancel(self, task_id: str) -> TaskInfo:
        """Cancels a task: a waiting one is removed at once; a running one is flagged and its
        handler hears of it at its next lease extension or progress report. ``CANCELLED``
        is sticky. Answers the status after the cancel."""
        return TaskInfo.from_wire(self._json("POST", f"/v1/tasks/{_id(task_id)}/cancel"))

    def task_events(self, task_id: str) -> Iterator[TaskInfo]:
        """The task's status now and after each change of status or progress (server-sent
        events), ending after the final status."""
        path = f"/v1/tasks/{_id(task_id)}/events"
        with self._t.stream("GET", path) as resp:
            if resp.status_code >= 300:
                resp.read()
                raise api_error(resp)
            event = "message"
            data: List[str] = []
            for line in resp.iter_lines():
                if line == "":
                    if data:
                        payload = "\n".join(data)
                        if event == "error":
                            raise ApiError(503, ErrorCode.UNAVAILABLE, payload)
                        if event in ("status", "message"):
                            info = TaskInfo.from_wire(json.loads(payload))
                            yield info
                            if info.status.is_final:
                                return
                    event = "message"
                    data = []
                elif line.startswith(":"):
                    continue
                else:
                    key, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if key == "event":
                        event = value
                    elif key == "data":
                        data.append(value)

    def scaling(self, queue: str, per_worker: int) -> Scaling:
        """How many workers the queue wants when each carries ``per_worker`` waiting or
        running tasks (for KEDA-style and Ray Serve autoscalers)."""
        d = self._json("GET", f"/v1/queues/{_queue(queue)}/scaling", params={"per_worker": per_worker})
        return Scaling(int(d["desired_workers"]), int(d["backlog"]), int(d["in_flight"]))

    # -- redrives and audit ----------------------------------------------------------------

    def create_redrive(
        self,
        source: str,
        *,
        destination: Optional[str] = None,
        limit: Optional[int] = None,
        rate: Union[str, Tuple[int, float], RateLimit, None] = None,
        rate_per_second: Optional[int] = None,
        pause_if_failing: Union[RedriveGuard, int, None] = None,
        filter: Optional[RedriveFilter] = None,
        reset_receive_count: Optional[bool] = None,
        dry_run: Optional[bool] = None,
        idempotency_key: Optional[str] = None,
    ) -> Redrive:
        """Starts a server-side job moving dead letters of DLQ ``source`` back to their
        source queue (or ``destination``): at most ``limit`` of them, those matching
        ``filter``.

        ``rate`` paces it: never more than that many moves in any sliding period, spread
        evenly. Give it as text the way upstream quotas read — ``"50/min"``, ``"10/s"``,
        ``"1000/h"``, ``"1000/60s"`` (see :meth:`RateLimit.parse`) — or as a
        ``(limit, period_seconds)`` pair or a :class:`RateLimit`. ``rate_per_second`` is the
        older way to say ``(n, 1)``; give one or the other. Nonsense (``"fast"``,
        ``"0/min"``) raises :class:`InvalidInput`, a ``ValueError``, before anything is sent.

        ``pause_if_failing`` guards it: a :class:`RedriveGuard`, or just a percentage. When
        more than that share of the messages it moved fail again, the job pauses itself
        (``state == "paused"``, with ``paused_reason``); :meth:`resume_redrive` goes on.
        """
        req: Dict[str, Any] = {"source": _queue(source)}
        if rate is not None and rate_per_second is not None:
            raise InvalidInput("give either rate or rate_per_second, not both")
        if rate is not None:
            req["rate"] = _redrive_rate(rate).to_wire()
        if pause_if_failing is not None:
            guard = (
                pause_if_failing if isinstance(pause_if_failing, RedriveGuard)
                else RedriveGuard(pause_if_failing)
            )
            req["pause_if_failing"] = guard.to_wire()
        for k, v in (("destination", destination), ("limit", limit),
                     ("rate_per_second", rate_per_second),
                     ("reset_receive_count", reset_receive_count), ("dry_run", dry_run)):
            if v is not None:
                req[k] = v
        if filter is not None:
            req["filter"] = filter.to_wire()
        key = idempotency_key or uuid.uuid4().hex
        return Redrive.from_wire(
            self._json("POST", "/v1/redrives", json_body=req, headers={"idempotency-key": key})
        )

    def list_redrives(self) -> List[Redrive]:
        """Running and paused redrives and the most recent finished ones, newest first."""
        return [Redrive.from_wire(r) for r in self._json("GET", "/v1/redrives")["redrives"]]

    def get_redrive(self, redrive_id: str) -> Redrive:
        """One redrive job and its progress."""
        return Redrive.from_wire(self._json("GET", f"/v1/redrives/{_job(redrive_id)}"))

    def cancel_redrive(self, redrive_id: str) -> Redrive:
        """Stops a running or paused redrive job for good; what it moved stays moved. A
        finished job is answered as it is."""
        return Redrive.from_wire(self._json("POST", f"/v1/redrives/{_job(redrive_id)}/cancel"))

    def pause_redrive(self, redrive_id: str) -> Redrive:
        """Pauses a running redrive job until :meth:`resume_redrive`; it keeps its source
        meanwhile and ``paused_reason`` says who paused it. Pausing a paused job changes
        nothing; a finished one is a ``conflict``."""
        return Redrive.from_wire(self._json("POST", f"/v1/redrives/{_job(redrive_id)}/pause"))

    def resume_redrive(self, redrive_id: str) -> Redrive:
        """Resumes a paused redrive job, whether an operator or its guard paused it.
        Resuming a running job changes nothing; a finished one is a ``conflict``."""
        return Redrive.from_wire(self._json("POST", f"/v1/redrives/{_job(redrive_id)}/resume"))

    # -- schedules -------------------------------------------------------------------------

    def put_schedule(
        self, name: str, queue: str, body: Any, *, cron: Optional[str] = None,
        timezone: Optional[str] = None, every: Optional[float] = None,
        attributes: Optional[Mapping[str, str]] = None, catch_up: str = "none",
        paused: bool = False, key: Optional[str] = None, priority: Optional[int] = None,
    ) -> Schedule:
        """Creates schedule ``name`` or replaces it: ``body`` is enqueued into ``queue`` on
        ``cron`` (5 fields, read in ``timezone``, default UTC) or ``every`` seconds (at least
        1). ``catch_up`` is ``none``, ``one`` or ``all``: what happens to firings missed while
        no broker ran or the schedule was paused. Needs a key that may manage and send to
        the queue. The same trigger keeps its progress; a new one starts counting now.
        ``key`` and ``priority`` (0 – 9) are those of every message it enqueues."""
        if (cron is None) == (every is None):
            raise InvalidInput("give either cron or every")
        req: Dict[str, Any] = {"queue": _queue(queue), "catch_up": catch_up, "paused": paused}
        req.update(OutMessage(body).to_wire())
        if cron is not None:
            req["cron"] = cron
            if timezone is not None:
                req["timezone"] = timezone
        else:
            req["every_ms"] = _ms(every, "every")
        if attributes:
            req["attributes"] = dict(attributes)
        if key is not None:
            req["key"] = key
        if priority is not None:
            req["priority"] = priority
        return Schedule.from_wire(self._json("PUT", f"/v1/schedules/{_schedule(name)}", json_body=req))

    def list_schedules(self) -> List[Schedule]:
        """Every schedule whose queue the key sees, by name."""
        return [Schedule.from_wire(d) for d in self._json("GET", "/v1/schedules")["schedules"]]

    def get_schedule(self, name: str) -> Schedule:
        """One schedule, its progress and its next five firings."""
        return Schedule.from_wire(self._json("GET", f"/v1/schedules/{_schedule(name)}"))

    def delete_schedule(self, name: str) -> None:
        """Deletes a schedule; the messages it enqueued stay."""
        self._t.request("DELETE", f"/v1/schedules/{_schedule(name)}", idempotent=True)

    def pause_schedule(self, name: str) -> Schedule:
        """Stops a schedule firing until :meth:`resume_schedule`."""
        return Schedule.from_wire(self._json("POST", f"/v1/schedules/{_schedule(name)}/pause"))

    def resume_schedule(self, name: str) -> Schedule:
        """Resumes a paused schedule; what it missed is handled by its ``catch_up``."""
        return Schedule.from_wire(self._json("POST", f"/v1/schedules/{_schedule(name)}/resume"))

    def trigger_schedule(self, name: str) -> str:
        """Sends the schedule's message now, once, besides its firings; answers its id. Not
        retried after a lost answer (that could send it twice)."""
        d = self._json("POST", f"/v1/schedules/{_schedule(name)}/trigger", idempotent=False)
        return d["id"]

    def audit(
        self, *, queue: Optional[str] = None, since: Optional[str] = None,
        actions: Optional[Sequence[str]] = None, actor: Optional[str] = None,
        kind: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None,
    ) -> List[AuditEntry]:
        """The entries of one page of the audit log, as :meth:`audit_page` answers them,
        without the paging information."""
        return self.audit_page(
            queue=queue, since=since, actions=actions, actor=actor, kind=kind, limit=limit,
            cursor=cursor,
        ).entries

    def audit_page(
        self, *, queue: Optional[str] = None, since: Optional[str] = None,
        actions: Optional[Sequence[str]] = None, actor: Optional[str] = None,
        kind: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None,
    ) -> AuditPage:
        """One page of the audit log: the newest ``limit`` entries (default 100, at most
        10,000) that match every condition given, oldest first: of one ``queue`` and its DLQ,
        at or after ``since`` (RFC 3339), of any of ``actions`` (``queue.purge``, …), by
        ``actor`` (an API key's name, ``sluice`` for the broker), of ``kind`` (``operator``:
        actions taken by a key or a person; ``message``: dead letters and expiries;
        ``broker``: the broker's other records). When older entries exist the page has
        ``more`` and ``next_cursor``; pass that as ``cursor`` for the page before. Each entry
        comes once across the pages, even when entries share a millisecond."""
        params = {
            "queue": None if queue is None else _queue(queue), "since": since,
            "action": ",".join(actions) if actions else None, "actor": actor, "kind": kind,
            "limit": limit, "cursor": cursor,
        }
        return AuditPage.from_wire(self._json("GET", "/v1/audit", params=params))

    # -- health ----------------------------------------------------------------------------

    def healthz(self) -> bool:
        """True while the broker process answers."""
        return self._json("GET", "/healthz").get("status") == "ok"

    def readyz(self) -> bool:
        """True when the broker's store answers; ``unavailable`` (503) otherwise."""
        return self._json("GET", "/readyz").get("status") == "ready"

    def metrics_text(self) -> str:
        """The broker's Prometheus metrics, as text."""
        return self._t.request("GET", "/metrics", idempotent=True).text

    def openapi(self) -> Dict[str, Any]:
        """The OpenAPI document of the API."""
        return dict(self._json("GET", "/openapi.json"))
