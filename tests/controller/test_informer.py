"""Informers: list, watch from the list's resourceVersion, resume after a cut, relist on 410 with a diff."""

from __future__ import annotations

import threading
from collections import deque

from karpy.kube import errors as E
from karpy.kube.informer import Informer, Informers, diff
from karpy.kube.memory import MemoryAPI
from karpy.kube.port import WatchEvent
from karpy.runtime.clock import SimClock
from karpy.runtime.manager import Manager


def claim(name: str, rv: int, uid: str | None = None) -> dict:
    return {"kind": "NodeClaim", "metadata": {"name": name, "resourceVersion": str(rv), "uid": uid or f"uid-{name}"}}


class FakeWatch:
    def __init__(self, events, done_after=True):
        self.events = deque(events)
        self.done = False
        self.done_after = done_after
        self.stopped = False

    def next(self, timeout=None):
        if self.events:
            return self.events.popleft()
        if self.done_after:
            self.done = True
        return None

    def poll(self):
        out = list(self.events)
        self.events.clear()
        return out

    def stop(self):
        self.stopped = True


class FakeSource:
    """A scripted API: lists and watches handed out in order; records the resourceVersions asked for."""

    def __init__(self):
        self.lists: deque = deque()
        self.watches: deque = deque()
        self.watched_from: list = []

    def list(self, kind, namespace=None, label_selector=None, field_selector=None):
        return self.lists.popleft()

    def watch(self, kind, resource_version=None, **kw):
        self.watched_from.append(resource_version)
        w = self.watches.popleft()
        if isinstance(w, BaseException):
            raise w
        return w


def collect():
    got = []
    return got, lambda etype, obj: got.append((etype, obj["metadata"]["name"]))


def test_diff_of_a_relist():
    known = {("", "a"): claim("a", 1), ("", "b"): claim("b", 2), ("", "c"): claim("c", 3)}
    events, new = diff("NodeClaim", known, [claim("a", 1), claim("b", 5), claim("d", 6), claim("c", 7, uid="other")])
    assert [(t, o["metadata"]["name"]) for t, o in events] == [
        ("MODIFIED", "b"), ("ADDED", "d"), ("DELETED", "c"), ("ADDED", "c")]
    assert set(new) == {("", "a"), ("", "b"), ("", "c"), ("", "d")}
    events, _ = diff("NodeClaim", new, [claim("a", 1)])
    assert sorted((t, o["metadata"]["name"]) for t, o in events) == [("DELETED", "b"), ("DELETED", "c"), ("DELETED", "d")]


def test_watch_starts_at_the_lists_version_and_resumes_from_the_last_seen():
    src = FakeSource()
    src.lists.append(([claim("a", 1)], "10"))
    src.watches.append(FakeWatch([WatchEvent("ADDED", claim("b", 11)), WatchEvent("BOOKMARK", {"kind": "NodeClaim",
                                  "metadata": {"resourceVersion": "15"}})]))
    src.watches.append(FakeWatch([WatchEvent("MODIFIED", claim("b", 16)), WatchEvent("DELETED", claim("a", 17))]))
    got, deliver = collect()
    inf = Informer(src, "NodeClaim", deliver)
    inf.relist()
    inf.watch_once()  # ends: the connection dropped
    assert inf.resource_version == "15"  # the bookmark moved it
    inf.watch_once()
    assert src.watched_from == ["10", "15"]
    assert got == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "a")]
    assert set(inf.known) == {("", "b")}


def test_gone_relists_and_delivers_what_changed_meanwhile():
    src = FakeSource()
    src.lists.append(([claim("a", 1), claim("b", 2)], "10"))
    src.watches.append(FakeWatch([WatchEvent("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})]))
    # while the watch was away: a deleted, b changed, c created
    src.lists.append(([claim("b", 20), claim("c", 21)], "22"))
    src.watches.append(E.Gone("too old resource version"))
    src.lists.append(([claim("b", 20), claim("c", 21)], "30"))
    src.watches.append(FakeWatch([], done_after=True))
    got, deliver = collect()
    inf = Informer(src, "NodeClaim", deliver)
    inf.relist()
    inf.watch_once()
    assert inf.resource_version is None
    inf.relist()
    inf.watch_once()  # the HTTP answer 410 Gone
    assert inf.resource_version is None
    inf.relist()
    inf.watch_once()
    assert got == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "b"), ("ADDED", "c"), ("DELETED", "a")]
    assert inf.lists == 3 and src.watched_from == ["10", "22", "30"]


def test_a_replayed_event_is_not_delivered_twice():
    src = FakeSource()
    got, deliver = collect()
    inf = Informer(src, "NodeClaim", deliver)
    assert inf.handle("ADDED", claim("a", 5))
    assert inf.handle("MODIFIED", claim("a", 5))
    assert inf.handle("DELETED", claim("x", 6))  # never seen: nothing to delete
    assert got == [("ADDED", "a")] and inf.resource_version == "6"


def test_informers_feed_a_manager_with_no_claim_lost_or_doubled_across_an_expired_watch():
    """Over the in-memory API server: the informer thread, a watch that expires, a relist."""
    api = MemoryAPI(history=True)
    clock = SimClock(0)

    class NoHooks:  # hide the write hooks: the manager must use informers, as over HTTP
        def __getattr__(self, name):
            if name == "write_hooks":
                raise AttributeError(name)
            return getattr(api, name)

    mgr = Manager(NoHooks(), clock)
    seen = []
    mgr.watch("NodeClaim", lambda etype, obj, old: seen.append((etype, obj["metadata"]["name"])))
    for i in range(3):
        api.create({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": f"nc-{i}"}})
    mgr.start()
    assert mgr.synced.wait(5)
    inf = mgr.informers.by_kind["NodeClaim"]
    try:
        _wait(lambda: (mgr.pump() or True) and len(mgr.store["NodeClaim"]) == 3)
        # the watch goes away; meanwhile nc-0 is deleted, nc-1 changed and nc-3 created; history is lost
        w = inf._watch
        api.delete("NodeClaim", "nc-0")
        api.patch("NodeClaim", "nc-1", {"metadata": {"labels": {"x": "y"}}})
        api.create({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "nc-3"}})
        with api._lock:
            api._history_floor["NodeClaim"] = api._rv + 1
        if w is not None:
            w.stop()  # the connection drops; resuming answers 410 Gone; the informer relists
        _wait(lambda: (mgr.pump() or True) and sorted(mgr.store["NodeClaim"]) == [("", "nc-1"), ("", "nc-2"), ("", "nc-3")]
              and (mgr.get("NodeClaim", "nc-1")["metadata"].get("labels") or {}).get("x") == "y")
        assert sorted(n for _, n in mgr.store["NodeClaim"]) == ["nc-1", "nc-2", "nc-3"]
        assert [e for e in seen if e[0] == "DELETED"] == [("DELETED", "nc-0")]
    finally:
        mgr.stop()


def _wait(pred, timeout=10.0):
    ev = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if pred():
            return
        ev.wait(0.02)
    raise AssertionError("condition not reached")


def test_informers_signal_synced_once_every_kind_listed():
    api = MemoryAPI(history=True)
    synced = threading.Event()
    infs = Informers(api, ["NodeClaim", "Node", "Pod"], lambda t, o: None, on_synced=synced.set)
    infs.start()
    try:
        assert synced.wait(5) and infs.synced
    finally:
        infs.stop()


def test_a_kind_not_served_counts_as_empty_and_is_picked_up_once_its_crd_is_installed():
    """karpy's kwok provider on a cluster with only upstream's kwok CRDs: EC2NodeClass answers 404, which must
    not hold the controller unsynced forever; once the CRD is installed its objects arrive."""

    class NotServedYet(FakeSource):
        def __init__(self):
            super().__init__()
            self.served = threading.Event()

        def list(self, kind, **kw):
            if not self.served.is_set():
                raise E.NotFound("404 page not found")
            return [claim("a", 5)], "5"

        def watch(self, kind, resource_version=None, **kw):
            return FakeWatch([], done_after=False)

    src = NotServedYet()
    got, deliver = collect()
    logged = []
    synced = threading.Event()
    inf = Informer(src, "NodeClaim", deliver, on_synced=synced.set, backoff_cap=0.05,
                   log=lambda msg, **kw: logged.append((msg, kw.get("kind"))))
    inf.start()
    try:
        assert synced.wait(5) and got == [] and not inf.served
        assert logged == [("kind not served, treating it as empty", "NodeClaim")]  # once, not at every retry
        src.served.set()
        deadline = threading.Event()
        for _ in range(100):
            if got:
                break
            deadline.wait(0.05)
        assert got == [("ADDED", "a")] and inf.served
    finally:
        inf.stop()
        inf.join(2)
