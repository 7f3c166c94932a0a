"""Wire Karpenter's controllers onto a manager (upstream's operator), for any API and cloud provider."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..runtime.events import Recorder
from ..runtime.log import Logger
from ..runtime.manager import Manager
from ..state.cluster import Cluster
from .capacitybuffer import CapacityBufferController
from .disruption import Disruption
from .env import Env, Settings
from .expiration import Expiration
from .garbagecollection import GarbageCollection
from .health import NodeHealth
from .interruption import Interruption
from .lifecycle import Lifecycle
from .nodeclaim_disruption import NodeClaimDisruption, PodEvents
from .nodeoverlay import NodeOverlayController
from .nodepool import NodePoolStatus
from .provisioning import NodeTrigger, PodTrigger, Provisioner
from .static import StaticDeprovisioning, StaticProvisioning
from .termination import Termination


@dataclass
class Karpenter:
    env: Env
    provisioner: Provisioner
    disruption: Disruption

    @property
    def cluster(self) -> Cluster:
        return self.env.cluster

    def busy(self) -> bool:
        """Work in flight that a simulation must not call settled: a disruption being validated or
        orchestrated, or a NodeClaim being deleted."""
        if self.disruption.busy():
            return True
        return bool(self.cluster.deleting_claims)

    def quiet_until(self) -> float:
        """Until when Karpenter's periodic passes would find nothing new if the cluster stays as it is
        (see :meth:`Disruption.quiet_until`)."""
        return self.disruption.quiet_until()


def build(mgr: Manager, api: Any, clock: Any, cloud: Any, settings: Settings | None = None,
          log: Logger | None = None, recorder: Recorder | None = None) -> Karpenter:
    """Register the cluster state and every Karpenter controller on ``mgr``."""
    cluster = Cluster(clock)
    cluster.setup(mgr)  # first, so every controller's handler sees the state already updated
    env = Env(api=api, mgr=mgr, cluster=cluster, cloud=cloud, clock=clock,
              recorder=recorder or Recorder(api, clock), log=log or Logger(clock), settings=settings or Settings())
    cluster.ignore_dra = env.settings.ignore_dra_requests
    provisioner = Provisioner(env)
    disruption = Disruption(env, provisioner)
    # the cloudprovider gauges (karpy.metrics), read at scrape time through the disruption controller's cache
    env.metrics.reserved_capacity = env.settings.gate("ReservedCapacity")
    def nodepool_instance_types() -> list:
        out = []
        for name in list(cluster.nodepools):
            try:
                out.append(list(disruption.instance_types(name).values()))
            except Exception as e:  # noqa: BLE001 -- as upstream: one NodePool's error keeps the others' series
                env.log.debug("getting instance types for metrics", controller="cloudprovider.metrics",
                              NodePool={"name": name}, error=str(e))
        return out

    env.metrics.instance_types = nodepool_instance_types
    env.metrics.cluster_state = lambda: (sum(1 for sn in list(cluster.nodes.values()) if sn.node is not None or sn.launched()),
                                         cluster.synced())
    for c in (provisioner, PodTrigger(env, provisioner), NodeTrigger(env, provisioner), Lifecycle(env),
              Termination(env), NodeClaimDisruption(env), PodEvents(env), Expiration(env), Interruption(env),
              NodePoolStatus(env), GarbageCollection(env), disruption, disruption.orchestrator):
        mgr.add(c)
    if env.settings.gate("NodeRepair"):  # node repair by the cloud provider's repair policies
        mgr.add(NodeHealth(env))
    if env.settings.gate("NodeOverlay"):  # NodeOverlays change the instance types' prices and capacities
        mgr.add(NodeOverlayController(env))
    if env.settings.gate("CapacityBuffer"):  # CapacityBuffers' status, and their virtual pods in provisioning
        mgr.add(CapacityBufferController(env, provisioner))
    if env.settings.gate("StaticCapacity"):  # static NodePools (spec.replicas), as upstream's gate
        mgr.add(StaticProvisioning(env, provisioner))
        mgr.add(StaticDeprovisioning(env))
    return Karpenter(env, provisioner, disruption)
