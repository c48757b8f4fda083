"""What each key (tenant, customer, account) of a queue holds: :meth:`Client.keys`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional

from .models import RateLimit


@dataclass(frozen=True)
class KeyFlow:
    """A key's own adaptive rate and breaker, on a queue whose ``adaptive`` or ``breaker`` has
    ``"scope": "key"``. ``rate_per_min`` is the key's governed rate (with a per-key adaptive
    rate), ``hold_until`` when its dependency's Retry-After ends, ``breaker`` its breaker
    (``closed``, ``open`` or ``half_open``, with a per-key breaker), ``forced`` whether an
    operator forced it open. Times are RFC 3339 strings."""

    rate_per_min: Optional[int] = None
    hold_until: Optional[str] = None
    breaker: Optional[str] = None
    breaker_since: Optional[str] = None
    forced: bool = False

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "KeyFlow":
        return cls(
            rate_per_min=d.get("rate_per_min"),
            hold_until=d.get("hold_until"),
            breaker=d.get("breaker"),
            breaker_since=d.get("breaker_since"),
            forced=bool(d.get("forced", False)),
        )


@dataclass(frozen=True)
class KeyInfo:
    """One key of a queue with messages waiting or in flight. ``key`` is ``None`` for the
    messages sent without one, which share one implicit key. ``oldest_visible_age`` is in
    seconds (0 when nothing is visible); ``delivered_1m`` estimates the key's deliveries in
    the last minute (``None`` where the broker does not count them); ``weight``,
    ``max_in_flight`` and ``rate_limit`` are what the queue's ``key_weights`` and
    ``key_limits`` give it; ``flow`` is its own adaptive rate and breaker (``None`` unless the
    queue governs keys one by one)."""

    key: Optional[str]
    backlog: int
    visible: int
    delayed: int
    in_flight: int
    oldest_visible_age: float
    delivered_1m: Optional[int]
    weight: int
    max_in_flight: Optional[int]
    rate_limit: Optional[RateLimit] = None
    flow: Optional[KeyFlow] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "KeyInfo":
        return cls(
            key=d.get("key"),
            backlog=d["backlog"],
            visible=d["visible"],
            delayed=d["delayed"],
            in_flight=d["in_flight"],
            oldest_visible_age=d.get("oldest_visible_age_ms", 0) / 1000.0,
            delivered_1m=d.get("delivered_1m"),
            weight=d.get("weight", 1),
            max_in_flight=d.get("max_in_flight"),
            rate_limit=RateLimit.from_wire(d["rate_limit"]) if d.get("rate_limit") else None,
            flow=KeyFlow.from_wire(d["flow"]) if d.get("flow") else None,
        )


@dataclass(frozen=True)
class KeysPage:
    """One page of :meth:`Client.keys`; pass ``next_cursor`` for the next (``None`` at the
    end). ``active_keys`` counts the queue's named keys with messages waiting or in flight."""

    keys: List[KeyInfo]
    next_cursor: Optional[str]
    active_keys: int

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "KeysPage":
        return cls(
            [KeyInfo.from_wire(k) for k in d["keys"]],
            d.get("next_cursor"),
            d.get("active_keys", 0),
        )
