"""What every Karpenter controller is handed: the API, the cache, the cloud, the clock, settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..kube.registry import BY_KIND, NODECLASS_KINDS
from ..metrics import KarpenterMetrics
from ..runtime.events import Recorder
from ..runtime.log import Logger
from ..runtime.manager import Manager
from ..state.cluster import Cluster

# Upstream's defaults for the operator settings karpy models.
DEFAULT_FEATURE_GATES = {
    "ReservedCapacity": True,
    "SpotToSpotConsolidation": False,
    "NodeRepair": False,
    "NodeOverlay": False,
    "StaticCapacity": False,
    "CapacityBuffer": False,
    "NodeClassCEL": False,  # aws provider: CEL expressions in EC2NodeClass kubelet fields
    # karpy's own (docs/feature-gates.md): off by default, so decisions are upstream's
    "CostRefinement": False,
    "ZonePinning": False,
    "ConsolidationOptimizer": False,
}
# the gates that are karpy's own: with any of them on, `karpy simulate` also runs upstream's decisions
KARPY_GATES = ("CostRefinement", "ZonePinning", "ConsolidationOptimizer")


@dataclass
class Settings:
    batch_idle: float = 1.0
    batch_max: float = 10.0
    feature_gates: dict[str, bool] = field(default_factory=lambda: dict(DEFAULT_FEATURE_GATES))
    min_values_policy: str = "Strict"
    cluster_name: str = "karpy"
    preference_policy: str = "Respect"  # Ignore: the scheduler leaves every scheduling preference out
    ignore_dra_requests: bool = True  # upstream's IgnoreDRARequests: pods asking for devices are not scheduled
    ignore_dra_requests: bool = True  # upstream's IgnoreDRARequests: pods asking for devices are not scheduled

    @property
    def min_values_best_effort(self) -> bool:
        return self.min_values_policy == "BestEffort"

    @property
    def respect_preferences(self) -> bool:
        return self.preference_policy != "Ignore"

    def gate(self, name: str) -> bool:
        return bool(self.feature_gates.get(name, DEFAULT_FEATURE_GATES.get(name, False)))


@dataclass
class Env:
    api: Any  # KubeAPI
    mgr: Manager
    cluster: Cluster
    cloud: Any  # CloudProvider
    clock: Any
    recorder: Recorder
    log: Logger
    settings: Settings
    metrics: KarpenterMetrics = field(default_factory=KarpenterMetrics)  # what /metrics serves (karpy.metrics)

    def now(self) -> float:
        return self.clock.now()

    def manages(self, claim: dict | None) -> bool:
        """Whether this Karpenter manages the NodeClaim (upstream's ``nodeclaimutils.IsManaged``): its
        ``nodeClassRef`` names a NodeClass group and kind the cloud provider supports. A NodeClaim of another
        Karpenter (another provider's NodeClass) is left alone by expiration, drift and consolidation."""
        ref = ((claim or {}).get("spec") or {}).get("nodeClassRef") or {}
        if (str(ref.get("group") or ""), str(ref.get("kind") or "")) not in NODECLASS_GROUP_KINDS:
            return False
        serves = getattr(self.cloud, "serves", None)  # the kinds this provider launches (an EC2 one: EC2NodeClass)
        return serves is None or bool(serves(ref))


# the (group, kind) of every NodeClass karpy knows
NODECLASS_GROUP_KINDS = frozenset((BY_KIND[k].group, k) for k in NODECLASS_KINDS)
