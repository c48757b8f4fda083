"""The Celery side: Redis as broker and result backend, late acks, a thread pool. Started by
compare.py as ``celery -A celery_app worker``."""

import os

from celery import Celery

from tasks_common import work

app = Celery("bench", broker=os.environ["BENCH_REDIS_URL"], backend=os.environ["BENCH_REDIS_URL"])
app.conf.update(
    task_acks_late=True,  # ack after the task ran, as Sluice does
    task_reject_on_worker_lost=True,  # a killed worker's tasks run again
    worker_prefetch_multiplier=4,  # Celery's default
    task_default_queue="bench",
    broker_connection_retry_on_startup=True,
    result_expires=3600,
    # Unacked tasks of a lost connection come back after 10 s (Redis transport default: 1 h),
    # as Sluice's queue here redelivers after a 10 s lease.
    broker_transport_options={"visibility_timeout": 10},
)


@app.task(bind=True, name="work", autoretry_for=(RuntimeError,), max_retries=3, default_retry_delay=0)
def celery_work(self, i: int, sleep_ms: int, fail_first: bool) -> int:
    return work(i, sleep_ms, fail_first, self.request.retries == 0)
