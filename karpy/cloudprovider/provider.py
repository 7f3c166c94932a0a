"""The CloudProvider interface Karpenter's controllers call, as upstream's ``cloudprovider.CloudProvider``.

A cloud provider lists the instance types a NodePool may launch, launches a
NodeClaim (returning it with what the cloud resolved: provider ID, instance
type, zone, capacity type, capacity and allocatable), deletes, gets and lists
instances, and says whether a NodeClaim drifted from its NodeClass.
Implementations: :mod:`karpy.cloudprovider.simulated` (``kwok`` and
``simulated``); the Azure and AWS providers implement the same interface.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from .types import InstanceType


class CloudProviderError(Exception):
    pass


class InsufficientCapacityError(CloudProviderError):
    """No offering the NodeClaim allows could be launched; the NodeClaim is deleted and retried."""


class NodeClaimNotFoundError(CloudProviderError):
    """The instance does not exist (any more)."""


class NodeClassNotReadyError(CloudProviderError):
    """The NodeClass the NodeClaim names is not ready."""


class CloudProvider(Protocol):
    name: str

    def get_instance_types(self, nodepool: dict, nodeclass: dict | None) -> list[InstanceType]:
        """Every instance type the NodePool's NodeClass offers, offerings marked available or not."""

    def create(self, nodeclaim: dict) -> dict:
        """Launch; the returned NodeClaim carries labels, annotations and status the cloud resolved."""

    def delete(self, nodeclaim: dict) -> None:
        """Terminate; NodeClaimNotFoundError once the instance is gone."""

    def get(self, provider_id: str) -> dict:
        """The instance as a NodeClaim; NodeClaimNotFoundError when it does not exist."""

    def list(self) -> list[dict]:
        ...

    def is_drifted(self, nodeclaim: dict, nodeclass: dict | None) -> str | None:
        """A drift reason when the instance no longer matches its NodeClass."""

    def well_known_labels(self, nodepool: dict) -> frozenset[str]:
        """Labels the provider sets at launch (a pod may require them though the NodePool does not name them)."""

    def subscribe_interruptions(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when interruption messages are waiting (see :meth:`interruption_messages`)."""

    def interruption_messages(self) -> list[dict[str, Any]]:
        """Interruption notices received since the last call: ``{"kind", "providerID", ...}``."""
