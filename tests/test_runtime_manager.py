"""The controller manager's informer cache: what it keeps, and what a watch that asks for no cache sees."""

from __future__ import annotations

from karpy.kube.memory import MemoryAPI
from karpy.runtime.clock import SimClock
from karpy.runtime.events import Recorder
from karpy.runtime.manager import Manager


def _world():
    clock = SimClock(0.0)
    api = MemoryAPI(clock)
    return api, Manager(api, clock, strict=True), Recorder(api, clock)


def test_an_uncached_watch_sees_every_event_once_and_the_cache_keeps_none():
    api, mgr, rec = _world()
    seen: list[tuple[str, str, object]] = []
    mgr.watch("Event", lambda t, o, old: seen.append((t, o["reason"], old)), cache=False)
    mgr.start()
    rec.publish({"kind": "Pod", "name": "p", "namespace": "default"}, "Nominated", "Pod should schedule on: nodeclaim/a")
    rec.publish({"kind": "Pod", "name": "p", "namespace": "default"}, "Scheduled", "assigned default/p to node-a")
    mgr.drain()
    assert [(t, r) for t, r, _ in seen] == [("ADDED", "Nominated"), ("ADDED", "Scheduled")]
    assert all(old is None for _, _, old in seen)
    assert mgr.list("Event") == []
    assert len(api.list("Event")[0]) == 2  # the API server still has them (the simulation's output reads them there)


def test_a_cached_watch_of_the_same_kind_keeps_the_objects():
    api, mgr, rec = _world()
    seen: list[str] = []
    mgr.watch("Event", lambda t, o, old: seen.append(o["reason"]), cache=False)
    mgr.watch("Event", lambda t, o, old: None)  # another controller reads Events from the cache
    mgr.start()
    rec.publish({"kind": "Node", "name": "n"}, "Registered", "registered")
    mgr.drain()
    assert seen == ["Registered"]
    assert [e["reason"] for e in mgr.list("Event")] == ["Registered"]


def test_events_of_one_component_read_back_with_their_source():
    api, mgr, rec = _world()
    rec.publish({"kind": "Node", "name": "a"}, "One", "first")
    rec.publish({"kind": "Node", "name": "b"}, "Two", "second", component="kube-scheduler")
    rec.publish({"kind": "Node", "name": "c"}, "Three", "third")
    got = {e["reason"]: (e["source"], e["reportingComponent"]) for e in api.list("Event")[0]}
    assert got == {"One": ({"component": "karpenter"}, "karpenter"),
                   "Two": ({"component": "kube-scheduler"}, "kube-scheduler"),
                   "Three": ({"component": "karpenter"}, "karpenter")}
