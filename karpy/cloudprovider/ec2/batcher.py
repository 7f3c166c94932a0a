"""Request batching for karpy's EC2 calls, as upstream Karpenter batches them.

Callers that ask for the same thing within a short window share one AWS call: the window closes when no
new request arrived for ``idle`` seconds, or ``max_wait`` after the first one, or at ``max_items`` requests.

* **CreateFleet**: identical requests (the same launch templates, overrides, tags and capacity type) become
  one call with ``TotalTargetCapacity`` = the number of callers; each caller gets one of the instances, and the
  callers left without one (partial capacity) get the fleet's errors.
* **DescribeInstances**: requests with the same filters are merged into one call over all their instance ids;
  each caller gets the reservations of its own ids. When the merged call fails (one unknown id fails them
  all), every request is made on its own.
* **TerminateInstances**: ids are merged into one call; each caller gets the state changes of its ids. When
  the merged call fails, each id is terminated on its own so one bad id does not keep the others running.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from typing import Any, Callable

IDLE = 0.035  # seconds with no new request
MAX_WAIT = 1.0  # seconds after the first request
MAX_ITEMS = 1000


class _Call:
    __slots__ = ("request", "done", "result", "error")

    def __init__(self, request: dict):
        self.request = request
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class _Bucket:
    def __init__(self, now: float):
        self.calls: list[_Call] = []
        self.first = now
        self.last = now
        self.closed = False


class Batcher:
    """Groups requests by ``key(request)`` and runs ``execute(requests) -> [result or exception]`` per group."""

    def __init__(self, name: str, key: Callable[[dict], str], execute: Callable[[list[dict]], list[Any]],
                 idle: float = IDLE, max_wait: float = MAX_WAIT, max_items: int = MAX_ITEMS):
        self.name, self.key, self.execute = name, key, execute
        self.idle, self.max_wait, self.max_items = idle, max_wait, max_items
        self.lock = threading.Lock()
        self.buckets: dict[str, _Bucket] = {}
        self.batches: list[int] = []  # the size of every call made (for karpy's tests and logs)

    def add(self, request: dict) -> Any:
        call = _Call(request)
        k = self.key(request)
        with self.lock:
            now = time.monotonic()
            b = self.buckets.get(k)
            lead = b is None
            if lead:
                b = self.buckets[k] = _Bucket(now)
            b.calls.append(call)
            b.last = now
            if len(b.calls) >= self.max_items:
                self._close(k, b)
        if lead:
            self._wait_and_run(k, b)
        call.done.wait()
        if call.error is not None:
            raise call.error
        return call.result

    def _close(self, k: str, b: _Bucket) -> None:
        b.closed = True
        if self.buckets.get(k) is b:
            del self.buckets[k]

    def _wait_and_run(self, k: str, b: _Bucket) -> None:
        """The first caller of a window waits it out, then makes the call for everyone in it."""
        while True:
            with self.lock:
                if b.closed:
                    break
                now = time.monotonic()
                left = min(b.last + self.idle, b.first + self.max_wait) - now
                if left <= 0:
                    self._close(k, b)
                    break
            time.sleep(left)
        calls = b.calls
        self.batches.append(len(calls))
        try:
            results = self.execute([c.request for c in calls])
        except BaseException as e:  # noqa: BLE001 - every caller of the window gets the failure
            results = [e] * len(calls)
        for c, r in zip(calls, results):
            if isinstance(r, BaseException):
                c.error = r
            else:
                c.result = r
            c.done.set()


def canonical(request: dict, leave_out: tuple[str, ...] = ()) -> str:
    return json.dumps({k: v for k, v in request.items() if k not in leave_out}, sort_keys=True, default=str)


def create_fleet_batcher(c: Any, **kw: Any) -> Batcher:
    def execute(requests: list[dict]) -> list[Any]:
        req = copy.deepcopy(requests[0])
        req["TargetCapacitySpecification"]["TotalTargetCapacity"] = len(requests)
        out = c.ec2.create_fleet(**req)
        results: list[Any] = []
        for inst in out.get("Instances") or ():
            for iid in inst.get("InstanceIds") or ():
                if len(results) < len(requests):
                    results.append({"FleetId": out.get("FleetId"), "Errors": out.get("Errors") or [],
                                    "Instances": [{**inst, "InstanceIds": [iid]}]})
        errors = out.get("Errors") or [{"ErrorCode": "too few instances returned",
                                        "ErrorMessage": "too few instances returned"}]
        while len(results) < len(requests):
            results.append({"FleetId": out.get("FleetId"), "Errors": errors, "Instances": []})
        return results

    return Batcher("create_fleet", canonical, execute, **kw)


def describe_instances_batcher(c: Any, **kw: Any) -> Batcher:
    def one(req: dict) -> list[dict]:
        out: list[dict] = []
        for page in c.ec2.get_paginator("describe_instances").paginate(**req):
            out.extend(page.get("Reservations") or ())
        return out

    def execute(requests: list[dict]) -> list[Any]:
        ids = sorted({i for r in requests for i in r.get("InstanceIds") or ()})
        try:
            reservations = one({**requests[0], "InstanceIds": ids})
        except Exception:  # noqa: BLE001 - e.g. one id unknown: each request on its own
            results: list[Any] = []
            for r in requests:
                try:
                    results.append(one(r))
                except Exception as e:  # noqa: BLE001
                    results.append(e)
            return results
        by_id = {i["InstanceId"]: (res, i) for res in reservations for i in res.get("Instances") or ()}
        return [[{**by_id[i][0], "Instances": [by_id[i][1]]} for i in r.get("InstanceIds") or () if i in by_id]
                for r in requests]

    return Batcher("describe_instances", lambda r: canonical(r, ("InstanceIds",)), execute, **kw)


def terminate_instances_batcher(c: Any, **kw: Any) -> Batcher:
    def execute(requests: list[dict]) -> list[Any]:
        ids = sorted({i for r in requests for i in r["InstanceIds"]})
        try:
            changes = c.ec2.terminate_instances(InstanceIds=ids).get("TerminatingInstances") or []
        except Exception:  # noqa: BLE001 - one bad id fails the call: each request on its own
            results: list[Any] = []
            for r in requests:
                try:
                    results.append(c.ec2.terminate_instances(InstanceIds=r["InstanceIds"]))
                except Exception as e:  # noqa: BLE001
                    results.append(e)
            return results
        return [{"TerminatingInstances": [c for c in changes if c.get("InstanceId") in r["InstanceIds"]]}
                for r in requests]

    return Batcher("terminate_instances", lambda r: "", execute, **kw)
