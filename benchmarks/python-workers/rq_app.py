"""The RQ side: the task RQ's workers import by name (``rq_app.rq_work``). RQ keeps each job
and its result in Redis; compare.py enqueues with ``Retry(max=1)`` (retried at once) and runs
``rq worker-pool``, whose workers fork a work horse per job."""

from rq import get_current_job

from tasks_common import work

RETRIES = 1  # Retry(max=RETRIES) on every job


def rq_work(i: int, sleep_ms: int, fail_first: bool) -> int:
    return work(i, sleep_ms, fail_first, get_current_job().retries_left == RETRIES)
