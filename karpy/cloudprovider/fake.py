"""Upstream's benchmark instance types, for benchmarks and tests.

kubernetes-sigs/karpenter pkg/cloudprovider/fake/instancetype.go builds
``fake-it-0`` .. ``fake-it-<n-1>`` for its scheduling benchmarks: type ``i`` has
i+1 vCPUs, 2(i+1) GiB of memory and 10(i+1) pods, amd64, with a fixed
kube-reserved of 100m CPU and 10Mi memory. Every offering costs
0.1 x vCPUs + 0.1 x memory bytes / 1e9 per hour (0.3147483648 per vCPU), spot
and on-demand alike: spot in test-zone-1 and test-zone-2, on-demand in
test-zone-1..3.

Labels: the well-known ones plus the fake provider's ``integer`` (the vCPU
count), ``size`` ("large" when the type has more than 4 vCPUs and more than
8Gi, else "small") and ``special`` ("optional", large types only).
Upstream's fake types allow the operating systems linux, windows and darwin at
once; karpy's InstanceType carries single-valued labels, so these are linux.
"""

from __future__ import annotations

from ..resources import CPU, MEMORY, PODS
from .types import (
    CAPACITY_ON_DEMAND,
    CAPACITY_SPOT,
    LABEL_ARCH,
    LABEL_INSTANCE_TYPE,
    LABEL_OS,
    InstanceType,
    Offering,
)

LABEL_INSTANCE_SIZE = "size"
LABEL_EXOTIC = "special"
LABEL_INTEGER = "integer"
WELL_KNOWN_LABELS = frozenset({LABEL_INSTANCE_SIZE, LABEL_EXOTIC, LABEL_INTEGER})

GIB = 2**30
MIB = 2**20

_OFFERINGS = (
    (CAPACITY_SPOT, "test-zone-1"),
    (CAPACITY_SPOT, "test-zone-2"),
    (CAPACITY_ON_DEMAND, "test-zone-1"),
    (CAPACITY_ON_DEMAND, "test-zone-2"),
    (CAPACITY_ON_DEMAND, "test-zone-3"),
)


def price_from_resources(cpu_millis: int, memory_bytes: int) -> float:
    """Upstream's fake price: 0.1 per vCPU plus 0.1 per GB (10^9 bytes) of memory, in its float order."""
    return 0.0 + 0.1 * (cpu_millis / 1000) + 0.1 * float(memory_bytes) / 1e9


def fake_instance_type(name: str, cpu_millis: int, memory_bytes: int, pods: int) -> InstanceType:
    large = cpu_millis > 4000 and memory_bytes > 8 * GIB
    labels = {
        LABEL_INSTANCE_TYPE: name,
        LABEL_ARCH: "amd64",
        LABEL_OS: "linux",
        LABEL_INTEGER: str(cpu_millis // 1000),
        LABEL_INSTANCE_SIZE: "large" if large else "small",
    }
    if large:
        labels[LABEL_EXOTIC] = "optional"
    price = price_from_resources(cpu_millis, memory_bytes)
    return InstanceType(
        name=name,
        labels=labels,
        capacity={CPU: cpu_millis, MEMORY: memory_bytes, PODS: pods},
        overhead={CPU: 100, MEMORY: 10 * MIB},
        offerings=[Offering(zone=z, capacity_type=ct, price=price) for ct, z in _OFFERINGS],
    )


def fake_instance_types(n: int) -> list[InstanceType]:
    """``fake-it-0`` .. ``fake-it-<n-1>``: i+1 vCPU, 2(i+1) GiB, 10(i+1) pods."""
    return [fake_instance_type(f"fake-it-{i}", (i + 1) * 1000, 2 * (i + 1) * GIB, 10 * (i + 1)) for i in range(n)]
