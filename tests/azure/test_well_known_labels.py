"""Upstream's "should support individual instance type labels" (Azure instance-type suite, Provider List > Basic):
one pod per well-known label, its nodeSelector on that label's value, is scheduled by karpy's engine against
the instance types karpy's Azure provider reads from the fake ARM's resource SKUs (through the real SDK), and
launched by that provider. The node carries the selected value (in the NodeClaim's labels and, where the kubelet
may set it, in the VM's custom data), and the pod fits the node it asked for; deprecated keys resolve to their
current label and are not put on the node. All pods at once, and each pod alone."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from karpy.cloudprovider.arm.bootstrap import parse_custom_data
from karpy.provisioning.templates import build_template
from karpy.scheduling.scheduler import Scheduler
from tests.helpers import existing_node, pod

from .conftest import make_provider, settings_env
from .fakearm import NODE_RG, FakeARM

A100 = "Standard_NC24ads_A100_v4"
NODECLASS = {"apiVersion": "karpenter.azure.com/v1beta1", "kind": "AKSNodeClass", "metadata": {"name": "default"},
             "spec": {"imageFamily": "Ubuntu2204"}}
FIPS_NODECLASS = {**NODECLASS, "spec": {"imageFamily": "AzureLinux", "fipsMode": "FIPS"}}


@dataclass(frozen=True, eq=False)
class Entry:
    label: str
    value: str
    on_node: bool = True  # False: a deprecated key, resolved to its current label and not written on the node
    in_kubelet: bool = True  # the kubelet's --node-labels carry it (labels of kubernetes.io/k8s.io it may not set do not)
    nodepool_requirement: bool = False  # the NodePool requires label=value (labels no provider defines)
    nodeclass: dict | None = None

    @property
    def id(self) -> str:
        return f"{self.label}={self.value}"


ENTRIES = [
    # well known
    Entry("topology.kubernetes.io/region", "eastus"),
    Entry("karpenter.sh/nodepool", "default"),
    Entry("topology.kubernetes.io/zone", "eastus-1"),
    Entry("node.kubernetes.io/instance-type", A100),
    Entry("kubernetes.io/os", "linux"),
    Entry("kubernetes.io/arch", "amd64"),
    Entry("karpenter.sh/capacity-type", "on-demand"),
    Entry("karpenter.azure.com/placement-scope", "zonal"),
    # well known to AKS: the A100 SKU below, with upstream's fake capabilities
    Entry("karpenter.azure.com/sku-name", A100),
    Entry("karpenter.azure.com/sku-family", "N"),
    Entry("karpenter.azure.com/sku-series", "NCads_v4"),
    Entry("karpenter.azure.com/sku-version", "4"),
    Entry("karpenter.azure.com/sku-storage-ephemeralos-maxsize", "274"),
    Entry("karpenter.azure.com/sku-networking-accelerated", "true"),
    Entry("karpenter.azure.com/sku-storage-premium-capable", "true"),
    Entry("karpenter.azure.com/sku-storage-ultra-ssd", "true"),
    Entry("karpenter.azure.com/sku-gpu-name", "A100"),
    Entry("karpenter.azure.com/sku-gpu-manufacturer", "nvidia"),
    Entry("karpenter.azure.com/sku-gpu-count", "1"),
    Entry("karpenter.azure.com/sku-cpu", "24"),
    Entry("karpenter.azure.com/sku-memory", "225280"),
    # AKS domain
    Entry("kubernetes.azure.com/sku-cpu", "24"),
    Entry("kubernetes.azure.com/sku-memory", "225280"),
    Entry("kubernetes.azure.com/mode", "user"),
    Entry("kubernetes.azure.com/mode", "system"),
    Entry("kubernetes.azure.com/scalesetpriority", "regular"),
    Entry("kubernetes.azure.com/scalesetpriority", "spot"),
    Entry("kubernetes.azure.com/priority", "regular"),
    Entry("kubernetes.azure.com/priority", "spot"),
    Entry("kubernetes.azure.com/os-sku", "Ubuntu"),
    Entry("kubernetes.azure.com/fips_enabled", "true", nodeclass=FIPS_NODECLASS),
    # deprecated keys
    Entry("failure-domain.beta.kubernetes.io/region", "eastus", on_node=False),
    Entry("failure-domain.beta.kubernetes.io/zone", "eastus-1", on_node=False),
    Entry("beta.kubernetes.io/arch", "amd64", on_node=False),
    Entry("beta.kubernetes.io/os", "linux", on_node=False),
    Entry("beta.kubernetes.io/instance-type", A100, on_node=False),
    Entry("topology.disk.csi.azure.com/zone", "eastus-1", on_node=False),
    # the cluster label: the node resource group
    Entry("kubernetes.azure.com/cluster", NODE_RG),
    # labels of the kubernetes.io and k8s.io domains a NodePool may now set: on the node, but only those of the
    # kubelet's own namespaces in its --node-labels
    Entry("kubernetes.io/custom-label", "custom-value", in_kubelet=False, nodepool_requirement=True),
    Entry("k8s.io/custom-label", "custom-value", in_kubelet=False, nodepool_requirement=True),
    Entry("kubelet.kubernetes.io/custom-label", "custom-value", nodepool_requirement=True),
]
# upstream's "node.kubernetes.io/windows-build" entry is left out: no Azure size defines it, so karpy leaves the pod
# pending, where upstream's test harness binds it to a node that lacks the label (see docs/conformance.md)
CURRENT = {"failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
           "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
           "beta.kubernetes.io/arch": "kubernetes.io/arch", "beta.kubernetes.io/os": "kubernetes.io/os",
           "beta.kubernetes.io/instance-type": "node.kubernetes.io/instance-type",
           "topology.disk.csi.azure.com/zone": "topology.kubernetes.io/zone"}


def a100_like_upstreams_fake(skus: list[dict]) -> None:
    """Give the fake's Standard_NC24ads_A100_v4 the capabilities of upstream's fake SKU of that name: an ephemeral
    OS disk on the 256 GiB cache disk (NVMe not a placement), UltraSSD in its zones, Hyper-V Gen2 only."""
    a100 = next(s for s in skus if s["name"] == A100)
    caps = {c["name"]: c for c in a100["capabilities"]}
    for k, v in {"EphemeralOSDiskSupported": "True", "SupportedEphemeralOSDiskPlacements": "ResourceDisk,CacheDisk",
                 "CachedDiskBytes": "274877906944", "MaxResourceVolumeMB": "65536", "NvmeDiskSizeInMiB": "915527",
                 "HyperVGenerations": "V2", "GPUs": "1", "UltraSSDAvailable": "True"}.items():
        if k in caps:
            caps[k]["value"] = v
        else:
            a100["capabilities"].append({"name": k, "value": v})
    li = a100["locationInfo"][0]
    li["zoneDetails"] = [{"name": [z], "capabilities": [{"name": "UltraSSDAvailable", "value": "True"}]}
                         for z in li["zones"]]


def nodepool(entries: list[Entry]) -> dict:
    reqs = [{"key": e.label, "operator": "In", "values": [e.value]} for e in entries if e.nodepool_requirement]
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default", "uid": "np-uid"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass",
                                                            "name": "default"}, "requirements": reqs}}}}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One fake ARM and provider for the module (every test launches VMs of its own names)."""
    fake = FakeARM()
    a100_like_upstreams_fake(fake.skus)
    fake.start()
    nodeclass = {"obj": NODECLASS}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in settings_env(fake, tmp_path_factory.mktemp("azure")).items():
            mp.setenv(k, v)
        p, _ = make_provider(lambda kind, name: nodeclass["obj"])
        p.nodeclass = nodeclass
        try:
            yield p
        finally:
            p.close()
            fake.stop()


@pytest.fixture
def azure(shared):
    shared.nodeclass["obj"] = NODECLASS
    return shared


_names = itertools.count()


def provision(provider, entries: list[Entry]) -> dict[Entry, tuple[dict, dict]]:
    """Schedule one pod per entry in one batch and launch the NodeClaims: entry -> (NodeClaim labels, custom data
    variables of its VM)."""
    np = nodepool(entries)
    nc = provider.nodeclass["obj"]
    tpl = build_template(np, provider.get_instance_types(np, nc), [], {}, provider.well_known_labels(np))
    pods = {e: pod(f"p{i}", cpu="100m", node_selector={e.label: e.value}) for i, e in enumerate(entries)}
    results = Scheduler([tpl], []).solve(list(pods.values()))
    assert not results.errors, results.errors
    launched: dict[int, tuple[dict, dict]] = {}
    out = {}
    for claim in results.new_nodeclaims:
        reqs = [r for r in claim.requirements.to_node_selector() if r["key"] != "kubernetes.io/hostname"]
        obj = {"metadata": {"name": f"default-{next(_names):05d}", "labels": {**claim.template.labels,
                                                                   "karpenter.sh/nodepool": "default"}},
               "spec": {"nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                        "requirements": reqs}}
        created = provider.create(obj)
        vm = provider.c.compute.virtual_machines.get(provider.s.node_resource_group,
                                                     created["status"]["providerID"].rsplit("/", 1)[-1])
        launched[id(claim)] = (created, parse_custom_data(vm.os_profile.custom_data))
        for p in claim.pods:
            e = next(e for e, q in pods.items() if q.key == p.key)
            out[e] = launched[id(claim)]
    assert set(out) == set(entries), "every pod has a NodeClaim"
    return out


def check(e: Entry, created: dict, boot: dict) -> None:
    labels = created["metadata"]["labels"]
    kubelet = dict(kv.split("=", 1) for kv in boot["KUBELET_NODE_LABELS"].split(",") if kv)
    if e.on_node:
        assert labels.get(e.label) == e.value, (e.id, labels.get(e.label))
    else:
        assert e.label not in labels, e.id
        assert labels[CURRENT[e.label]] == e.value, e.id  # the current key carries the value
    if e.on_node and e.in_kubelet:
        assert kubelet.get(e.label) == e.value, (e.id, kubelet.get(e.label))
    else:
        assert e.label not in kubelet, e.id
    # the pod fits the node it asked for: a second solve binds it there instead of launching another node
    node_labels = {**labels, "kubernetes.io/hostname": "the-node"}
    again = Scheduler([], [existing_node("the-node", labels=node_labels, cpu=4, memory_gib=16)]).solve(
        [pod("again", cpu="100m", node_selector={e.label: e.value})])
    assert not again.errors and not again.new_nodeclaims, e.id


def test_individual_labels_when_all_pods_are_scheduled_at_once(azure):
    entries = [e for e in ENTRIES if e.nodeclass is None and not e.nodepool_requirement]
    launched = provision(azure, entries)
    for e in entries:
        check(e, *launched[e])


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_individual_labels_when_each_pod_is_scheduled_alone(azure, entry):
    if entry.nodeclass is not None:
        azure.nodeclass["obj"] = entry.nodeclass
    (launched,) = provision(azure, [entry]).values()
    check(entry, *launched)
