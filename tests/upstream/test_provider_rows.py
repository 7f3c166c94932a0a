"""Rows of upstream's AWS and Azure provider suites checked against karpy's NodeClass drift hash and the offline
catalogs: a statically drifted NodeClass field drifts the NodeClaims launched from it; a NodeClaim without the
stamped hash never NodeClass-drifts."""

from __future__ import annotations

import copy

import pytest

from test_disruption import NODE_LABELS, aks_class, claim_annotations, disruption_nodepool, ec2_class
from karpy.disruption.drift import NODECLASS_HASH, drift_reason


def _bdm(**ebs) -> list[dict]:
    base = {"volumeSize": "20Gi", "volumeType": "gp3", "encrypted": False, "deleteOnTermination": False}
    base.update(ebs)
    return [{"deviceName": "/dev/xvda", "rootVolume": False, "ebs": base}]


def _drifted(before: dict, after: dict) -> str | None:
    np = disruption_nodepool()
    return drift_reason(np, after, claim_annotations(np, before), NODE_LABELS)


# upstream's base EC2NodeClass carries one block device mapping; each entry changes one static field
_EC2_STATIC = {
    "Context": {"context": "context-2"},
    "InstanceStorePolicy": {"instanceStorePolicy": "RAID0"},
    "AssociatePublicIPAddress": {"associatePublicIPAddress": True},
    "MetadataOptions HTTPEndpoint": {"metadataOptions": {"httpEndpoint": "disabled"}},
    "MetadataOptions HTTPProtocolIPv6": {"metadataOptions": {"httpProtocolIPv6": "enabled"}},
    "MetadataOptions HTTPPutResponseHopLimit": {"metadataOptions": {"httpPutResponseHopLimit": 10}},
    "MetadataOptions HTTPTokens": {"metadataOptions": {"httpTokens": "optional"}},
    "BlockDeviceMapping DeviceName": {"blockDeviceMappings": [dict(_bdm()[0], deviceName="map-device-test-3")]},
    "BlockDeviceMapping RootVolume": {"blockDeviceMappings": [dict(_bdm()[0], rootVolume=True)]},
    "BlockDeviceMapping DeleteOnTermination": {"blockDeviceMappings": _bdm(deleteOnTermination=True)},
    "BlockDeviceMapping Encrypted": {"blockDeviceMappings": _bdm(encrypted=True)},
    "BlockDeviceMapping IOPS": {"blockDeviceMappings": _bdm(iops=10)},
    "BlockDeviceMapping KMSKeyID": {"blockDeviceMappings": _bdm(kmsKeyID="test")},
    "BlockDeviceMapping SnapshotID": {"blockDeviceMappings": _bdm(snapshotID="test")},
    "BlockDeviceMapping Throughput": {"blockDeviceMappings": _bdm(throughput=10)},
    "BlockDeviceMapping VolumeType": {"blockDeviceMappings": _bdm(volumeType="io1")},
}


def _ec2_base() -> dict:
    return ec2_class(blockDeviceMappings=_bdm(), metadataOptions={
        "httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1,
        "httpTokens": "required"})


def _merged(base: dict, change: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in change.items():
        if isinstance(v, dict) and isinstance(out["spec"].get(k), dict):
            out["spec"][k] = {**out["spec"][k], **v}
        else:
            out["spec"][k] = copy.deepcopy(v)
    return out


class TestEC2StaticDrift:
    @pytest.mark.parametrize("field", list(_EC2_STATIC))
    def test_static_field_change_drifts(self, field):
        base = _ec2_base()
        assert _drifted(base, copy.deepcopy(base)) is None  # unchanged: not drifted
        assert _drifted(base, _merged(base, _EC2_STATIC[field])) == "NodeClassDrift"

    def test_no_hash_annotation_never_nodeclass_drifts(self):
        np = disruption_nodepool()
        ann = claim_annotations(np, ec2_class())
        del ann[NODECLASS_HASH]
        changed = ec2_class(tags={"Test Key": "Test Value"})
        assert drift_reason(np, changed, ann, NODE_LABELS) is None
        # the same change with the hash stamped does drift: the annotation is what is compared
        assert drift_reason(np, changed, claim_annotations(np, ec2_class()), NODE_LABELS) == "NodeClassDrift"


class TestAKSStaticDrift:
    def test_subnet_change_drifts(self):
        base = aks_class(vnetSubnetID="/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/"
                                      "virtualNetworks/vnet/subnets/a")
        after = copy.deepcopy(base)
        after["spec"]["vnetSubnetID"] = after["spec"]["vnetSubnetID"][:-1] + "b"
        assert _drifted(base, copy.deepcopy(base)) is None
        assert _drifted(base, after) == "NodeClassDrift"


# --- Azure instance types (karpy's Azure catalog) -------------------------------------------------------------

from karpy.cloudprovider import azure  # noqa: E402

AZ_REGION = "eastus"
NVIDIA = ("Standard_NC16as_T4_v3", "Standard_NC24ads_A100_v4")


def _az_names(nodeclass_spec: dict | None) -> set[str]:
    nc = None if nodeclass_spec is None else {"kind": "AKSNodeClass", "spec": nodeclass_spec}
    return {it.name for it in azure.provider.instance_types(AZ_REGION, nc)}


class TestAzureFilters:
    def test_local_dns_disabled_keeps_two_vcpu_sizes(self):
        names = _az_names({"localDNS": {"mode": "Disabled"}})
        assert "Standard_D2s_v3" in names
        assert names == _az_names(None)
        assert "Standard_D2s_v3" not in _az_names({"localDNS": {"mode": "Required"}})  # the filter exists

    def test_artifact_streaming_disabled_keeps_arm64(self):
        its = azure.provider.instance_types(AZ_REGION, {"kind": "AKSNodeClass",
                                                        "spec": {"artifactStreaming": {"enabled": False}}})
        assert "Standard_D2ps_v5" in {it.name for it in its if it.labels["kubernetes.io/arch"] == "arm64"}

    def test_azure_linux_offers_its_gpu_sizes(self):
        names = _az_names({"imageFamily": "AzureLinux"})
        assert set(NVIDIA) <= names

    @pytest.mark.parametrize("gpu", [None, {"mode": "Driver"}, {"mode": "None"}], ids=["default", "Driver", "None"])
    def test_gpu_mode_keeps_nvidia_and_non_gpu_sizes(self, gpu):
        names = _az_names({} if gpu is None else {"gpu": gpu})
        assert "Standard_NC16as_T4_v3" in names
        assert "Standard_D2s_v3" in names


class TestAzureCapacity:
    def test_every_size_has_compute_capacity(self):
        its = azure.provider.instance_types(AZ_REGION, None)
        assert len(its) > 100
        for it in its:
            for r in ("cpu", "memory", "pods", "ephemeral-storage"):
                assert it.capacity.get(r, 0) > 0, (it.name, r)

    @pytest.mark.parametrize("cores, gib, cpu_m, mem_mi", [(4, 7, 140, 1638), (3, 64, 120, 5611)])
    def test_kube_reserved(self, cores, gib, cpu_m, mem_mi):
        assert azure.kube_reserved(cores, gib) == {"cpu": cpu_m, "memory": mem_mi * 2**20}


# --- AWS instance types (karpy's AWS catalog) -----------------------------------------------------------------

from karpy.cloudprovider import aws  # noqa: E402
from karpy.cloudprovider.catalog import load_catalog  # noqa: E402

MIB, GIB = 2**20, 2**30
_M5 = next(s for s in load_catalog("aws")["sizes"] if s["name"] == "m5.large")
M5_KUBE_RESERVED_MEM = (11 * 29 + 255) * MIB  # m5.large: 29 ENI-limited pods


def _m5(spec: dict) -> tuple[dict, dict]:
    return aws.provider.resources_for(_M5, {"kind": "EC2NodeClass", "spec": spec})


def _al2023(**kubelet) -> dict:
    return {"amiSelectorTerms": [{"alias": "al2023@latest"}], "kubelet": kubelet}


class TestAWSEvictionOverhead:
    """Only ``evictionHard`` sizes the eviction part of the overhead; ``evictionSoft`` never does."""

    def mem_eviction(self, spec: dict) -> int:
        return _m5(spec)[1]["memory"] - M5_KUBE_RESERVED_MEM

    def test_default_is_100Mi(self):
        assert self.mem_eviction(_al2023()) == 100 * MIB

    def test_hard_100_percent_disables_the_threshold(self):
        assert self.mem_eviction(_al2023(evictionHard={"memory.available": "100%"})) == 0

    @pytest.mark.parametrize("soft", ["500Mi", "10%", "100%"])
    def test_soft_alone_leaves_the_default(self, soft):
        assert self.mem_eviction(_al2023(evictionSoft={"memory.available": soft},
                                         evictionSoftGracePeriod={"memory.available": "1m"})) == 100 * MIB

    @pytest.mark.parametrize("hard, soft", [("5%", "10%"), ("10%", "5%")])
    def test_hard_percentage_wins_over_soft_percentage(self, hard, soft):
        cap = _m5(_al2023())[0]["memory"]
        want = -(-cap * int(hard[:-1]) // 100)
        assert self.mem_eviction(_al2023(evictionHard={"memory.available": hard},
                                         evictionSoft={"memory.available": soft})) == want

    @pytest.mark.parametrize("soft", ["2Gi", "10%"], ids=["soft-quantity", "soft-percentage"])
    def test_hard_quantity_wins_over_soft(self, soft):
        assert self.mem_eviction(_al2023(evictionHard={"memory.available": "1Gi"},
                                         evictionSoft={"memory.available": soft})) == GIB

    def test_bottlerocket_ignores_soft(self):
        br = {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]}
        plain = _m5(br)[1]["memory"]
        with_soft = _m5({**br, "kubelet": {"evictionSoft": {"memory.available": "1Gi"}}})[1]["memory"]
        assert with_soft == plain


_ALIASES = {"al2": {"amiSelectorTerms": [{"alias": "al2@latest"}]},
            "windows2019": {"amiSelectorTerms": [{"alias": "windows2019@latest"}]},
            "windows2022": {"amiSelectorTerms": [{"alias": "windows2022@latest"}]},
            "windows2025": {"amiSelectorTerms": [{"alias": "windows2025@latest"}]},
            "custom": {"amiFamily": "Custom", "amiSelectorTerms": [{"id": "ami-0123456789abcdef0"}]}}


class TestAWSPods:
    @pytest.mark.parametrize("family", list(_ALIASES))
    def test_max_pods_is_honoured(self, family):
        default = _m5(_ALIASES[family])[0]["pods"]
        assert default != 7
        assert _m5({**_ALIASES[family], "kubelet": {"maxPods": 7}})[0]["pods"] == 7

    def test_pods_per_core_zero_is_the_eni_limited_default(self):
        assert _m5(_al2023(podsPerCore=0))[0]["pods"] == 29


class TestAWSEphemeralStorageDefaults:
    @pytest.mark.parametrize("spec", [
        _ALIASES["custom"],
        {"amiSelectorTerms": [{"alias": "al2@latest"}],
         "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeType": "gp3"}}]},
        {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
         "blockDeviceMappings": [{"deviceName": "/dev/xvdb", "ebs": {"volumeType": "gp3"}}]},
    ], ids=["custom-no-mappings", "al2-root-without-size", "bottlerocket-xvdb-without-size"])
    def test_ebs_default_20Gi(self, spec):
        assert _m5(spec)[0]["ephemeral-storage"] == 20 * GIB


class TestAWSA1Compatibility:
    @pytest.mark.parametrize("alias, available", [("al2023@latest", False), ("bottlerocket@latest", True)],
                             ids=["AL2023", "Bottlerocket"])
    def test_a1_offerings_follow_the_ami(self, alias, available):
        its = {it.name: it for it in aws.provider.instance_types(
            "us-east-1", {"kind": "EC2NodeClass", "spec": {"amiSelectorTerms": [{"alias": alias}]}})}
        a1 = its["a1.medium"]
        assert a1.offerings
        assert {o.available for o in a1.offerings} == {available}
        assert any(o.available for o in its["m6g.medium"].offerings)  # other Graviton types unaffected


# --- AWS scheduling against the catalog's instance types -------------------------------------------------------

from helpers import expr, nodepool, pod, solve, template  # noqa: E402
from karpy.provisioning.launch import launch_candidates  # noqa: E402

AWS = "karpenter.k8s.aws/"
AWS_REGION = "us-east-1"


def _aws_types(spec: dict | None = None):
    return aws.provider.instance_types(AWS_REGION, None if spec is None else {"kind": "EC2NodeClass", "spec": spec})


def _aws_launch(p, reqs=(), types=None):
    """The (instance type, offering) karpy launches for one pod, or None when it cannot schedule."""
    t = template(nodepool(requirements=list(reqs)), types if types is not None else _aws_types(),
                 provider_labels=aws.provider.WELL_KNOWN_LABELS)
    r = solve(t, [p])
    if not r.new_nodeclaims:
        return None
    (c,) = r.new_nodeclaims
    first = launch_candidates(c.requirements, c.instance_types)[0]
    return first.instance_type, first.offering


# one value per AWS well-known label, read off a reference type that has it
_LABEL_SOURCES = {"m5d.large": ("instance-category", "instance-family", "instance-generation", "instance-size",
                                "instance-cpu", "instance-cpu-manufacturer", "instance-memory",
                                "instance-hypervisor", "instance-network-bandwidth", "instance-ebs-bandwidth",
                                "instance-local-nvme"),
                  "c7i-flex.large": ("instance-encryption-in-transit-supported", "instance-capability-flex"),
                  "g4dn.xlarge": ("instance-gpu-name", "instance-gpu-manufacturer", "instance-gpu-count",
                                  "instance-gpu-memory"),
                  "inf1.xlarge": ("instance-accelerator-name", "instance-accelerator-manufacturer",
                                  "instance-accelerator-count")}
_CORE = {"topology.kubernetes.io/zone": "us-east-1b", "karpenter.sh/capacity-type": "on-demand",
         "kubernetes.io/arch": "arm64", "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "m6g.large",
         "topology.kubernetes.io/region": AWS_REGION}


def _label_cases():
    types = {it.name: it for it in _aws_types()}
    cases = [(AWS + k, types[src].labels[AWS + k]) for src, keys in _LABEL_SOURCES.items() for k in keys]
    return cases + list(_CORE.items())


def _node_value(it, off, key):
    return {"topology.kubernetes.io/zone": off.zone, "karpenter.sh/capacity-type": off.capacity_type}.get(
        key, it.labels.get(key))


class TestAWSLabels:
    @pytest.mark.parametrize("key, value", _label_cases(), ids=lambda v: str(v).split("/")[-1])
    def test_each_well_known_label_schedules_onto_a_matching_type(self, key, value):
        it, off = _aws_launch(pod(cpu="100m", node_selector={key: value}))
        assert _node_value(it, off, key) == value

    def test_combined_labels_pick_one_type_satisfying_all(self):
        sel = {AWS + "instance-category": "m", AWS + "instance-generation": "5", AWS + "instance-size": "large",
               AWS + "instance-cpu": "2", AWS + "instance-local-nvme": "75",
               "topology.kubernetes.io/zone": "us-east-1c", "karpenter.sh/capacity-type": "spot"}
        it, off = _aws_launch(pod(cpu="100m", node_selector=sel))
        assert it.name == "m5d.large"
        assert all(_node_value(it, off, k) == v for k, v in sel.items())

    @pytest.mark.parametrize("sel, family", [
        ({"instance-gpu-name": "t4", "instance-gpu-manufacturer": "nvidia", "instance-gpu-count": "1",
          "instance-gpu-memory": "16384"}, "g4dn"),
        ({"instance-accelerator-name": "inferentia", "instance-accelerator-manufacturer": "aws",
          "instance-accelerator-count": "1"}, "inf1"),
    ], ids=["gpu", "accelerator"])
    def test_accelerator_labels(self, sel, family):
        sel = {AWS + k: v for k, v in sel.items()}
        it, _ = _aws_launch(pod(cpu="100m", node_selector=sel))
        assert it.labels[AWS + "instance-family"] == family
        assert all(it.labels[k] == v for k, v in sel.items())


class TestAWSExtendedResourcesAndSizes:
    def test_pod_eni_is_not_launched_on_t3(self):
        p = pod(cpu="100m", requests={"vpc.amazonaws.com/pod-eni": "1"}, limits={"vpc.amazonaws.com/pod-eni": "1"})
        assert _aws_launch(p, [expr(AWS + "instance-family", "In", "t3")]) is None
        it, _ = _aws_launch(p)  # unrestricted: a type with pod-eni capacity
        assert it.capacity.get("vpc.amazonaws.com/pod-eni", 0) >= 1

    def test_metal_is_deprioritised(self):
        # m5.metal is the cheaper of the two, yet the non-metal type is launched
        types = {it.name: it for it in _aws_types()}
        assert min(o.price for o in types["m5.metal"].offerings) < min(o.price for o in types["m6i.32xlarge"].offerings)
        it, _ = _aws_launch(pod(cpu="60"), [expr("node.kubernetes.io/instance-type", "In", "m5.metal", "m6i.32xlarge")])
        assert it.name == "m6i.32xlarge"

    def test_launch_on_metal_when_asked(self):
        it, _ = _aws_launch(pod(cpu="1", node_selector={AWS + "instance-size": "metal"}))
        assert it.labels[AWS + "instance-size"] == "metal"

    def test_flex_when_required(self):
        it, _ = _aws_launch(pod(cpu="1", node_selector={AWS + "instance-capability-flex": "true"}))
        assert "-flex" in it.labels[AWS + "instance-family"]

    def test_no_flex_when_the_nodepool_disallows_it(self):
        p = pod(cpu="1", node_selector={AWS + "instance-family": "c7i-flex"})
        assert _aws_launch(p, [expr(AWS + "instance-capability-flex", "NotIn", "true")]) is None
        assert _aws_launch(p) is not None  # the family alone schedules

    def test_non_flex_when_required(self):
        it, _ = _aws_launch(pod(cpu="1", node_selector={AWS + "instance-capability-flex": "false"}))
        assert "-flex" not in it.labels[AWS + "instance-family"]

    def test_neuron_on_trn1(self):
        p = pod(cpu="1", requests={"aws.amazon.com/neuron": "1"}, limits={"aws.amazon.com/neuron": "1"})
        it, _ = _aws_launch(p, [expr(AWS + "instance-family", "In", "trn1")])
        assert it.name.startswith("trn1.") and it.capacity["aws.amazon.com/neuron"] >= 1

    def test_amd_gpu(self):
        p = pod(cpu="1", requests={"amd.com/gpu": "1"}, limits={"amd.com/gpu": "1"})
        it, _ = _aws_launch(p)
        assert it.name.startswith("g4ad.") and it.capacity["amd.com/gpu"] >= 1


class TestAWSInstanceStoreEphemeral:
    RAID0 = {"amiSelectorTerms": [{"alias": "al2023@latest"}], "instanceStorePolicy": "RAID0",
             "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "10Gi"}}]}

    def test_request_beyond_every_instance_store_does_not_schedule(self):
        types = _aws_types(self.RAID0)
        biggest = max(it.capacity["ephemeral-storage"] for it in types)
        p = pod(cpu="100m", requests={"ephemeral-storage": str(biggest + 10**12)})
        assert _aws_launch(p, types=types) is None

    def test_request_beyond_the_root_volume_lands_on_an_instance_store_type(self):
        types = _aws_types(self.RAID0)
        it, _ = _aws_launch(pod(cpu="100m", requests={"ephemeral-storage": "100Gi"}), types=types)
        assert int(it.labels[AWS + "instance-local-nvme"]) * 10**9 >= 100 * GIB
        # without RAID0 only the 10Gi root volume counts, and the same request does not schedule
        no_raid = {k: v for k, v in self.RAID0.items() if k != "instanceStorePolicy"}
        assert _aws_launch(pod(cpu="100m", requests={"ephemeral-storage": "100Gi"}),
                           types=_aws_types(no_raid)) is None


# --- insufficient capacity on the one type that fits every pod: smaller nodes instead (karpy simulate) ----------

import json  # noqa: E402

import yaml  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from karpy.cli import main as cli_main  # noqa: E402

_ICE_CASES = {
    "aws": ("EC2NodeClass", "karpenter.k8s.aws", "karpenter.k8s.aws/v1",
            {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole",
             "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
             "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]},
            "us-east-1", "us-east-1a", ("m5.large", "m5.xlarge")),
    "azure": ("AKSNodeClass", "karpenter.azure.com", "karpenter.azure.com/v1beta1", {"imageFamily": "Ubuntu2204"},
              "eastus", "eastus-1", ("Standard_D2s_v5", "Standard_D4s_v5")),
}


@pytest.mark.parametrize("provider", list(_ICE_CASES))
def test_insufficient_capacity_on_the_larger_type_launches_smaller_nodes(tmp_path, provider):
    kind, group, version, nc_spec, region, zone, (small, large) = _ICE_CASES[provider]
    pool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": group, "kind": kind, "name": "default"},
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [small, large]},
                                 {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}},
                     "disruption": {"consolidateAfter": "Never"}}}
    nodeclass = {"apiVersion": version, "kind": kind, "metadata": {"name": "default"}, "spec": nc_spec}

    def pod(name):  # two such pods do not fit on one `small` node
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeSelector": {"topology.kubernetes.io/zone": zone},
                         "containers": [{"name": "c", "image": "app", "resources": {"requests": {"cpu": "1"}}}]}}

    scenario = {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": "ice"},
                "spec": {"region": region, "steps": [
                    {"unavailable": {"instanceTypes": [large], "zones": [zone], "capacityType": "on-demand"}},
                    {"apply": [pod("a"), pod("b")]}, {"advance": "5m"}]}}
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([pool, nodeclass, scenario]))
    r = CliRunner().invoke(cli_main, ["simulate", str(path), "-o", "json"])
    assert r.exit_code == 0, r.stderr
    items = json.loads(r.stdout)["items"]
    status = next(i for i in items if i["kind"] == "SimulationSummary")["status"]
    live = [c for c in status["nodeClaims"] if not c["launchFailed"]]
    assert sorted(c["instanceType"] for c in live) == [small, small]
    assert all(c["zone"] == zone for c in live)
    pods = [i for i in items if i["kind"] == "Pod"]
    assert {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")} == {"a", "b"}
