"""Dynamic Resource Allocation (DRA): which pods ask for devices, and what Karpenter does with them.

A pod asks for devices through ``spec.resourceClaims`` (ResourceClaims or ResourceClaimTemplates of
``resource.k8s.io``) and its containers' or init containers' ``resources.claims``. Upstream Karpenter v1.14
runs with ``IgnoreDRARequests`` on by default (``--ignore-dra-requests`` / ``IGNORE_DRA_REQUESTS``, a Scenario's
``spec.settings.ignoreDRARequests``): such a pod is not scheduled at all. The scheduler answers it with
:data:`DRA_ERROR` at once, without relaxing its preferences (the refusal is permanent while the setting is
on), no NodeClaim is launched for it, the provisioner publishes the error on the pod and logs that it skips
it, and a DaemonSet whose pods ask for devices adds no overhead to the nodes Karpenter plans. A node whose
pods ask for devices is not consolidated: its pods cannot be rescheduled in the simulation.

With the setting off, upstream allocates devices from ResourceSlices in its simulation; karpy does not
model that allocation: pods are then scheduled on their CPU, memory and other requests alone, and DaemonSet
pods asking for devices count towards nodes' overhead as any other.
"""

from __future__ import annotations

from typing import Mapping

# upstream's DRAError text (pkg/controllers/provisioning/scheduling/scheduler.go)
DRA_ERROR = "pod has Dynamic Resource Allocation requirements that are not yet supported by Karpenter"
# what upstream logs (at info, not as an error) for such a pod
DRA_SKIP_LOG = "skipping pod with Dynamic Resource Allocation requirements, not yet supported by Karpenter"


def has_dra_requirements(spec: Mapping) -> bool:
    """Whether a pod spec references any ResourceClaim: in ``spec.resourceClaims`` or in a container's or init
    container's ``resources.claims`` (upstream's HasDRARequirements)."""
    if spec.get("resourceClaims"):
        return True
    for field in ("initContainers", "containers"):
        for c in spec.get(field) or ():
            if isinstance(c, Mapping) and ((c.get("resources") or {}).get("claims")):
                return True
    return False
