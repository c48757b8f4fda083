"""End to end with a real Ray Serve: ``serve.run`` of a ``@task_consumer`` deployment
configured only through ``TaskProcessorConfig``, tasks enqueued from a separate process,
results, retries, the failed-task queue, the unprocessable queue, status, metrics, health,
cancel and autoscaling on queue depth observed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

import sluice
from sluice import TaskStatus
from conftest import Broker, wait_until

pytestmark = pytest.mark.ray

try:
    import ray
    from ray import serve
except ImportError as e:  # pragma: no cover - depends on the environment
    if os.environ.get("CI") == "true":
        raise
    pytest.skip(f"ray[serve] is not installed ({e}); install the 'ray' extra", allow_module_level=True)

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def ray_serve() -> Iterator[None]:
    # Ray's worker processes import the test app and sluice from these directories.
    paths = [str(HERE), str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


def test_adapter_loads_by_path_with_a_dict_config(broker: Broker, queue: str) -> None:
    from ray.serve.schema import TaskProcessorConfig
    from ray.serve.task_consumer import instantiate_adapter_from_config

    from sluice.ray import SluiceAdapter

    cfg = TaskProcessorConfig(
        queue_name=queue,
        adapter="sluice.ray.SluiceAdapter",
        adapter_config={"url": broker.url, "backoff_base": 0.5},
        max_retries=None,
    )
    adapter = instantiate_adapter_from_config(cfg)
    assert isinstance(adapter, SluiceAdapter)
    q = broker.client().get_queue(queue)
    assert q.config.max_receive_count == 0 and q.config.dead_letter_queue is None
    assert q.config.backoff_base == 0.5
    with pytest.raises(TypeError):
        adapter.enqueue_task_sync("t", args=[1], countdown=5)
    with pytest.raises(RuntimeError):
        instantiate_adapter_from_config(
            TaskProcessorConfig(queue_name=queue, adapter=SluiceAdapter, adapter_config={"urll": "x"})
        )
    [health] = adapter.health_check_sync()
    assert list(health.values()) == [{"error": "consumer not running"}]


def test_autoscaling_policy_follows_the_queue(broker: Broker, queue: str) -> None:
    from sluice.ray import SluiceQueueAutoscalingPolicy, queue_depth_autoscaling_policy

    client = broker.client()
    client.put_queue(queue)
    policy = SluiceQueueAutoscalingPolicy(broker.url, queue, tasks_per_replica=5, poll_interval_s=0.05)

    class Ctx:
        current_num_replicas = 1
        total_num_requests = 0

    assert policy(Ctx())[0] == 1, "nothing known yet: keep what runs"
    client.send_batch(queue, list(range(23)))
    client.receive(queue, max=3)
    # The policy polls in the background: wait for a poll after the receive, since one between
    # the send and the receive already sees 23 messages (and wants the same 5 replicas).
    wait_until(
        lambda: policy(Ctx())[1]["sluice_in_flight"] == 3,
        what="a poll after the receive",
    )
    desired, state = policy(Ctx())
    assert state["sluice_backlog"] == 20 and state["sluice_in_flight"] == 3
    assert desired == 5, "ceil(23 / 5) replicas"
    client.purge_queue(queue)
    wait_until(lambda: policy(Ctx())[0] == 0, what="an idle queue wants none")
    down = SluiceQueueAutoscalingPolicy("http://127.0.0.1:9", queue, poll_interval_s=0.05)
    down(Ctx())
    wait_until(lambda: "sluice_error" in down(Ctx())[1], what="the error in the policy state")
    assert down(Ctx())[0] == 1, "an unreachable broker changes nothing"
    p = queue_depth_autoscaling_policy(broker.url, queue, 4)
    assert p.policy_kwargs["tasks_per_replica"] == 4


def test_task_consumer_on_sluice(ray_serve: None, broker: Broker, queue: str) -> None:
    sys.path.insert(0, str(HERE))
    import ray_app

    client = broker.client()
    started = time.monotonic()
    handle = serve.run(ray_app.build_app(broker.url, queue), name="inference", route_prefix=None)
    print(f"serve.run took {time.monotonic() - started:.1f}s")

    # The adapter configured the queue from TaskProcessorConfig (max_retries=2 -> 3 attempts).
    cfg = client.get_queue(queue).config
    assert cfg.max_receive_count == 3 and cfg.dead_letter_queue == f"{queue}.failed"

    out = subprocess.run(
        [sys.executable, str(HERE / "ray_app.py"), broker.url, queue],
        capture_output=True, text=True, timeout=120, env=os.environ.copy(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    ids: Dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert "cannot be sent as JSON" in ids["refused"], "non-serializable arguments fail at enqueue"

    results = [client.wait_for(i, timeout=60) for i in ids["predict"]]
    assert [r.result["label"] for r in results] == [f"text-{i}"[::-1] for i in range(4)]
    assert client.wait_for(ids["predict_kw"], timeout=30).result["label"] == "ABC"
    assert client.wait_for(ids["apredict"], timeout=30).result == 144

    flaky = client.wait_for(ids["flaky"], timeout=30)
    assert flaky.status is TaskStatus.SUCCESS and flaky.receive_count == 2
    assert flaky.result == {"key": "k1", "attempt": 2}

    broken = client.wait_for(ids["broken"], timeout=30)
    assert broken.status is TaskStatus.FAILURE and "corrupt weights for k2" in (broken.error or "")
    dead = client.get_message(ids["broken"])
    assert dead.queue == f"{queue}.failed" and len(dead.attempts) == 3, "max_retries=2: three attempts"
    assert dead.body == {"task": "broken", "args": ["k2"], "kwargs": {}}

    unp = f"{queue}.unprocessable"
    wait_until(lambda: client.stats(unp).visible == 3, timeout=30, what="three unprocessable messages")
    assert client.get_message(ids["raw"]).body == b"\x00\x9f not an envelope"
    assert "unknown task 'no_such_task'" in (client.get_message(ids["unknown"]).last_error or "")
    assert "do not fit" in (client.get_message(ids["misfit"]).last_error or "")

    # The adapter's status, metrics and health, from a producer-side adapter and a replica.
    from ray.serve.task_consumer import instantiate_adapter_from_config

    adapter = instantiate_adapter_from_config(ray_app.processor_config(broker.url, queue))
    st = adapter.get_task_status_sync(ids["flaky"])
    assert st.status == "SUCCESS" and st.result == {"key": "k1", "attempt": 2}
    assert adapter.get_task_status_sync(ids["broken"]).status == "FAILURE"
    m = handle.metrics.remote().result(timeout_s=30)
    assert m["dlq_depth"] == 1 and m["unprocessable_depth"] == 3
    assert m["completed"]["success"] >= 7 and m["completed"]["failure"] == 1
    assert m["completed"]["retry"] >= 3 and m["processing_time"]["count"] >= 10
    [health] = handle.health.remote().result(timeout_s=30)
    assert list(health.values())[0]["ok"] == "pong"

    # Cancel a running task, then autoscale on a backlog of slow ones: the policy reads the
    # broker's scaling route (4 tasks per replica) and Ray adds the second replica.
    running = adapter.enqueue_task_sync("slow", args=[30]).id
    wait_until(lambda: client.task_status(running).status is TaskStatus.STARTED, timeout=30, what="running")
    adapter.cancel_task_sync(running)
    assert client.wait_for(running, timeout=30).status is TaskStatus.CANCELLED
    backlog = [adapter.enqueue_task_sync("slow", args=[3]).id for _ in range(12)]

    def replicas() -> int:
        app = serve.status().applications["inference"]
        return sum(d.replica_states.get("RUNNING", 0) for d in app.deployments.values())

    wait_until(lambda: replicas() == 2, timeout=90, every=0.5, what="a second replica")
    done = [client.wait_for(i, timeout=90) for i in backlog]
    assert all(d.status is TaskStatus.SUCCESS for d in done)
    print(f"ray end-to-end took {time.monotonic() - started:.1f}s")
