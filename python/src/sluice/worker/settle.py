"""Acks in batches: the acks of tasks that finish while one batch is on the wire go to the
broker together in the next (``{"acks": [...]}``), as the Rust worker sends them. A worker
of trivial tasks would otherwise spend one round trip per task on its acks; batched, it
spends one per batch.

A batch is retried without a limit while the broker is unreachable (see the worker's rules
on settlements); each of its acks then has its own outcome, handed to the callback its
handler's thread left. The thread does not wait for it: it takes its next task while the ack
travels, and a worker killed meanwhile leaves the task leased, to run again elsewhere.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, List, Optional

from ..client import Client
from ..errors import ApiError, ErrorCode, SluiceError
from .metrics import WorkerMetrics

log = logging.getLogger("sluice.worker")

#: Most acks in one request (the broker's limit).
MAX_BATCH = 1000
#: Most result bytes in one request (the broker reads up to 24 MiB).
MAX_BATCH_BYTES = 8 * 1024 * 1024


#: What an ack's outcome is handed to: the error, if any, and whether its batch needed
#: retries (then ``receipt_stale`` may mean an earlier try went through).
Done = Callable[[Optional[SluiceError], bool], None]


class _Ack:
    __slots__ = ("receipt", "result", "size", "done", "told")

    def __init__(self, receipt: str, result: Any, size: int, done: Done) -> None:
        self.receipt = receipt
        self.result = result
        self.size = size
        self.done = done
        self.told = False


class AckBatcher:
    """One thread sending the acks handed to :meth:`submit` in batches."""

    def __init__(
        self,
        client: Client,
        queue: str,
        metrics: WorkerMetrics,
        backoff: Callable[[int], float],
        max_pending: int,
    ) -> None:
        self._client = client
        self._queue = queue
        self._metrics = metrics
        self._backoff = backoff
        self._max_pending = max(1, max_pending)
        self._items: List[_Ack] = []
        self._cv = threading.Condition()
        self._closed = False
        self._abandoned = False
        self._thread = threading.Thread(target=self._run, name="sluice-acks", daemon=True)
        self._thread.start()

    def submit(self, receipt: str, result: Any, size: int, done: Done) -> None:
        """Queues the ack of one delivery with ``result`` (``NO_RESULT`` for none; ``size``
        its JSON bytes); ``done`` runs on the batcher's thread with its outcome. Blocks while
        ``max_pending`` acks wait already, so a slow broker slows the handlers down instead
        of piling up finished tasks."""
        item = _Ack(receipt, result, size, done)
        # The batcher's own thread (an outcome's callback acking again) never waits for room:
        # it is the thread that makes room.
        own = threading.current_thread() is self._thread
        with self._cv:
            while len(self._items) >= self._max_pending and not self._closed and not own:
                self._cv.wait()
            closed = self._closed
            if not closed:
                self._items.append(item)
                self._cv.notify_all()
        if closed:
            # A handler that outlived the worker's shutdown acks on its own.
            self._send([item])

    def close(self, timeout: float) -> None:
        """Sends what is waiting, then stops the thread. While the broker cannot be reached
        it keeps trying for ``timeout`` seconds, then gives up: those tasks stay leased and
        run again once their leases end."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._abandoned = True
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._items and not self._closed:
                    self._cv.wait()
                if not self._items:
                    return
                n, size = 0, 0
                for item in self._items[:MAX_BATCH]:
                    if n and size + item.size > MAX_BATCH_BYTES:
                        break
                    n += 1
                    size += item.size
                batch, self._items = self._items[:n], self._items[n:]
                self._cv.notify_all()
            try:
                self._send(batch)
            except BaseException as e:  # noqa: BLE001 - the thread must outlive any one batch
                log.exception("acknowledging %d finished tasks failed unexpectedly", len(batch))
                err = SluiceError(f"acknowledging failed: {e}")
                for item in batch:
                    if not item.told:
                        _tell(item, err, False)

    def _send(self, batch: List[_Ack]) -> None:
        failures = 0
        while True:
            try:
                outcomes = self._client.ack_batch(self._queue, [(i.receipt, i.result) for i in batch])
                break
            except SluiceError as e:
                if not e.transient:
                    for item in batch:
                        _tell(item, e, failures > 0)
                    return
                failures += 1
                self._metrics.broker_error()
                if self._abandoned:
                    log.error("the worker stopped while %d finished tasks could not be acknowledged "
                              "(%s); they will run again when their leases end", len(batch), e)
                    for item in batch:
                        _tell(item, e, True)
                    return
                if failures == 1:
                    log.warning("acknowledging %d finished tasks failed (%s); retrying until the broker "
                                "answers", len(batch), e)
                time.sleep(self._backoff(failures))
        if failures:
            log.info("acknowledging finished tasks went through after %d tries", failures + 1)
        for i, item in enumerate(batch):
            err: Optional[SluiceError] = None
            if i >= len(outcomes):
                err = SluiceError("the broker's ack answer is missing an outcome")
            elif not outcomes[i].ok:
                o = outcomes[i]
                code = ErrorCode.parse(o.error_code or "", 400)
                err = ApiError(code.http_status, code, o.error_message or "the ack was refused")
            _tell(item, err, failures > 0)


def _tell(item: _Ack, err: Optional[SluiceError], retried: bool) -> None:
    item.told = True
    try:
        item.done(err, retried)
    except Exception:  # noqa: BLE001 - one outcome's bookkeeping must not stop the others
        log.exception("handling the outcome of an ack failed")
