"""Events written in the background, as client-go's event broadcaster writes Karpenter's.

A reconcile that publishes an Event does not wait for the API server: the Event is queued and a writer
thread creates it. Against a real API server each create is a round trip, and the provisioner publishes one
``Nominated`` Event per pod it places: 5,000 pods held the provisioning loop (and every controller behind it)
for about 20 s before the NodeClaims could be launched. Upstream's recorder never blocks its caller either.

As client-go's broadcaster:

* at most :data:`QUEUE_SIZE` Events wait; one more is dropped (logged), never blocking the reconcile. client-go
  keeps 1,000; karpy keeps many more, as one provisioning pass can nominate tens of thousands of pods and the
  simulated world's kube-scheduler reads those Events (a few hundred bytes each);
* an Event the server refuses (a 4xx answer: the namespace is going away, a forbidden write) is dropped with
  "Server rejected event (will not retry!)"; any other failure is retried a few times, with a pause, and then
  dropped with "Unable to write event (retry limit exceeded!)".

:meth:`AsyncEvents.stop` writes what is still queued, within a deadline, before the process exits.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from ..kube import errors as E

QUEUE_SIZE = 100_000  # Events waiting to be written (client-go: 1,000)
WRITERS = 2  # Events in flight at once
TRIES = 3
RETRY_PAUSE = 0.5  # seconds between tries of one Event


class AsyncEvents:
    """An API port for the :class:`~karpy.runtime.events.Recorder` whose ``create`` only queues the Event."""

    def __init__(self, api: Any, log: Any = None, writers: int = WRITERS, queue_size: int = QUEUE_SIZE):
        self.api = api
        self.log = log
        self.queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self.dropped = 0
        self.written = 0
        self._stopping = threading.Event()
        self._threads = [threading.Thread(target=self._run, name=f"karpy-events-{i}", daemon=True)
                         for i in range(max(1, writers))]
        for t in self._threads:
            t.start()

    def create(self, obj: dict) -> dict:
        """Queue the Event; the object as it was given (the Recorder does not read the answer)."""
        try:
            self.queue.put_nowait(obj)
        except queue.Full:
            self.dropped += 1
            if self.log is not None and (self.dropped == 1 or self.dropped % 1000 == 0):
                self.log.error("Unable to queue event: the queue is full", controller="events",
                               reason=obj.get("reason", ""), dropped=self.dropped)
        return obj

    def _run(self) -> None:
        while True:
            obj = self.queue.get()
            try:
                if obj is None:
                    return
                self._write(obj)
            finally:
                self.queue.task_done()

    def _write(self, obj: dict) -> None:
        err: BaseException | None = None
        for attempt in range(TRIES):
            try:
                self.api.create(obj)
                self.written += 1
                return
            except E.ApiError as e:
                if 400 <= e.code < 500 and e.code != 429:
                    self._failed("Server rejected event (will not retry!)", obj, e)
                    return
                err = e
            except Exception as e:  # noqa: BLE001 - a connection lost: tried again, as client-go does
                err = e
            if attempt + 1 < TRIES:
                self._stopping.wait(RETRY_PAUSE)  # no pause once the process is stopping
        self._failed("Unable to write event (retry limit exceeded!)", obj, err)

    def _failed(self, message: str, obj: dict, err: BaseException) -> None:
        self.dropped += 1
        if self.log is not None:
            inv = obj.get("involvedObject") or {}
            self.log.error(message, controller="events", reason=obj.get("reason", ""),
                           object=f"{inv.get('kind', '')}/{inv.get('name', '')}", error=str(err))

    def flush(self, timeout: float) -> bool:
        """Wait until every queued Event is written or dropped; whether that happened within ``timeout``."""
        done = threading.Event()

        def wait() -> None:
            self.queue.join()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        return done.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued (within ``timeout``), then stop the writers."""
        self.flush(timeout)
        self._stopping.set()
        for _ in self._threads:
            try:
                self.queue.put(None, timeout=0.1)
            except queue.Full:
                break
        for t in self._threads:
            t.join(0.5)
