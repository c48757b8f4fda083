"""The Python side of "a Rust producer, a Python worker": runs a worker on QUEUE until
COUNT tasks have ended (success or failure), then stops gracefully.

    python python_worker.py URL QUEUE COUNT
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Dict, List

import sluice


def main(url: str, queue: str, count: int) -> int:
    logging.basicConfig(level=logging.WARNING)
    client = sluice.Client(url)
    worker = sluice.Worker(client, queue, concurrency=4, poll_wait=0.2, max_backoff=0.2)
    dead: List[str] = []

    @worker.task
    def add(a: int, b: int) -> int:
        return a + b

    @worker.task
    def resize(url: str, width: int) -> Dict[str, Any]:
        if width <= 0:
            raise sluice.Permanent(f"width must be positive, got {width}")
        return {"url": url, "width": width, "by": "python"}

    @worker.task
    def shout(text: str) -> str:
        return text.upper() + "!"

    @worker.task
    def ping() -> str:
        return "pong"

    @worker.on_dead_letter
    def hook(task_id: str, error: str) -> None:
        dead.append(task_id)

    worker.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        snap = worker.metrics.snapshot()
        finished = snap.count(sluice.Outcome.SUCCESS) + snap.count(sluice.Outcome.FAILURE)
        if finished >= count:
            break
        time.sleep(0.05)
    worker.stop()
    snap = worker.metrics.snapshot()
    print(f"python worker: success={snap.count(sluice.Outcome.SUCCESS)} "
          f"failure={snap.count(sluice.Outcome.FAILURE)} dead_letter_hooks={len(dead)}")
    return 0 if snap.count(sluice.Outcome.SUCCESS) + snap.count(sluice.Outcome.FAILURE) >= count else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
