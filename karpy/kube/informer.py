"""List-then-watch informers over any :class:`~karpy.kube.port.KubeAPI`, feeding a manager.

One thread per kind:

1. **list** the kind and deliver the difference from what was delivered before:
   ADDED for objects not seen, MODIFIED for objects whose resourceVersion
   changed, DELETED (with the last state seen) for objects that vanished --
   so after a relist the consumer's cache holds exactly the listed objects,
   never losing a deletion that happened while the watch was down and never
   holding an object twice;
2. **watch** from the list's resourceVersion, delivering events and moving the
   resourceVersion forward (BOOKMARK events move it without an object);
3. when the watch ends (server timeout, dropped connection) **resume** watching
   from the last resourceVersion seen; when the server answers 410 Gone (as an
   HTTP status or as an ERROR event in the stream) go back to 1.

Errors back off exponentially (deterministic, capped). ``deliver(type, obj)``
is called on the informer's thread; :meth:`karpy.runtime.manager.Manager.feed`
is thread-safe.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

from . import errors as E
from .port import ADDED, BOOKMARK, DELETED, ERROR, MODIFIED
from .registry import is_namespaced

Deliver = Callable[[str, dict], None]


def _key(kind: str, obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    ns = str(meta.get("namespace") or "default") if is_namespaced(kind) else ""
    return ns, str(meta.get("name", ""))


def _rv(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def diff(kind: str, known: dict[tuple[str, str], dict], items: Iterable[dict]) -> tuple[list[tuple[str, dict]], dict]:
    """The events that turn ``known`` into ``items`` (a fresh list), and the new known state."""
    new: dict[tuple[str, str], dict] = {}
    events: list[tuple[str, dict]] = []
    for obj in items:
        if obj.get("kind") != kind:
            obj = dict(obj, kind=kind)
        k = _key(kind, obj)
        new[k] = obj
        old = known.get(k)
        if old is None:
            events.append((ADDED, obj))
        elif _rv(old) != _rv(obj) or (old.get("metadata") or {}).get("uid") != (obj.get("metadata") or {}).get("uid"):
            if (old.get("metadata") or {}).get("uid") != (obj.get("metadata") or {}).get("uid"):
                events.append((DELETED, old))  # deleted and recreated under the same name while we were away
                events.append((ADDED, obj))
            else:
                events.append((MODIFIED, obj))
    for k, old in known.items():
        if k not in new:
            events.append((DELETED, old))
    return events, new


class Informer:
    """List-then-watch one kind into ``deliver``."""

    def __init__(self, api: Any, kind: str, deliver: Deliver, on_synced: Callable[[], None] | None = None,
                 backoff_base: float = 0.1, backoff_cap: float = 10.0, poll: float = 0.5,
                 log: Callable[..., None] | None = None):
        self.api = api
        self.kind = kind
        self.deliver = deliver
        self.on_synced = on_synced
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.poll = poll
        self.log = log
        self.known: dict[tuple[str, str], dict] = {}
        self.resource_version: str | None = None
        self.synced = False
        self.served = True  # False while the kind's list answers 404
        self.lists = 0  # how many times the kind was listed (1 + relists)
        self.watches = 0
        self._stop = threading.Event()
        self._watch: Any = None
        self._thread: threading.Thread | None = None
        self._failures = 0

    # --- one step at a time (the thread runs these; tests may call them directly) -------------------
    def relist(self) -> None:
        try:
            items, rv = self.api.list(self.kind)
        except E.NotFound:
            # the kind is not served (its CRD is not installed, such as EC2NodeClass on a cluster that has only
            # upstream's kwok CRDs): none of it exists, and :meth:`run` lists it again now and then
            if self.served and self.log is not None:
                self.log("kind not served, treating it as empty", kind=self.kind)
            self.served = False
            items, rv = [], ""
        else:
            self.served = True
        events, self.known = diff(self.kind, self.known, items)
        self.resource_version = rv or None
        self.lists += 1
        for etype, obj in events:
            self.deliver(etype, obj)
        if not self.synced:
            self.synced = True
            if self.on_synced is not None:
                self.on_synced()

    def handle(self, etype: str, obj: dict) -> bool:
        """Take one watch event; False when the watch must be abandoned for a relist (410 Gone)."""
        if etype == ERROR:
            code = int(obj.get("code") or 0)
            if code == 410:
                self.resource_version = None
                return False
            raise E.from_status(code or 500, obj)
        rv = _rv(obj)
        if etype == BOOKMARK:
            if rv:
                self.resource_version = rv
            return True
        if obj.get("kind") != self.kind:
            obj = dict(obj, kind=self.kind)
        k = _key(self.kind, obj)
        if etype == DELETED:
            if self.known.pop(k, None) is None:
                if rv:
                    self.resource_version = rv
                return True
        else:
            old = self.known.get(k)
            if old is not None and _rv(old) == rv and rv:
                return True  # a replay of what we have (a resumed watch may repeat the last event)
            etype = MODIFIED if old is not None else ADDED
            self.known[k] = obj
        if rv:
            self.resource_version = rv
        self.deliver(etype, obj)
        return True

    def watch_once(self) -> None:
        """One watch request from the current resourceVersion, until it ends, is stopped or needs a relist."""
        try:
            w = self.api.watch(self.kind, resource_version=self.resource_version)
        except E.Gone:
            self.resource_version = None
            return
        self._watch = w
        self.watches += 1
        try:
            while not self._stop.is_set():
                ev = w.next(timeout=self.poll)
                if ev is None:
                    if getattr(w, "done", False) or getattr(w, "stopped", False):
                        err = getattr(w, "error", None)
                        if err is not None and self.log is not None:
                            self.log("watch connection dropped, resuming", kind=self.kind, error=str(err),
                                     resourceVersion=self.resource_version)
                        return
                    continue
                self._failures = 0
                if not self.handle(ev.type, ev.object):
                    if self.log is not None:
                        self.log("watch expired (410 Gone), relisting", kind=self.kind)
                    return
        finally:
            self._watch = None
            w.stop()

    # --- the thread ---------------------------------------------------------------------------------
    def run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                if not self.served:
                    self._stop.wait(self.backoff_cap)
                    continue
                self.watch_once()
            except Exception as e:  # noqa: BLE001 - API errors, connection errors: back off and go on
                self._failures += 1
                delay = min(self.backoff_cap, self.backoff_base * 2 ** min(self._failures - 1, 16))
                if self.log is not None:
                    self.log("informer error, retrying", kind=self.kind, error=str(e), retryIn=delay)
                if isinstance(e, E.Gone):
                    self.resource_version = None
                self._stop.wait(delay)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        w = self._watch
        if w is not None:
            try:
                w.stop()
            except Exception:
                pass

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)


class Informers:
    """Informers for a set of kinds; ``on_synced`` once every one has listed."""

    def __init__(self, api: Any, kinds: Iterable[str], deliver: Deliver, on_synced: Callable[[], None] | None = None,
                 log: Callable[..., None] | None = None, **kw: Any):
        self.kinds = list(kinds)
        self._left = set(self.kinds)
        self._lock = threading.Lock()
        self._on_synced = on_synced
        self.by_kind = {k: Informer(api, k, deliver, on_synced=self._synced_one(k), log=log, **kw) for k in self.kinds}
        if not self.kinds and on_synced is not None:
            on_synced()

    def _synced_one(self, kind: str) -> Callable[[], None]:
        def done() -> None:
            with self._lock:
                self._left.discard(kind)
                left = len(self._left)
            if left == 0 and self._on_synced is not None:
                self._on_synced()
        return done

    @property
    def synced(self) -> bool:
        return not self._left

    def start(self) -> None:
        for inf in self.by_kind.values():
            inf.start()

    def stop(self) -> None:
        for inf in self.by_kind.values():
            inf.stop()
        for inf in self.by_kind.values():
            inf.join(timeout=2)
