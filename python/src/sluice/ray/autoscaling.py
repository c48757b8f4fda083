"""Ray Serve autoscaling on queue depth: replicas follow the broker's answer to "how many
workers does this queue want?" (``GET /v1/queues/{q}/scaling?per_worker=N``, which is
``ceil((backlog + in_flight) / N)``).

Why from the broker: a task consumer's load is the queue, not HTTP requests, so Ray's
default policy (ongoing requests per replica) sees nothing. Counting tasks in flight as
well as waiting ones keeps replicas that are busy from being scaled away mid-task.

The policy never blocks Ray's controller: each poll is a short-lived background thread
started when the poll interval has passed; between polls (and while the broker cannot be
reached) the last answer stands. Ray applies ``min_replicas``/``max_replicas`` and the
up/downscale delays of the deployment's ``autoscaling_config`` to what it returns.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Dict, Optional, Tuple

from ..client import Client
from ..errors import SluiceError
from ..models import Scaling

__all__ = ["SluiceQueueAutoscalingPolicy", "queue_depth_autoscaling_policy"]

log = logging.getLogger("sluice.ray")


class SluiceQueueAutoscalingPolicy:
    """A class policy for ``AutoscalingPolicy(policy_function=..., policy_kwargs=...)``;
    Ray creates it once with the kwargs and calls it with an ``AutoscalingContext`` on every
    autoscaling tick.

    :param url: the broker's base URL.
    :param queue_name: the queue the deployment consumes.
    :param tasks_per_replica: how many waiting or running tasks one replica should carry
        (usually its ``max_ongoing_requests``).
    :param poll_interval_s: how often the broker is asked.
    :param token: an API key, when the broker requires keys.
    """

    def __init__(
        self,
        url: str,
        queue_name: str,
        tasks_per_replica: int = 10,
        poll_interval_s: float = 2.0,
        token: Optional[str] = None,
    ) -> None:
        if tasks_per_replica < 1:
            raise ValueError(f"tasks_per_replica must be at least 1, got {tasks_per_replica}")
        self.url = url
        self.queue_name = queue_name
        self.tasks_per_replica = int(tasks_per_replica)
        self.poll_interval_s = poll_interval_s
        self._token = token
        self._client: Optional[Client] = None
        self._lock = threading.Lock()
        self._last: Optional[Scaling] = None
        self._last_error: Optional[str] = None
        self._last_poll = float("-inf")
        self._polling = False

    def poll(self) -> Optional[Scaling]:
        """Asks the broker now (blocking); keeps and returns the answer, or ``None`` when the
        broker could not answer."""
        if self._client is None:
            self._client = Client(self.url, token=self._token, timeout=5.0, connect_timeout=2.0)
        try:
            s = self._client.scaling(self.queue_name, self.tasks_per_replica)
        except SluiceError as e:
            with self._lock:
                self._last_error = str(e)
            log.warning("queue-depth autoscaling: asking the broker failed: %s", e)
            return None
        with self._lock:
            self._last = s
            self._last_error = None
        return s

    def _poll_in_background(self) -> None:
        try:
            self.poll()
        finally:
            with self._lock:
                self._polling = False

    def __call__(self, ctx: Any) -> Tuple[int, Dict[str, Any]]:
        now = time.monotonic()
        with self._lock:
            start = not self._polling and now - self._last_poll >= self.poll_interval_s
            if start:
                self._polling = True
                self._last_poll = now
            last, error = self._last, self._last_error
        if start:
            threading.Thread(target=self._poll_in_background, name="sluice-autoscaling", daemon=True).start()
        current = int(getattr(ctx, "current_num_replicas", 0) or 0)
        if last is None:
            # Nothing known yet: keep what runs (at least one, so queued tasks get served).
            desired = max(current, 1)
        else:
            desired = last.desired_workers
            # HTTP calls into the deployment count too, if it also serves requests.
            requests = float(getattr(ctx, "total_num_requests", 0) or 0)
            desired = max(desired, math.ceil(requests / self.tasks_per_replica))
        state: Dict[str, Any] = {
            "sluice_backlog": last.backlog if last else None,
            "sluice_in_flight": last.in_flight if last else None,
            "sluice_desired": desired,
        }
        if error:
            state["sluice_error"] = error
        return desired, state


def queue_depth_autoscaling_policy(
    url: str,
    queue_name: str,
    tasks_per_replica: int = 10,
    poll_interval_s: float = 2.0,
    token: Optional[str] = None,
) -> Any:
    """The ``ray.serve.config.AutoscalingPolicy`` for ``autoscaling_config.policy`` that
    scales a task consumer on its queue's depth.

    ::

        @serve.deployment(
            max_ongoing_requests=8,
            autoscaling_config=AutoscalingConfig(
                min_replicas=1, max_replicas=10,
                policy=queue_depth_autoscaling_policy("http://sluice:7878", "inference", 8),
            ),
        )
        @task_consumer(task_processor_config=config)
        class Consumer: ...
    """
    from ray.serve.config import AutoscalingPolicy

    kwargs: Dict[str, Any] = {
        "url": url,
        "queue_name": queue_name,
        "tasks_per_replica": tasks_per_replica,
        "poll_interval_s": poll_interval_s,
    }
    if token is not None:
        kwargs["token"] = token
    return AutoscalingPolicy(policy_function=SluiceQueueAutoscalingPolicy, policy_kwargs=kwargs)
