"""The ``karpy controller`` process: Karpenter's controllers against a real API server, in real time.

* the manager's informers list and watch every kind the controllers watch
  (on every replica, so a standby's cache is warm when it takes over);
* leader election on the Lease ``karpenter-leader-election``; only the leader
  reconciles and fires timers -- a standby only keeps its cache current;
* on becoming leader, the cloud's in-memory instances are rebuilt from the
  NodeClaims and Nodes in the API (:func:`~karpy.cloudprovider.simulated.adopt_instances`)
  and Nodes this provider launched that no NodeClaim claims are deleted;
* the real-time loop: fire the clock's due timers, drain the manager, wait on
  the clock's condition (which informer events and new timers notify) until
  the next timer;
* ``/healthz`` and ``/readyz`` (ready once the caches are synced) on the health
  port, ``/metrics`` on the metrics port;
* SIGTERM/SIGINT: stop the loop, release the Lease, stop the informers and
  servers, exit 0. Leadership lost (renewals failing for the renew deadline):
  exit 1, as controller-runtime does.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import uuid
from typing import Any, TextIO

from ..cloudprovider.simulated import SimulatedCloud, SimulatedCloudProvider, adopt_instances
from ..controllers.env import Settings
from ..controllers.operator import Karpenter, build
from ..kube import errors as E
from ..runtime.clock import RealClock
from ..runtime.events import Recorder
from ..runtime.log import Logger
from ..runtime.manager import Manager
from .events import AsyncEvents
from .leader import LeaderElector
from .metrics import Metrics
from .servers import Endpoints, text
from .settings import ControllerSettings

LOOP_WAIT = 0.5  # longest sleep of the loop (seconds): stop requests and leadership changes are seen this fast


class ControllerProcess:
    def __init__(self, settings: ControllerSettings, api: Any, log_stream: TextIO | None = None,
                 identity: str | None = None):
        self.settings = settings
        self.api = api
        self.clock = RealClock()
        self.log = Logger(self.clock, level=settings.log_level, stream=log_stream if log_stream is not None else sys.stdout)
        self.identity = identity or f"{socket.gethostname()}_{uuid.uuid4()}"
        self.stop_event = threading.Event()
        self.leading = threading.Event()
        self.exit_code = 0
        self.mgr = Manager(api, self.clock, strict=False)
        self.mgr.realtime = True
        self.mgr.on_error = self._on_error
        self.mgr.informer_log = lambda message, **kv: self.log.info(message, controller="informer", **kv)
        # Events go through a background writer against a server a round trip away (an in-memory API stores
        # them at once): a reconcile never waits on them, as with client-go's broadcaster
        self.events: AsyncEvents | None = None if hasattr(api, "create_event") else AsyncEvents(api, self.log)
        self.recorder = Recorder(self.events if self.events is not None else api, self.clock)
        self.cloud = SimulatedCloud(api, self.clock)
        kinds = frozenset({"KWOKNodeClass"}) if settings.cloud_provider == "kwok" else None
        self.provider: Any = SimulatedCloudProvider(self.cloud, self._nodeclass, self.clock, self.recorder, kinds=kinds,
                                                    name=settings.cloud_provider)
        self.provider.reserved_capacity = bool(settings.feature_gates.get("ReservedCapacity", True))
        self.provider.gates = dict(settings.feature_gates)
        if settings.reservations:
            self.cloud.set_reservations(settings.reservations)
        provider_controllers: list = []
        self.workers: list = []  # the provider's background threads (the AWS interruption queue)
        if settings.cloud_provider == "aws":
            from ..cloudprovider.ec2.controllers import build_aws

            self.provider, provider_controllers, self.workers = build_aws(settings, api, self.mgr, self.clock,
                                                                          self.recorder, self.log)
        elif settings.cloud_provider == "azure":
            from ..cloudprovider.arm.controllers import build_azure

            self.provider, provider_controllers, self.workers = build_azure(settings, api, self.mgr, self.clock,
                                                                            self.recorder, self.log)
        core = Settings(batch_idle=settings.batch_idle_duration, batch_max=settings.batch_max_duration,
                        feature_gates=dict(settings.feature_gates), min_values_policy=settings.min_values_policy,
                        cluster_name=settings.cluster_name or "karpy")
        self.karpenter: Karpenter = build(self.mgr, api, self.clock, self.provider, core, log=self.log,
                                          recorder=self.recorder)
        for c in provider_controllers:
            self.mgr.add(c)
        self.metrics = Metrics()
        self.metrics.attach(self.mgr, self.log, self.karpenter.env.metrics)
        self.elector: LeaderElector | None = None
        if settings.leader_elect:
            self.elector = LeaderElector(api, settings.namespace, self.identity,
                                         lease_duration=settings.lease_duration,
                                         renew_deadline=settings.renew_deadline,
                                         retry_period=settings.retry_period, log=self.log)
        self.health: Endpoints | None = None
        self.metrics_server: Endpoints | None = None
        self._adopted = False

    def _nodeclass(self, kind: str, name: str) -> dict | None:
        return self.mgr.get(kind, name)

    def _on_error(self, controller: str, key: Any, e: BaseException) -> None:
        self.log.error("Reconciler error", controller=controller, key=str(key), error=str(e))
        if len(self.mgr.errors) > 1000:
            del self.mgr.errors[:500]

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        s = self.settings
        self.health = Endpoints(s.bind_address, s.health_probe_port, {
            "/healthz": lambda: text(200, "ok"),
            "/readyz": lambda: text(200, "ok") if self.mgr.synced.is_set() else text(503, "caches not synced"),
        }).start()
        self.metrics_server = Endpoints(s.bind_address, s.metrics_port, {
            "/metrics": lambda: (200, "text/plain; version=0.0.4; charset=utf-8", self.metrics.text()),
        }).start()
        self.log.info("starting server", controller="controller-runtime.metrics", kind="metrics",
                      addr=f"{s.bind_address}:{self.metrics_server.port}", port=self.metrics_server.port)
        self.log.info("starting server", controller="controller-runtime.health", kind="health probe",
                      addr=f"{s.bind_address}:{self.health.port}", port=self.health.port)
        from .transport import credential_warnings

        for message, values in credential_warnings(getattr(self.api, "config", None)):
            self.log.warn(message, controller="kube-client", **values)
        self.log.info("starting manager", controller="operator", identity=self.identity,
                      **{"cloud-provider": s.cloud_provider, "leader-elect": s.leader_elect, "namespace": s.namespace})
        self.mgr.start()
        if self.elector is not None:
            self.elector.start(self._started_leading, self._lost_leadership)
        else:
            self._started_leading()

    def _started_leading(self) -> None:
        self.leading.set()
        for w in self.workers:
            w.start()
        self._wake()

    def _lost_leadership(self) -> None:
        self.leading.clear()
        self.exit_code = 1
        self.request_stop()

    def request_stop(self) -> None:
        self.stop_event.set()
        self._wake()

    def _wake(self) -> None:
        with self.clock.wakeup:
            self.clock.wakeup.notify_all()

    def adopt(self) -> None:
        """Rebuild the cloud's instances from the cluster; delete Nodes of ours that no NodeClaim claims."""
        if self.settings.cloud_provider in ("aws", "azure"):  # the cloud is the record of its instances
            self._adopted = True
            return
        claims = self.mgr.list("NodeClaim")
        nodes = self.mgr.list("Node")
        orphans = adopt_instances(self.provider, claims, nodes)
        if self.cloud.instances:
            self.log.info("recovered instances from the cluster", controller="cloudprovider",
                          instances=len(self.cloud.instances))
        for name in orphans:
            self.log.info("garbage collecting node with no nodeclaim", controller="nodeclaim.garbagecollection",
                          Node={"name": name})
            try:
                self.api.delete("Node", name)
            except E.NotFound:
                pass
            except E.ApiError as e:
                self.log.error("failed garbage collecting node", controller="nodeclaim.garbagecollection",
                               Node={"name": name}, error=str(e))
        self._adopted = True

    def step(self) -> None:
        """One turn of the loop."""
        if self.leading.is_set() and self.mgr.synced.is_set():
            if not self._adopted:
                self.mgr.pump()
                self.adopt()
            for t in self.clock.pop_due(self.clock.now()):
                try:
                    t.fn()
                except Exception as e:  # noqa: BLE001 - a timer's failure must not stop the process
                    self.log.error("timer failed", controller="runtime", timer=t.label, error=str(e))
            self.mgr.drain()
        else:
            self.mgr.pump()  # a standby keeps its cache (and cluster state) current; it does not reconcile

    def wait(self) -> None:
        leading = self.leading.is_set() and self._adopted
        timeout = LOOP_WAIT
        if leading:
            nt = self.clock.next_time()
            if nt is not None:
                timeout = min(LOOP_WAIT, self.clock.wall_seconds_until(nt))
        with self.clock.wakeup:
            busy = self.mgr.busy() if leading else bool(self.mgr._feed)
            if not busy and not self.stop_event.is_set() and timeout > 0:
                self.clock.wakeup.wait(timeout)

    def run(self) -> int:
        """Run until stopped; the exit status."""
        try:
            while not self.stop_event.is_set():
                self.step()
                self.wait()
        finally:
            self.shutdown()
        return self.exit_code

    def shutdown(self) -> None:
        self.log.info("stopping", controller="operator", identity=self.identity)
        if self.elector is not None:
            self.elector.stop()
            if self.exit_code == 0:
                self.elector.release()
        self.leading.clear()
        for w in self.workers:
            w.stop()
        self.mgr.stop()
        for srv in (self.health, self.metrics_server):
            if srv is not None:
                srv.stop()
        if self.events is not None:
            self.events.stop()
        close = getattr(self.api, "close", None)
        if close is not None:
            close()


def in_cluster_identity() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()
