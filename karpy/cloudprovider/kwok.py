"""The generic KWOK catalog, as upstream's kwok provider (kubernetes-sigs/karpenter kwok/) offers it.

Behaviour learned from kubernetes-sigs/karpenter kwok/cloudprovider/helpers.go,
cloudprovider.go and kwok/apis/v1alpha1:

- 144 sizes ``<c|s|m>-<N>x-<arch>-<os>`` with the catalog's cpu, memory, pods
  and 20Gi ephemeral-storage as capacity;
- labels: arch, os, instance-type and ``karpenter.kwok.sh/instance-size``
  (the vCPU count: the names do not follow the AWS ``family.size`` form),
  ``instance-family`` (the name up to the first ``-`` or ``.``),
  ``instance-cpu`` and ``instance-memory`` (the canonical quantities, e.g.
  ``4`` and ``8Gi``);
- overhead: a fixed kube-reserved of 100m CPU and 10Mi memory per node;
- offerings: exactly the catalog's, zones test-zone-a..d, spot and on-demand,
  all available, at the catalog's synthetic prices (nothing is estimated);
- registration: ``spec.nodeRegistrationDelay`` of the KWOKNodeClass, else 0 s
  (upstream's zero-value default).

The catalog has no regions: any region is accepted and changes nothing, and no
region label is set (upstream's kwok nodes carry none).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ..resources import CPU, EPHEMERAL, MEMORY, PODS, format_units, parse_duration
from .catalog import CatalogProvider, spec
from .types import LABEL_ARCH, LABEL_INSTANCE_TYPE, LABEL_OS, InstanceType, Offering, kubelet_ready_policies

GROUP = "karpenter.kwok.sh"

LABEL_INSTANCE_SIZE = f"{GROUP}/instance-size"
LABEL_INSTANCE_FAMILY = f"{GROUP}/instance-family"
LABEL_INSTANCE_CPU = f"{GROUP}/instance-cpu"
LABEL_INSTANCE_MEMORY = f"{GROUP}/instance-memory"

MIB = 2**20
KUBE_RESERVED = {CPU: 100, MEMORY: 10 * MIB}

# An AWS-style name ("m5.large") gives its size; anything else uses the vCPU count.
_AWS_NAME = re.compile(r"^\w+\.(nano|micro|small|medium|large|\d*xlarge|metal)$")
_FAMILY_DELIM = re.compile(r"[.-]")


def family_of(name: str) -> str:
    parts = _FAMILY_DELIM.split(name, maxsplit=1)
    return parts[0] if len(parts) == 2 else name[:1]


def size_of(name: str, cpu: str) -> str:
    m = _AWS_NAME.match(name)
    return m.group(1) if m else cpu


class KWOKProvider(CatalogProvider):
    name = "kwok"
    group = GROUP
    nodeclass_kind = "KWOKNodeClass"
    default_region = "kwok"
    LABEL_DOMAIN = GROUP
    WELL_KNOWN_LABELS = frozenset({LABEL_INSTANCE_SIZE, LABEL_INSTANCE_FAMILY, LABEL_INSTANCE_CPU, LABEL_INSTANCE_MEMORY})
    # upstream's kwok provider: Ready False or Unknown for 10 minutes
    REPAIR_POLICIES = kubelet_ready_policies(600.0)
    DEFAULT_REGISTRATION_DELAY = 0.0

    def check_region(self, region: str | None) -> str:
        # The kwok catalog is region-independent: every region maps to the one catalog.
        return self.default_region

    def registration_delay(self, nodeclass: Mapping[str, Any] | None) -> float:
        delay = spec(nodeclass).get("nodeRegistrationDelay")
        if delay in (None, ""):
            return self.DEFAULT_REGISTRATION_DELAY
        return parse_duration(delay)

    def _build(self, region: str, params: Any) -> list[InstanceType]:
        out = []
        for size in self.catalog["sizes"]:
            cpu = format_units(CPU, size["vcpu"] * 1000)
            memory = size["memory"] * MIB
            labels = {
                LABEL_ARCH: size["arch"],
                LABEL_OS: size["os"],
                LABEL_INSTANCE_TYPE: size["name"],
                LABEL_INSTANCE_SIZE: size_of(size["name"], cpu),
                LABEL_INSTANCE_FAMILY: family_of(size["name"]),
                LABEL_INSTANCE_CPU: cpu,
                LABEL_INSTANCE_MEMORY: format_units(MEMORY, memory),
            }
            capacity = {
                CPU: size["vcpu"] * 1000,
                MEMORY: memory,
                PODS: size["max_pods"],
                EPHEMERAL: size["ephemeral_storage"] * MIB,
            }
            offerings = [
                Offering(zone=o["zone"], capacity_type=o["capacity_type"], price=o["price"], available=o["available"])
                for o in size["offerings"]
            ]
            out.append(
                InstanceType(
                    name=size["name"], labels=labels, capacity=capacity, overhead=dict(KUBE_RESERVED), offerings=offerings
                )
            )
        return out


provider = KWOKProvider()
