"""The settings of :class:`sluice.ray.SluiceAdapter`, given as
``TaskProcessorConfig(adapter_config=SluiceConfig(...))``."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

__all__ = ["SluiceConfig"]


@dataclass(frozen=True)
class SluiceConfig:
    """How the adapter reaches the broker and how it sets up the queue.

    The retry budget, the failed-task queue and the unprocessable queue come from
    ``TaskProcessorConfig`` itself (``max_retries``, ``failed_task_queue_name``,
    ``unprocessable_task_queue_name``); these settings are Sluice's own. Durations are
    seconds; ``None`` keeps the queue's current value (or Sluice's default on creation).
    """

    url: str = "http://127.0.0.1:7878"
    """The broker's base URL."""
    token: Optional[str] = None
    """An API key with the ``consumer`` and ``producer`` roles on the queues (and
    ``operator`` to configure them), when the broker requires keys."""
    configure_queue: bool = True
    """Create or update the queue at start-up so that its attempt limit is
    ``max_retries + 1`` and its DLQ is the failed-task queue. Turn off when operators own
    the queue's configuration."""
    visibility_timeout: Optional[float] = None
    """Lease length of a task; running tasks' leases are extended every third of it."""
    backoff_base: Optional[float] = None
    """First retry delay after a failure; doubles per attempt with full jitter."""
    backoff_max: Optional[float] = None
    """Cap on the retry delay."""
    result_ttl: Optional[float] = None
    """How long results and final statuses are kept."""
    poll_wait: float = 1.0
    """Long-poll wait of each receive (0 – 30 s)."""
    shutdown_grace: float = 30.0
    """How long a stopping replica lets running tasks finish before releasing them."""
    max_result_bytes: Optional[int] = None
    """Largest result kept; larger ones are dropped with a warning (the task still succeeds)."""
    timeout: float = 30.0
    """Timeout of one call to the broker."""

    @classmethod
    def coerce(cls, value: Any) -> "SluiceConfig":
        """A ``SluiceConfig`` from itself or from a mapping of its fields (as a YAML
        deployment config gives it)."""
        if isinstance(value, SluiceConfig):
            return value
        if isinstance(value, Mapping):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ValueError(f"unknown SluiceConfig fields {unknown}; known: {sorted(known)}")
            return cls(**dict(value))
        raise TypeError(
            "TaskProcessorConfig.adapter_config must be a sluice.ray.SluiceConfig (or a dict of "
            f"its fields), got {type(value).__name__}"
        )
