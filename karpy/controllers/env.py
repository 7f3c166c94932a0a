"""What every Karpenter controller is handed: the API, the cache, the cloud, the clock, settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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

    def now(self) -> float:
        return self.clock.now()
