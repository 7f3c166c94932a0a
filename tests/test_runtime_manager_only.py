"""A watch that takes only some objects of an uncached kind (Manager.watch(..., only=...)): the simulated
kube-scheduler reads Nominated Events only, so the others are not delivered at all."""

from __future__ import annotations

from karpy.kube.memory import MemoryAPI
from karpy.runtime.clock import SimClock
from karpy.runtime.events import Recorder
from karpy.runtime.manager import Manager


def _world():
    clock = SimClock(0.0)
    api = MemoryAPI(clock)
    return api, Manager(api, clock, strict=True), Recorder(api, clock)


def _nominated(obj: dict) -> bool:
    return obj.get("reason") == "Nominated"


def _publish(rec: Recorder) -> None:
    rec.publish({"kind": "Pod", "name": "p", "namespace": "default"}, "Nominated", "Pod should schedule on: nodeclaim/a")
    rec.publish({"kind": "Pod", "name": "p", "namespace": "default"}, "Scheduled", "assigned default/p to node-a")
    rec.publish({"kind": "Pod", "name": "q", "namespace": "default"}, "Nominated", "Pod should schedule on: node/b")


def test_only_the_wanted_events_reach_the_handler():
    api, mgr, rec = _world()
    seen: list[tuple[str, str]] = []
    mgr.watch("Event", lambda t, o, old: seen.append((o["reason"], o["involvedObject"]["name"])), cache=False,
              only=_nominated)
    mgr.start()
    _publish(rec)
    assert len(mgr._feed) == 2  # the Scheduled Event never entered the feed
    mgr.drain()
    assert seen == [("Nominated", "p"), ("Nominated", "q")]
    assert len(api.list("Event")[0]) == 3  # the API server keeps them all


def test_a_watch_of_the_kind_without_a_filter_gets_everything():
    api, mgr, rec = _world()
    picky: list[str] = []
    everything: list[str] = []
    mgr.watch("Event", lambda t, o, old: picky.append(o["reason"]), cache=False, only=_nominated)
    mgr.watch("Event", lambda t, o, old: everything.append(o["reason"]), cache=False)
    mgr.start()
    _publish(rec)
    mgr.drain()
    assert everything == ["Nominated", "Scheduled", "Nominated"]
    assert picky == everything  # a handler given a filter still sees what the kind's other watches need


def test_a_cached_watch_of_the_kind_turns_the_filter_off():
    api, mgr, rec = _world()
    picky: list[str] = []
    mgr.watch("Event", lambda t, o, old: picky.append(o["reason"]), cache=False, only=_nominated)
    mgr.watch("Event", lambda t, o, old: None)
    mgr.start()
    _publish(rec)
    mgr.drain()
    assert [e["reason"] for e in sorted(mgr.list("Event"), key=lambda e: e["metadata"]["name"])] == \
        ["Nominated", "Scheduled", "Nominated"]
    assert picky == ["Nominated", "Scheduled", "Nominated"]
