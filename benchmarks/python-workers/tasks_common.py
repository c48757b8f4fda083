"""What every system's worker does with a task, so that only the queue differs: record when
it finished, fail once when asked to, sleep when asked to."""

import os
import time

_FD = None


def record(i: int) -> None:
    """Appends ``<task> <finish time>`` to the run's completion file (one write, O_APPEND)."""
    global _FD
    if _FD is None:
        _FD = os.open(os.environ["BENCH_DONE_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_FD, f"{i} {time.time():.6f}\n".encode())


def work(i: int, sleep_ms: int, fail_first: bool, first_attempt: bool) -> int:
    """The task: raises on its first attempt when ``fail_first``, else sleeps and records."""
    if fail_first and first_attempt:
        raise RuntimeError(f"task {i} fails its first attempt")
    if sleep_ms:
        time.sleep(sleep_ms / 1000)
    record(i)
    return i
