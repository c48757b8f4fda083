"""Ray Serve on Sluice: a task-processor adapter for ``@task_consumer`` deployments and an
autoscaling policy on queue depth. Needs ``ray[serve]`` (the ``ray`` extra).

::

    from ray.serve.schema import TaskProcessorConfig
    from sluice.ray import SluiceAdapter, SluiceConfig

    config = TaskProcessorConfig(
        queue_name="inference",
        adapter=SluiceAdapter,
        adapter_config=SluiceConfig(url="http://127.0.0.1:7878"),
        max_retries=3,
        failed_task_queue_name="inference.failed",
        unprocessable_task_queue_name="inference.unprocessable",
    )
"""

from .adapter import SluiceAdapter
from .autoscaling import SluiceQueueAutoscalingPolicy, queue_depth_autoscaling_policy
from .config import SluiceConfig

__all__ = [
    "SluiceAdapter",
    "SluiceConfig",
    "SluiceQueueAutoscalingPolicy",
    "queue_depth_autoscaling_policy",
]
