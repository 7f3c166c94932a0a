"""The simulated cluster of ``karpy sandbox``, on a clock that runs in real time.

:class:`Sandbox` builds the same wiring ``karpy simulate`` uses
(:class:`~karpy.simulator.sim.Simulation`: the in-memory API server, the
manager, the world's controllers and, unless ``karpenter=False``, Karpenter's),
but with a :class:`~karpy.runtime.clock.RealClock` (``speed`` times real time),
watch history kept (clients resume watches from a resourceVersion), and
reconcile errors logged rather than raised.

One thread runs the world: it fires the clock's timers as they come due and
drains the manager's queue, then sleeps until the next timer or until a
change arrives (the manager, in real-time mode, wakes the clock's condition
whenever an API write feeds it). That thread and every HTTP request hold
:attr:`Sandbox.lock` while they touch the store or the manager, so the
single-threaded controllers never run concurrently with a request.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from typing import Any, Iterable, TextIO

from ..kube import errors as E
from ..kube.registry import is_namespaced
from ..runtime.clock import RealClock
from ..runtime.log import BUFFER_BYTES, LogBuffer, Logger
from ..simulator.sim import Simulation, _clean
from .admission import (ServiceIPs, admit_pod, allocate_service, default_secret, default_service,
                        kubernetes_service, namespace_objects)
from . import karpenter as K
from .crds import installed_crds
from .rest import SYSTEM_NAMESPACES
from .status import WorkloadStatus

SYSTEM_PRIORITY_CLASSES = (
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "system-node-critical"},
     "value": 2000001000, "preemptionPolicy": "PreemptLowerPriority",
     "description": "Used for system critical pods that must not be moved from their current node."},
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "system-cluster-critical"},
     "value": 2000000000, "preemptionPolicy": "PreemptLowerPriority",
     "description": "Used for system critical pods that must run in the cluster, but can be moved to another node "
                    "if necessary."},
)
MAX_WAIT = 0.5  # wall seconds the loop sleeps at most (it wakes earlier for timers and changes)
HISTORY_BYTES = 64 * 1024 * 1024  # the watch history of one kind holds at most this much (and its count)
BURST_REPLICAS = 500  # pods a ReplicaSet creates per sync at most (the ReplicaSet controller's burstReplicas)
RECONCILES_PER_STEP = 1000  # reconciles the world runs before it lets requests have the lock again


class Sandbox:
    def __init__(self, documents: Iterable[Any] = (), *, region: str | None = None, speed: float = 1.0,
                 karpenter: bool = True, log_level: str = "info", log_stream: TextIO | None = None,
                 watch_history: int | None = None, err: TextIO | None = None, ca_pem: str | None = None,
                 karpenter_namespace: str = K.DEFAULT_NAMESPACE, log_buffer_bytes: int = BUFFER_BYTES):
        self.err = err or sys.stderr
        self.clock = RealClock(speed=speed)
        self.lock = threading.RLock()
        # Karpenter's lines go to stdout and, for kubectl logs, to the buffer its pod's log is read from
        self.log_buffer = LogBuffer(log_buffer_bytes)
        self.log = Logger(self.clock, level=log_level, stream=log_stream, buffer=self.log_buffer)
        self.karpenter_namespace = karpenter_namespace if karpenter else None
        docs = list(documents)
        scenario = [d for d in docs if _obj(d).get("kind") == "Scenario"]
        if scenario:
            print("karpy sandbox: a Scenario is for karpy simulate; the sandbox ignores it", file=self.err)
        self.sim = Simulation([], region=region, clock=self.clock, history=True, karpenter=karpenter, strict=False,
                              log=self.log)
        self.api = self.sim.api
        self.api.pod_admission = admit_pod
        self.ca_pem = ca_pem
        self.service_ips = ServiceIPs()
        if watch_history is not None:
            self.api.history_limit = int(watch_history)
        self.api.history_bytes = HISTORY_BYTES
        self.mgr = self.sim.mgr
        self.sim.world.workloads.keep_history = True
        self.mgr.realtime = True
        self.mgr.on_error = self._on_error
        self.sim.world.workloads.burst_replicas = BURST_REPLICAS
        watched = set(self.mgr.watched_kinds())
        self.status = WorkloadStatus(self.mgr, self.api, self.clock)
        self.mgr.add(self.status)
        self.mgr.add(K.ControlPlaneKubelet(self.mgr, self.api, self.clock))
        # the manager subscribed to the kinds watched when it started; this controller adds none
        assert set(self.mgr.watched_kinds()) <= watched, set(self.mgr.watched_kinds()) - watched
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.loop_errors = 0
        with self.lock:
            self._install()
            for d in docs:
                obj = _obj(d)
                if obj.get("kind") == "Scenario":
                    continue
                self.apply(obj)

    # --- contents -------------------------------------------------------------------------------------
    def _install(self) -> None:
        for ns in SYSTEM_NAMESPACES:
            self._namespace(ns)
        for crd in installed_crds():
            if self.api.try_get("CustomResourceDefinition", crd["metadata"]["name"]) is None:
                self.api.create(crd)
        for pc in SYSTEM_PRIORITY_CLASSES:  # every cluster has these two
            if self.api.try_get("PriorityClass", pc["metadata"]["name"]) is None:
                self.api.create(dict(pc))
        if self.karpenter_namespace is not None:
            self._namespace(self.karpenter_namespace)
            for o in K.karpenter_objects(self.karpenter_namespace):
                if self.api.try_get(o["kind"], o["metadata"]["name"], self.karpenter_namespace) is None:
                    self.sim.apply(o)

    def log_source(self, pod: dict, container: str) -> LogBuffer | None:
        """The buffer a container's log is read from: Karpenter's lines for its pod's container."""
        if self.karpenter_namespace is not None and container == K.CONTAINER and \
                K.is_karpenter_pod(pod, self.karpenter_namespace):
            return self.log_buffer
        return None

    def _namespace(self, name: str, obj: dict | None = None) -> None:
        """A namespace (as given, or a plain one) and what kube-controller-manager puts in each."""
        if self.api.try_get("Namespace", name) is None:
            ns = _clean(obj) if obj is not None else {"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": name}}
            ns["metadata"] = {**ns.get("metadata", {}),
                              "labels": {**(ns.get("metadata", {}).get("labels") or {}),
                                         "kubernetes.io/metadata.name": name}}
            ns["spec"] = {"finalizers": ["kubernetes"], **(ns.get("spec") or {})}
            ns["status"] = {"phase": "Active"}
            self.api.create(ns)
        for o in namespace_objects(name, self.ca_pem):
            if self.api.try_get(o["kind"], o["metadata"]["name"], name) is None:
                self.api.create(o)

    def serve_on(self, port: int) -> None:
        """The Service ``default/kubernetes`` in front of the API server, once it listens on ``port``."""
        with self.lock:
            if self.api.try_get("Service", "kubernetes", "default") is None:
                self.api.create(kubernetes_service(port))
            self.api.start_watch_cache()

    def apply(self, obj: dict) -> None:
        """Create or replace an object (as ``kubectl apply`` leaves it), creating its namespace if missing."""
        with self.lock:
            kind = obj.get("kind", "")
            if is_namespaced(kind):
                self._namespace((obj.get("metadata") or {}).get("namespace") or "default")
            if kind == "Namespace":
                self._namespace((obj.get("metadata") or {}).get("name") or "", obj)
                return
            if kind == "Secret":
                obj = default_secret(obj)
            elif kind == "Service":
                obj = allocate_service(default_service(obj), self.service_ips)
            self.sim.apply(obj)

    # --- the loop -----------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="karpy-sandbox-world", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self.clock.wakeup:
            self.clock.wakeup.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def step(self) -> None:
        """Fire the timers that are due and run everything they and the API's changes queued."""
        with self.lock:
            now = self.clock.now()
            self._drain()
            for t in self.clock.pop_due(now):
                try:
                    t.fn()
                except Exception as e:  # noqa: BLE001 - one failing timer must not stop the world
                    self._report(f"timer {t.label or t.fn!r}", e)
                self._drain()

    def _drain(self) -> None:
        try:
            self.mgr.drain(RECONCILES_PER_STEP)
        except Exception as e:  # noqa: BLE001 - a failing handler must not stop the world
            self._report("manager", e)

    def _loop(self) -> None:
        clock = self.clock
        while not self._stop.is_set():
            self.step()
            if self.mgr.busy():
                time.sleep(0.001)  # more to do: requests waiting for the lock get it first
                continue
            with clock.wakeup:
                if self._stop.is_set():
                    continue
                nt = clock.next_time()
                wait = MAX_WAIT if nt is None else min(MAX_WAIT, clock.wall_seconds_until(nt))
                if wait > 0:
                    clock.wakeup.wait(wait)

    # --- errors -------------------------------------------------------------------------------------
    def _on_error(self, controller: str, key: Any, e: BaseException) -> None:
        if isinstance(e, E.ApiError) and e.code in (404, 409, 410, 429):
            return
        self.log.error("Reconciler error", controller=controller, key=str(key), error=str(e))

    def _report(self, where: str, e: BaseException) -> None:
        self.loop_errors += 1
        print(f"karpy sandbox: error in {where}: {type(e).__name__}: {e}", file=self.err)
        traceback.print_exc(file=self.err)


def _obj(d: Any) -> dict:
    return d.obj if hasattr(d, "obj") else d
