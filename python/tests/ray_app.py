"""The Ray Serve application of the end-to-end test: a ``@task_consumer`` deployment whose
broker is chosen only by its ``TaskProcessorConfig`` (adapter + adapter_config), and the
producer side, run as a separate process: ``python ray_app.py URL QUEUE``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, Dict

from ray import serve
from ray.serve.config import AutoscalingConfig
from ray.serve.schema import TaskProcessorConfig
from ray.serve.task_consumer import instantiate_adapter_from_config, task_consumer, task_handler

import sluice
from sluice.ray import SluiceAdapter, SluiceConfig, queue_depth_autoscaling_policy


def processor_config(url: str, queue: str) -> TaskProcessorConfig:
    """The one place the deployment names its broker: swap this for Celery's and back."""
    return TaskProcessorConfig(
        queue_name=queue,
        adapter=SluiceAdapter,
        adapter_config=SluiceConfig(url=url, backoff_base=0.05, backoff_max=0.2, poll_wait=0.5),
        max_retries=2,
        failed_task_queue_name=f"{queue}.failed",
        unprocessable_task_queue_name=f"{queue}.unprocessable",
    )


def build_app(url: str, queue: str) -> Any:
    @serve.deployment(
        max_ongoing_requests=4,
        ray_actor_options={"num_cpus": 0},
        autoscaling_config=AutoscalingConfig(
            min_replicas=1,
            max_replicas=2,
            upscale_delay_s=0.5,
            downscale_delay_s=600,
            policy=queue_depth_autoscaling_policy(url, queue, tasks_per_replica=4, poll_interval_s=0.5),
        ),
        health_check_period_s=2,
    )
    @task_consumer(task_processor_config=processor_config(url, queue))
    class Inference:
        def __init__(self) -> None:
            self.pid = os.getpid()

        @task_handler(name="predict")
        def predict(self, text: str, upper: bool = False) -> Dict[str, Any]:
            return {"label": text.upper() if upper else text[::-1], "pid": self.pid}

        @task_handler(name="apredict")
        async def apredict(self, n: int) -> int:
            await asyncio.sleep(0.01)
            return n * n

        @task_handler(name="flaky")
        def flaky(self, key: str) -> Dict[str, Any]:
            attempt = sluice.current_task().attempt
            if attempt < 2:
                raise ConnectionError(f"model server warming up ({key})")
            return {"key": key, "attempt": attempt}

        @task_handler(name="broken")
        def broken(self, key: str) -> None:
            raise RuntimeError(f"corrupt weights for {key}")

        @task_handler(name="slow")
        def slow(self, seconds: float) -> float:
            ctx = sluice.current_task()
            ctx.wait_cancelled(seconds)
            return seconds

        def metrics(self) -> Dict[str, Any]:
            return self._adapter.get_metrics_sync()

        def health(self) -> Any:
            return self._adapter.health_check_sync()

    return Inference.bind()


def produce(url: str, queue: str) -> Dict[str, Any]:
    """What a separate producer process does: load the adapter from the same config, the
    way Ray documents it, and enqueue."""
    adapter = instantiate_adapter_from_config(processor_config(url, queue))
    ids: Dict[str, Any] = {
        "predict": [adapter.enqueue_task_sync("predict", args=[f"text-{i}"]).id for i in range(4)],
        "predict_kw": adapter.enqueue_task_sync("predict", kwargs={"text": "abc", "upper": True}).id,
        "apredict": adapter.enqueue_task_sync("apredict", args=[12]).id,
        "flaky": adapter.enqueue_task_sync("flaky", args=["k1"]).id,
        "broken": adapter.enqueue_task_sync("broken", args=["k2"]).id,
        "unknown": adapter.enqueue_task_sync("no_such_task", args=[1]).id,
        "misfit": adapter.enqueue_task_sync("predict", args=[1, 2, 3]).id,
    }
    client = sluice.Client(url)
    ids["raw"] = client.send_raw(queue, b"\x00\x9f not an envelope").id
    try:
        adapter.enqueue_task_sync("predict", args=[float("nan")])
    except sluice.InvalidInput as e:
        ids["refused"] = str(e)
    return ids


if __name__ == "__main__":
    print(json.dumps(produce(sys.argv[1], sys.argv[2])))
