"""The Sluice side: the Python SDK's worker. Started by compare.py."""

import os
import sys

import sluice
from tasks_common import work

client = sluice.Client(os.environ["BENCH_SLUICE_URL"])
worker = sluice.Worker(client, "bench", concurrency=int(sys.argv[1]), poll_wait=1.0)


@worker.task("work")
def sluice_work(i: int, sleep_ms: int, fail_first: bool) -> int:
    return work(i, sleep_ms, fail_first, sluice.current_task().attempt == 1)


worker.run()
