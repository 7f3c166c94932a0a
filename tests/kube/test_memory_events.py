"""Events the recorder writes to the in-memory API server: its short path (MemoryAPI.create_event) stores
each Event exactly as a plain create of the same object would, watchers see it, and a name already taken is
refused as create() refuses it."""

from __future__ import annotations

import pytest

from karpy.kube import errors as E
from karpy.kube.memory import MemoryAPI
from karpy.kube.port import ADDED
from karpy.runtime.clock import SimClock
from karpy.runtime.events import Recorder

T0 = 1767225600.0  # 2026-01-01T00:00:00Z


class _PlainAPI:
    """The same API server seen without its Event short path: the recorder names and creates Events itself."""

    def __init__(self, api: MemoryAPI):
        self.api = api
        self.event_name = api.event_name
        self.create = api.create


def _publish_some(recorder: Recorder, clock: SimClock) -> None:
    recorder.publish({"kind": "Pod", "name": "web-1", "namespace": "shop", "uid": "u-1"}, "Nominated",
                     "Pod should schedule on: nodeclaim/default-abc")
    clock.set(clock.now() + 61)
    recorder.publish({"kind": "Node", "name": "n1"}, "Unconsolidatable", "not empty", dedupe=900.0)
    recorder.publish({"kind": "Node", "name": "n1"}, "Unconsolidatable", "not empty", dedupe=900.0)  # deduplicated
    recorder.publish({"kind": "Pod", "name": "web-1", "namespace": "shop"}, "Evicted", "Evicted pod", "Warning",
                     annotations={"karpy.dev/owner": "ReplicaSet/web"}, component="kube-controller-manager")


def _events(api: MemoryAPI) -> list[dict]:
    items, _ = api.list("Event")
    return sorted(items, key=lambda e: int(e["metadata"]["resourceVersion"]))


def test_short_path_stores_what_a_plain_create_stores():
    fast_clock, plain_clock = SimClock(T0), SimClock(T0)
    fast, plain = MemoryAPI(clock=fast_clock), MemoryAPI(clock=plain_clock)
    _publish_some(Recorder(fast, fast_clock), fast_clock)
    _publish_some(Recorder(_PlainAPI(plain), plain_clock), plain_clock)
    got, want = _events(fast), _events(plain)
    assert len(got) == 3
    assert got == want
    assert [list(e) for e in got] == [list(e) for e in want]  # the same fields in the same order (the JSON output)
    assert [list(e["metadata"]) for e in got] == [list(e["metadata"]) for e in want]
    assert got[2]["metadata"]["annotations"] == {"karpy.dev/owner": "ReplicaSet/web"}
    assert got[2]["metadata"]["namespace"] == "shop" and got[1]["metadata"]["namespace"] == "default"


def test_watchers_see_events_from_the_short_path():
    clock = SimClock(T0)
    api = MemoryAPI(clock=clock)
    seen = []
    api.write_hooks.append(lambda etype, obj, old: seen.append((etype, obj["kind"], obj["reason"])))
    Recorder(api, clock).publish({"kind": "Node", "name": "n1"}, "Registered", "ok")
    assert seen == [(ADDED, "Event", "Registered")]


def test_a_taken_event_name_is_refused():
    clock = SimClock(T0)
    api = MemoryAPI(clock=clock)
    api.create({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "n1.1", "namespace": "default"}})
    with pytest.raises(E.AlreadyExists):
        Recorder(api, clock).publish({"kind": "Node", "name": "n1"}, "Registered", "ok")


def test_suppressed_says_what_publish_with_dedupe_would_drop():
    clock = SimClock(T0)
    api = MemoryAPI(clock=clock)
    rec = Recorder(api, clock)
    assert not rec.suppressed("Node", "n1", "Unconsolidatable", "not empty", 900.0)
    rec.publish({"kind": "Node", "name": "n1"}, "Unconsolidatable", "not empty", dedupe=900.0)
    assert rec.suppressed("Node", "n1", "Unconsolidatable", "not empty", 900.0)
    assert not rec.suppressed("Node", "n1", "Unconsolidatable", "another message", 900.0)
    assert not rec.suppressed("NodeClaim", "n1", "Unconsolidatable", "not empty", 900.0)
    clock.set(T0 + 900)
    assert not rec.suppressed("Node", "n1", "Unconsolidatable", "not empty", 900.0)
    rec.publish({"kind": "Node", "name": "n1"}, "Unconsolidatable", "not empty", dedupe=900.0)
    assert len(_events(api)) == 2
