"""The controller manager: informers, a work queue, requeues on the clock.

Controllers register the kinds they watch and a handler per kind; the manager
lists and then watches each kind once, keeps a store of the latest objects
(the informer cache controllers read), and calls the handlers with every
change. Handlers enqueue keys; :meth:`Manager.drain` runs the queued
reconciles in FIFO order, delivering the changes each reconcile made before
the next one runs, until nothing is left to do at this instant. A reconcile
returns how long until it wants to run again (seconds) or None.

The same manager runs over the in-memory API server (``karpy simulate``,
``karpy sandbox``: changes arrive through the store's write hook, in write
order) and over a real API server (``karpy controller``: changes arrive from
list-then-watch informers on other threads).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Iterable, Protocol

from ..kube import errors as E
from ..kube.port import ADDED, DELETED, MODIFIED
from ..kube.registry import is_namespaced
from .clock import Clock

Handler = Callable[[str, dict, "dict | None"], None]
QUIET_KINDS = frozenset({"Event", "Lease"})  # writes that are not cluster activity


class Controller(Protocol):
    name: str

    def setup(self, mgr: "Manager") -> None:
        """Register watches (``mgr.watch(kind, handler)``)."""

    def reconcile(self, key: Any) -> float | None:
        """Do the work for ``key``; seconds until it should run again, or None."""


def _key(kind: str, obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    ns = str(meta.get("namespace") or "default") if is_namespaced(kind) else ""
    return ns, str(meta.get("name", ""))


class Manager:
    def __init__(self, api: Any, clock: Clock, strict: bool = True):
        self.api = api
        self.clock = clock
        self.strict = strict  # re-raise unexpected errors from reconciles (simulations and tests)
        self.realtime = False  # another thread may wait for work (karpy sandbox, karpy controller)
        self.controllers: list[Controller] = []
        self.store: dict[str, dict[tuple[str, str], dict]] = {}
        self._handlers: dict[str, list[Handler]] = {}
        self._uncached: set[str] = set()  # kinds only watched, not kept in the store (see watch)
        # uncached kinds whose every watch takes only some objects: kind -> their tests, and one test for them all
        self._only_tests: dict[str, list[Callable[[dict], bool]]] = {}
        self._only: dict[str, Callable[[dict], bool]] = {}
        self._cached: set[str] = set()
        self._queue: deque[tuple[Controller, Any]] = deque()
        self._idle: deque[tuple[Controller, Any]] = deque()  # run once everything else at this instant is done
        self._queued: set[tuple[int, Any]] = set()
        self._feed: deque[tuple[str, dict]] = deque()
        self._timers: dict[tuple[int, Any], tuple[Any, int]] = {}  # (controller, key) -> (timer, its number)
        self._timer_seq = 0
        self._conflicts: dict[tuple[int, Any], int] = {}
        self.last_activity = clock.now()
        self.started = False
        self.synced = threading.Event()
        self.reconciles = 0
        self.errors: list[tuple[str, BaseException]] = []
        self.failures = 0
        self.on_error: Callable[[str, Any, BaseException], None] | None = None
        self.on_reconcile: Callable[[str, float, bool], None] | None = None  # (controller, seconds, failed): metrics
        self.informer_log: Callable[..., None] | None = None

    # --- registration --------------------------------------------------------------------
    def add(self, controller: Controller) -> None:
        self.controllers.append(controller)
        controller.setup(self)

    def watch(self, kind: str, handler: Handler, cache: bool = True,
              only: Callable[[dict], bool] | None = None) -> None:
        """Call ``handler(type, obj, old)`` with every change of ``kind``. With ``cache=False`` (and no other
        watch of the kind asking for it) the objects are not kept in the store: the handler sees each change
        once, with ``old`` None, and ``get``/``list`` of the kind find nothing (Events: many, written once,
        read by nobody from the cache). ``only`` (with ``cache=False``) says which objects the handler wants:
        while every watch of an uncached kind has one, changes no watch wants are not delivered at all."""
        first = kind not in self._handlers
        self._handlers.setdefault(kind, []).append(handler)
        self.store.setdefault(kind, {})
        if cache:
            self._cached.add(kind)
            self._uncached.discard(kind)
        elif kind not in self._cached:
            self._uncached.add(kind)
        if cache or only is None or (not first and kind not in self._only_tests):
            self._only_tests.pop(kind, None)
            self._only.pop(kind, None)
        else:
            tests = self._only_tests.setdefault(kind, [])
            tests.append(only)
            self._only[kind] = tests[0] if len(tests) == 1 else (lambda obj, ts=tuple(tests): any(t(obj) for t in ts))

    def watched_kinds(self) -> list[str]:
        return list(self._handlers)

    # --- the informer cache ----------------------------------------------------------------
    def get(self, kind: str, name: str, namespace: str = "") -> dict | None:
        ns = (namespace or "default") if is_namespaced(kind) else ""
        return self.store.get(kind, {}).get((ns, name))

    def list(self, kind: str, namespace: str | None = None) -> list[dict]:
        objs = self.store.get(kind, {})
        if namespace is None:
            return list(objs.values())
        return [o for (ns, _), o in objs.items() if ns == namespace]

    def feed(self, etype: str, obj: dict) -> None:
        """A change from the API (write hook or informer thread)."""
        self._feed.append((etype, obj))
        if self.realtime:
            wake = self.clock.wakeup
            with wake:
                wake.notify_all()

    def start(self) -> None:
        """List every watched kind into the store (as ADDED events) and subscribe to changes."""
        if self.started:
            return
        self.started = True
        hooks = getattr(self.api, "write_hooks", None)
        if hooks is not None:
            for kind in self._handlers:
                items, _ = self.api.list(kind)
                for obj in items:
                    self._feed.append((ADDED, obj))
            watched = set(self._handlers)

            feed = self._feed
            only = self._only

            def hook(etype: str, obj: dict, old: dict | None) -> None:
                kind = obj.get("kind")
                if kind in watched:
                    wanted = only.get(kind)
                    if wanted is not None and not wanted(obj):
                        return
                    if self.realtime:
                        self.feed(etype, obj)
                    else:
                        feed.append((etype, obj))

            hooks.append(hook)
            self.synced.set()
        else:  # a real API server: list-then-watch informers on their own threads (karpy.kube.informer)
            from ..kube.informer import Informers

            self.informers = Informers(self.api, list(self._handlers), self.feed, on_synced=self.synced.set,
                                       log=self.informer_log)
            self.informers.start()

    def stop(self) -> None:
        """Stop the informers (a real API server's watches)."""
        informers = getattr(self, "informers", None)
        if informers is not None:
            informers.stop()

    def pump(self) -> int:
        """Deliver the changes that have arrived to the store and the handlers."""
        n = 0
        feed = self._feed
        uncached = self._uncached
        only = self._only
        stores = self.store
        handlers = self._handlers
        active = False  # a change that is cluster activity was delivered (the clock stands still meanwhile)
        try:
            while feed:
                etype, obj = feed.popleft()
                kind = obj.get("kind", "")
                if kind in uncached:
                    wanted = only.get(kind)
                    if wanted is not None and not wanted(obj):
                        continue  # (from a real API server's informer: the write hook drops them before)
                    for h in handlers[kind]:
                        h(etype, obj, None)
                    n += 1
                    continue
                store = stores.get(kind)
                if store is None:
                    continue
                k = _key(kind, obj)
                old = store.get(k)
                if etype == DELETED:
                    if old is None:
                        continue
                    store.pop(k, None)
                else:
                    if old is not None and etype == ADDED:
                        etype = MODIFIED
                    store[k] = obj
                if kind not in QUIET_KINDS:
                    active = True
                for h in handlers.get(kind, ()):
                    h(etype, obj, old)
                n += 1
        finally:
            if active:
                self.last_activity = self.clock.now()
        return n

    # --- the work queue ----------------------------------------------------------------------
    def enqueue(self, controller: Controller, key: Any = "") -> None:
        qk = (id(controller), key)
        if qk in self._queued:
            return
        self._queued.add(qk)
        (self._idle if getattr(controller, "idle", False) else self._queue).append((controller, key))
        if self.realtime:
            wake = self.clock.wakeup
            with wake:
                wake.notify_all()

    def requeue_after(self, controller: Controller, key: Any, seconds: float, keepalive: bool = False) -> None:
        """Run ``controller`` for ``key`` again ``seconds`` from now (the earliest request wins)."""
        qk = (id(controller), key)
        when = self.clock.now() + max(0.0, seconds)
        hit = self._timers.get(qk)
        t = hit[0] if hit is not None else None
        if t is not None and not t.cancelled and t.when <= when:
            return
        if t is not None:
            t.cancel()
        self._timer_seq += 1
        token = self._timer_seq
        timers = self._timers

        # The function knows its timer by a number, not by the timer itself: a timer holding a function that
        # holds the timer is a reference cycle, which only the cyclic collector frees (karpy simulate keeps
        # its heap out of that collector's reach, so every fired or replaced timer would stay for good).
        def fire() -> None:
            hit = timers.get(qk)
            if hit is not None and hit[1] == token:
                del timers[qk]
            self.enqueue(controller, key)

        timer = self.clock.call_at(when, fire, keepalive=keepalive, label=f"{controller.name}/{key}",
                                   priority=getattr(controller, "priority", 0))
        timers[qk] = (timer, token)

    def busy(self) -> bool:
        return bool(self._queue or self._idle or self._feed)

    def drain(self, limit: int = 10_000_000) -> None:
        """Run queued reconciles (delivering their changes) until the queue and the feed are empty.

        Controllers marked ``idle`` (the simulated kube-scheduler) run only once nothing else is
        queued, so they see everything that happened at this instant."""
        self.pump()
        while (self._queue or self._idle) and limit > 0:
            limit -= 1
            controller, key = (self._queue or self._idle).popleft()
            qk = (id(controller), key)
            self._queued.discard(qk)
            self._run(controller, key, qk)
            self.pump()

    def _run(self, controller: Controller, key: Any, qk: tuple) -> None:
        self.reconciles += 1
        if self.on_reconcile is not None:
            t0 = time.perf_counter()
            n_failures = self.failures
            try:
                self._reconcile(controller, key, qk)
            finally:
                self.on_reconcile(controller.name, time.perf_counter() - t0, self.failures > n_failures)
            return
        self._reconcile(controller, key, qk)

    def _reconcile(self, controller: Controller, key: Any, qk: tuple) -> None:
        try:
            after = controller.reconcile(key)
        except E.Conflict:
            n = self._conflicts.get(qk, 0) + 1
            self._conflicts[qk] = n
            self.requeue_after(controller, key, min(60.0, 0.005 * 2 ** min(n, 14)))
            return
        except E.NotFound:
            return
        except E.ApiError as e:
            self._fail(controller, key, e, qk)
            return
        except Exception as e:  # noqa: BLE001
            if self.strict:
                raise
            self._fail(controller, key, e, qk)
            return
        self._conflicts.pop(qk, None)
        if after is not None:
            self.requeue_after(controller, key, after)

    def _fail(self, controller: Controller, key: Any, e: BaseException, qk: tuple) -> None:
        n = self._conflicts.get(qk, 0) + 1
        self._conflicts[qk] = n
        self.errors.append((controller.name, e))
        self.failures += 1
        if self.on_error is not None:
            self.on_error(controller.name, key, e)
        self.requeue_after(controller, key, min(300.0, 0.005 * 2 ** min(n, 16)))

    # --- helpers for handlers ------------------------------------------------------------------
    def enqueue_all(self, controller: Controller, keys: Iterable[Any]) -> None:
        for k in keys:
            self.enqueue(controller, k)


def name_of(obj: dict | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("name", ""))


def namespace_of(obj: dict | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("namespace") or "")


def labels_of(obj: dict | None) -> dict:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def annotations_of(obj: dict | None) -> dict:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def newer(written: dict | None, cached: dict | None) -> bool:
    """Whether ``written`` (what this process's own write returned) is a later version of the object than
    ``cached`` (the informer's copy, which a real API server's watch updates a moment later)."""
    if written is None or cached is None:
        return False
    wm, cm = written.get("metadata") or {}, cached.get("metadata") or {}
    if wm.get("uid") != cm.get("uid"):
        return False
    w, c = str(wm.get("resourceVersion") or ""), str(cm.get("resourceVersion") or "")
    return w.isdigit() and c.isdigit() and int(w) > int(c)


def deleting(obj: dict | None) -> bool:
    return bool(((obj or {}).get("metadata") or {}).get("deletionTimestamp"))


def condition(obj: dict | None, ctype: str) -> dict | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == ctype:
            return c
    return None


def is_true(obj: dict | None, ctype: str) -> bool:
    c = condition(obj, ctype)
    return c is not None and c.get("status") == "True"
