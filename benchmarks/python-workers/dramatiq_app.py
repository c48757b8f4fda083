"""The Dramatiq side: its Redis broker, its Results middleware storing each result in the same
Redis (as Celery's result backend does), late acks (Dramatiq's only mode), retries at once.
Started by compare.py as ``dramatiq dramatiq_app --processes 1 --threads N``."""

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import CurrentMessage
from dramatiq.results import Results
from dramatiq.results.backends import RedisBackend

from tasks_common import work

# A worker whose heartbeats stop for 10 s has its unacked messages requeued (Dramatiq's
# default: 60 s), as Sluice's queue here redelivers after a 10 s lease and Celery after a
# 10 s visibility timeout.
broker = RedisBroker(url=os.environ["BENCH_REDIS_URL"], heartbeat_timeout=10_000)
broker.add_middleware(CurrentMessage())
broker.add_middleware(Results(backend=RedisBackend(client=broker.client)))
dramatiq.set_broker(broker)


# Retries: Dramatiq's smallest backoff (0 means its default, 15 s), so a retry waits 1 to 2 ms.
@dramatiq.actor(
    actor_name="work", queue_name="bench", max_retries=3, min_backoff=1, max_backoff=1, store_results=True
)
def dramatiq_work(i: int, sleep_ms: int, fail_first: bool) -> int:
    message = CurrentMessage.get_current_message()
    return work(i, sleep_ms, fail_first, message.options.get("retries", 0) == 0)
