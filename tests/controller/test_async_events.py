"""`karpy controller` writes Events in the background: a reconcile that publishes one does not wait for the API
server, a refused Event is dropped with client-go's message, and what is queued at shutdown is written."""

from __future__ import annotations

import io
import json
import threading

from karpy.controller.events import AsyncEvents
from karpy.kube import errors as E
from karpy.runtime.clock import RealClock
from karpy.runtime.events import Recorder, ref
from karpy.runtime.log import Logger


class SlowAPI:
    """An API port whose creates wait until ``gate`` opens (a server far away or busy)."""

    def __init__(self, fail: dict[str, BaseException] | None = None):
        self.gate = threading.Event()
        self.created: list[dict] = []
        self.fail = fail or {}
        self.lock = threading.Lock()

    def create(self, obj: dict) -> dict:
        self.gate.wait(10)
        err = self.fail.get(obj.get("reason", ""))
        if err is not None:
            raise err
        with self.lock:
            self.created.append(obj)
        return obj


def pod_obj(name: str) -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}}


def test_publishing_returns_before_the_server_answers_and_every_event_is_written_at_stop():
    api = SlowAPI()
    events = AsyncEvents(api)
    rec = Recorder(events, RealClock())
    for i in range(50):
        rec.publish(ref(pod_obj(f"p{i}")), "Nominated", f"Pod should schedule on: nodeclaim/default-{i}")
    # the server has answered nothing yet, and every publish has returned
    assert api.created == []
    api.gate.set()
    events.stop(timeout=10)
    assert sorted(e["involvedObject"]["name"] for e in api.created) == sorted(f"p{i}" for i in range(50))
    first = next(e for e in api.created if e["involvedObject"]["name"] == "p0")
    assert first["reason"] == "Nominated" and first["message"] == "Pod should schedule on: nodeclaim/default-0"
    assert first["metadata"] == {"generateName": "p0.", "namespace": "default"}


def test_a_refused_event_is_dropped_with_client_gos_message_and_the_others_still_written():
    out = io.StringIO()
    api = SlowAPI(fail={"Forbidden": E.Forbidden("events is forbidden", kind="events")})
    api.gate.set()
    events = AsyncEvents(api, Logger(RealClock(), stream=out))
    rec = Recorder(events, RealClock())
    rec.publish(ref(pod_obj("a")), "Forbidden", "refused")
    rec.publish(ref(pod_obj("b")), "Nominated", "Pod should schedule on: nodeclaim/x")
    events.stop(timeout=10)
    assert [e["involvedObject"]["name"] for e in api.created] == ["b"]
    logs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert any(r["message"] == "Server rejected event (will not retry!)" and r.get("object") == "Pod/a" for r in logs)


def test_a_full_queue_drops_the_event_instead_of_blocking_the_reconcile():
    out = io.StringIO()
    api = SlowAPI()
    events = AsyncEvents(api, Logger(RealClock(), stream=out), writers=1, queue_size=3)
    rec = Recorder(events, RealClock())
    for i in range(10):  # one in the writer's hands, three queued, the rest dropped
        rec.publish(ref(pod_obj(f"p{i}")), "Nominated", "m")
    assert events.dropped >= 6
    api.gate.set()
    events.stop(timeout=10)
    assert 1 <= len(api.created) <= 4
    assert "Unable to queue event: the queue is full" in out.getvalue()
