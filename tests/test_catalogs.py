"""The embedded instance-type catalogs and the providers built on them."""

from __future__ import annotations

import csv
import importlib.util
import statistics
from pathlib import Path

import pytest

from karpy.cloudprovider import aws, azure, kwok
from karpy.cloudprovider.catalog import DATA_DIR, get_provider, load_catalog
from karpy.cloudprovider.fake import fake_instance_types
from karpy.resources import CPU, EPHEMERAL, MEMORY, PODS

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT / "data" / "instance-types"  # the repository's copy of ../shared/data
BESIDE = ROOT.parent / "shared" / "data"
FACTS = ROOT / "data" / "facts"
MIB = 2**20
GIB = 2**30

needs_data = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="shared facts data not present")


@pytest.mark.skipif(not BESIDE.is_dir(), reason="no ../shared/data beside the project to compare with")
def test_the_repository_copy_of_the_instance_type_facts_is_the_shared_data():
    for name in ("aws-instance-types.csv", "azure-vm-sizes.csv", "kwok-instance-types.csv", "README.md"):
        assert (SHARED_DATA / name).read_bytes() == (BESIDE / name).read_bytes(), name


def _build_script():
    spec = importlib.util.spec_from_file_location("build_catalogs", ROOT / "scripts" / "build_catalogs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _csv(name: str) -> list[dict[str, str]]:
    with (SHARED_DATA / name).open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _by_name(its):
    return {it.name: it for it in its}


# --------------------------------------------------------------------------
# the build


@needs_data
def test_build_is_reproducible_and_matches_the_files_on_disk():
    mod = _build_script()
    first = mod.build_all(SHARED_DATA, FACTS)
    second = mod.build_all(SHARED_DATA, FACTS)
    assert first == second
    for name, text in first.items():
        on_disk = mod.read_catalog_text(DATA_DIR / mod.file_name(name))
        assert on_disk == text, f"{name} is stale: rerun scripts/build_catalogs.py"
    assert mod.main(["--data", str(SHARED_DATA), "--check"]) == 0


@needs_data
def test_build_writes_into_another_directory(tmp_path):
    mod = _build_script()
    assert mod.main(["--data", str(SHARED_DATA), "--out", str(tmp_path)]) == 0
    for name in ("azure.json.gz", "aws.json.gz", "kwok.json"):
        assert mod.read_catalog_text(tmp_path / name) == mod.read_catalog_text(DATA_DIR / name)
    # the compressed catalogs stay small enough to ship in the package
    assert sum((DATA_DIR / n).stat().st_size for n in ("azure.json.gz", "aws.json.gz", "kwok.json")) < 600_000


def test_row_counts():
    assert len(load_catalog("azure")["sizes"]) == 629
    assert len(load_catalog("aws")["sizes"]) == 1382
    kw = load_catalog("kwok")["sizes"]
    assert len(kw) == 144
    assert sum(len(s["offerings"]) for s in kw) == 1152
    for name in ("azure", "aws", "kwok"):
        cat = load_catalog(name)
        names = [s["name"] for s in cat["sizes"]]
        assert names == sorted(names) and len(set(names)) == len(names)
        assert cat["notes"] and cat["provider"] == name


def test_catalog_records_have_the_documented_fields():
    for name in ("azure", "aws", "kwok"):
        for s in load_catalog(name)["sizes"]:
            assert {"name", "arch", "os", "vcpu", "memory", "gpus", "max_pods"} <= s.keys()
            assert s["arch"] in ("amd64", "arm64") and isinstance(s["memory"], int)


# --------------------------------------------------------------------------
# providers and lookups


def test_get_provider_by_name_kind_group_and_api_version():
    assert get_provider("azure") is azure.provider
    assert get_provider("AKSNodeClass") is azure.provider
    assert get_provider("karpenter.azure.com") is azure.provider
    assert get_provider("karpenter.azure.com/v1beta1") is azure.provider
    assert get_provider("EC2NodeClass") is aws.provider
    assert get_provider("karpenter.k8s.aws/v1") is aws.provider
    assert get_provider("KWOKNodeClass") is kwok.provider
    assert get_provider("kwok") is kwok.provider
    with pytest.raises(ValueError, match="AKSNodeClass"):
        get_provider("GCENodeClass")


def test_provider_attributes():
    assert (azure.provider.group, azure.provider.nodeclass_kind, azure.provider.default_region) == (
        "karpenter.azure.com",
        "AKSNodeClass",
        "eastus",
    )
    assert (aws.provider.group, aws.provider.nodeclass_kind, aws.provider.default_region) == (
        "karpenter.k8s.aws",
        "EC2NodeClass",
        "us-east-1",
    )
    assert (kwok.provider.group, kwok.provider.nodeclass_kind) == ("karpenter.kwok.sh", "KWOKNodeClass")
    assert len(azure.provider.regions) == 57 and {"eastus", "westeurope", "westus2"} <= set(azure.provider.regions)
    assert len(aws.provider.regions) == 37
    assert {"us-east-1", "eu-west-1", "us-west-2", "us-gov-west-1"} <= set(aws.provider.regions)
    assert "karpenter.azure.com/sku-family" in azure.provider.WELL_KNOWN_LABELS
    assert "kubernetes.azure.com/os-sku" in azure.provider.WELL_KNOWN_LABELS
    assert "karpenter.k8s.aws/instance-family" in aws.provider.WELL_KNOWN_LABELS
    assert "topology.k8s.aws/zone-id" in aws.provider.WELL_KNOWN_LABELS
    assert kwok.provider.WELL_KNOWN_LABELS == {
        "karpenter.kwok.sh/instance-size",
        "karpenter.kwok.sh/instance-family",
        "karpenter.kwok.sh/instance-cpu",
        "karpenter.kwok.sh/instance-memory",
    }
    for p in (azure.provider, aws.provider, kwok.provider):
        assert all(k.startswith(p.LABEL_DOMAIN + "/") for k in p.WELL_KNOWN_LABELS if "karpenter" in k)


def test_unknown_region_lists_the_known_ones():
    with pytest.raises(ValueError, match="westeurope"):
        azure.provider.instance_types("mars-1", None)
    with pytest.raises(ValueError, match="us-gov-west-1"):
        aws.provider.instance_types("eu-west-9", None)
    # the kwok catalog is region-independent
    assert len(kwok.provider.instance_types("anywhere", None)) == 144


def test_instance_types_are_cached_per_region_and_nodeclass():
    a = azure.provider.instance_types("eastus", None)
    b = azure.provider.instance_types("eastus", {"spec": {}})
    assert a is not b and a == b and a[0] is b[0]  # fresh list, shared objects
    c = azure.provider.instance_types("eastus", {"spec": {"maxPods": 30}})
    assert c[0] is not a[0] and c[0].capacity[PODS] == 30
    d = azure.provider.instance_types("eastus", {"metadata": {"name": "x"}, "spec": {"tags": {"a": "b"}}})
    assert d[0] is a[0]  # fields that do not change instance types do not split the cache


def test_registration_delays():
    assert azure.provider.registration_delay(None) == 60.0
    assert aws.provider.registration_delay({"spec": {}}) == 30.0
    assert kwok.provider.registration_delay(None) == 0.0
    assert kwok.provider.registration_delay({"spec": {"nodeRegistrationDelay": "1m30s"}}) == 90.0


# --------------------------------------------------------------------------
# labels of known sizes


def test_azure_labels_standard_d2ps_v5():
    it = _by_name(azure.provider.instance_types("eastus", None))["Standard_D2ps_v5"]
    assert it.labels == {
        "kubernetes.io/arch": "arm64",
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "Standard_D2ps_v5",
        "topology.kubernetes.io/region": "eastus",
        "karpenter.azure.com/sku-name": "Standard_D2ps_v5",
        "karpenter.azure.com/sku-family": "D",
        "karpenter.azure.com/sku-series": "Dps_v5",
        "karpenter.azure.com/sku-version": "5",
        "karpenter.azure.com/sku-cpu": "2",
        "karpenter.azure.com/sku-memory": "8192",
        "kubernetes.azure.com/sku-cpu": "2",
        "kubernetes.azure.com/sku-memory": "8192",
        "karpenter.azure.com/sku-storage-premium-capable": "true",
        "karpenter.azure.com/sku-gpu-count": "0",
        "karpenter.azure.com/placement-scope": "zonal",
        "kubernetes.azure.com/os-sku": "Ubuntu",
    }
    assert [o.zone for o in it.offerings] == ["eastus-1", "eastus-1", "eastus-2", "eastus-2", "eastus-3", "eastus-3"]
    assert {o.capacity_type for o in it.offerings} == {"on-demand", "spot"}
    assert {o.price for o in it.offerings if o.capacity_type == "on-demand"} == {0.077}


def test_azure_labels_standard_d4pls_v6_and_nodeclass_labels():
    nc = {"spec": {"imageFamily": "AzureLinux", "fipsMode": "FIPS"}}
    it = _by_name(azure.provider.instance_types("westeurope", nc))["Standard_D4pls_v6"]
    expected = {
        "kubernetes.io/arch": "arm64",
        "node.kubernetes.io/instance-type": "Standard_D4pls_v6",
        "topology.kubernetes.io/region": "westeurope",
        "karpenter.azure.com/sku-family": "D",
        "karpenter.azure.com/sku-series": "Dpls_v6",
        "karpenter.azure.com/sku-version": "6",
        "karpenter.azure.com/sku-cpu": "4",
        "karpenter.azure.com/sku-memory": "8192",
        "kubernetes.azure.com/os-sku": "AzureLinux",
        "kubernetes.azure.com/fips_enabled": "true",
    }
    assert expected.items() <= it.labels.items()
    assert it.offerings[0].zone == "westeurope-1" and it.offerings[0].price == 0.148


def test_azure_gpu_and_api_sizes():
    its = _by_name(azure.provider.instance_types("eastus", None))
    a100 = its["Standard_NC24ads_A100_v4"]
    assert a100.labels["karpenter.azure.com/sku-family"] == "N"
    assert a100.labels["karpenter.azure.com/sku-series"] == "NCads_v4"
    assert a100.labels["karpenter.azure.com/sku-gpu-name"] == "A100"
    assert a100.labels["karpenter.azure.com/sku-gpu-manufacturer"] == "nvidia"
    assert a100.labels["karpenter.azure.com/sku-gpu-count"] == "1"
    assert a100.labels["karpenter.azure.com/sku-networking-accelerated"] == "true"
    assert a100.capacity["nvidia.com/gpu"] == 1
    v100 = its["Standard_NC6s_v3"]
    assert v100.labels["karpenter.azure.com/sku-gpu-name"] == "V100"
    assert its["Standard_DS2_v2"].labels["karpenter.azure.com/sku-series"] == "DS_v2"


def test_offering_labels():
    it = _by_name(azure.provider.instance_types("eastus", None))["Standard_D2s_v5"]
    spot = next(o for o in it.offerings if o.capacity_type == "spot")
    od = next(o for o in it.offerings if o.capacity_type == "on-demand")
    assert azure.provider.offering_labels(spot)["kubernetes.azure.com/scalesetpriority"] == "spot"
    assert azure.provider.offering_labels(od)["kubernetes.azure.com/priority"] == "regular"
    assert aws.provider.offering_labels(od) == {} and kwok.provider.offering_labels(od) == {}


def test_azure_filters_unsupported_sizes():
    names = {it.name for it in azure.provider.instance_types("eastus", None)}
    for excluded in ("Standard_A0", "Standard_B1ls", "Standard_A1_v2", "Standard_B2ts_v2", "Standard_M8-2ms",
                     "Standard_DC8s_v3", "Standard_E64i_v3"):
        assert excluded not in names
    assert "Standard_D2s_v3" in names
    arm = {"spec": {"artifactStreaming": {"enabled": True}}}
    assert all(it.labels["kubernetes.io/arch"] == "amd64" for it in azure.provider.instance_types("eastus", arm))
    dns = {"spec": {"localDNS": {"mode": "Required"}}}
    assert min(int(it.labels["karpenter.azure.com/sku-cpu"]) for it in azure.provider.instance_types("eastus", dns)) >= 4


def test_aws_labels_m7g_large():
    it = _by_name(aws.provider.instance_types("us-east-1", None))["m7g.large"]
    assert it.labels == {
        "kubernetes.io/arch": "arm64",
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "m7g.large",
        "topology.kubernetes.io/region": "us-east-1",
        "karpenter.k8s.aws/instance-family": "m7g",
        "karpenter.k8s.aws/instance-category": "m",
        "karpenter.k8s.aws/instance-generation": "7",
        "karpenter.k8s.aws/instance-size": "large",
        "karpenter.k8s.aws/instance-cpu": "2",
        "karpenter.k8s.aws/instance-cpu-manufacturer": "aws",
        "karpenter.k8s.aws/instance-memory": "8192",
        "karpenter.k8s.aws/instance-hypervisor": "nitro",
        "karpenter.k8s.aws/instance-network-bandwidth": "937",
        "karpenter.k8s.aws/instance-ebs-bandwidth": "10000",
        "karpenter.k8s.aws/instance-encryption-in-transit-supported": "true",
        "karpenter.k8s.aws/instance-capability-flex": "false",
    }
    assert [o.zone for o in it.offerings][::2] == [f"us-east-1{z}" for z in "abcdef"]
    assert it.offerings[0].price == 0.0816
    assert it.capacity["vpc.amazonaws.com/pod-eni"] == 9
    gov = _by_name(aws.provider.instance_types("us-gov-west-1", None))["m7g.large"]
    assert gov.offerings[0].price == 0.1028 and gov.offerings[0].zone == "us-gov-west-1a"


def test_aws_accelerator_resources_and_labels():
    its = _by_name(aws.provider.instance_types("us-east-1", None))
    g5 = its["g5.xlarge"]
    assert g5.capacity["nvidia.com/gpu"] == 1
    assert g5.labels["karpenter.k8s.aws/instance-gpu-name"] == "a10g"
    assert g5.labels["karpenter.k8s.aws/instance-gpu-memory"] == "22888"
    assert g5.labels["karpenter.k8s.aws/instance-local-nvme"] == "250"
    inf2 = its["inf2.xlarge"]
    assert inf2.capacity["aws.amazon.com/neuron"] == 1
    assert inf2.labels["karpenter.k8s.aws/instance-accelerator-name"] == "inferentia2"
    assert its["p4d.24xlarge"].capacity["vpc.amazonaws.com/efa"] == 4
    # types without a price in the region are not offered there
    assert "p5e.48xlarge" not in its and len(its) == 1364


def test_kwok_labels_c_4x_arm64_linux():
    it = _by_name(kwok.provider.instance_types(None, None))["c-4x-arm64-linux"]
    assert it.labels == {
        "kubernetes.io/arch": "arm64",
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "c-4x-arm64-linux",
        "karpenter.kwok.sh/instance-size": "4",
        "karpenter.kwok.sh/instance-family": "c",
        "karpenter.kwok.sh/instance-cpu": "4",
        "karpenter.kwok.sh/instance-memory": "8Gi",
    }
    assert it.capacity == {CPU: 4000, MEMORY: 8 * GIB, PODS: 64, EPHEMERAL: 20 * GIB}
    assert it.overhead == {CPU: 100, MEMORY: 10 * MIB}
    assert len(it.offerings) == 8
    assert {o.zone for o in it.offerings} == {"test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"}
    od = {o.price for o in it.offerings if o.capacity_type == "on-demand"}
    spot = {o.price for o in it.offerings if o.capacity_type == "spot"}
    assert od == {0.108589934592} and spot == {0.07601295421439999}
    big = _by_name(kwok.provider.instance_types(None, None))["m-192x-amd64-windows"]
    assert big.labels["karpenter.kwok.sh/instance-memory"] == "1536Gi"
    assert big.labels["kubernetes.io/os"] == "windows"


# --------------------------------------------------------------------------
# allocatable formulas


@needs_data
def test_aws_allocatable_matches_upstream_generated_columns_exactly():
    """Every row: our cpu/memory/ephemeral-storage allocatable equals the CSV's (tolerance 0)."""
    records = {s["name"]: s for s in load_catalog("aws")["sizes"]}
    checked = 0
    mismatches = []
    for row in _csv("aws-instance-types.csv"):
        if not row["allocatable_cpu"] or not row["allocatable_memory_mib"]:
            continue
        cap, over = aws.provider.resources_for(records[row["name"]], None)
        cpu = cap[CPU] - over[CPU]
        mem = cap[MEMORY] - over[MEMORY]
        eph = cap[EPHEMERAL] - over[EPHEMERAL]
        want_cpu = round(float(row["allocatable_cpu"]) * 1000)
        want_mem = int(row["allocatable_memory_mib"]) * MIB
        want_eph = int(row["allocatable_ephemeral_storage_gib"]) * GIB
        if (cpu, mem, eph, cap[PODS]) != (want_cpu, want_mem, want_eph, int(row["max_pods"])):
            mismatches.append((row["name"], cpu, want_cpu, mem // MIB, want_mem // MIB))
        checked += 1
    assert checked == 1382
    assert mismatches == []


def test_aws_overhead_by_hand_m5_large():
    it = _by_name(aws.provider.instance_types("us-east-1", None))["m5.large"]
    # 2 vCPU: 60m + 10m; 29 ENI pods: 11*29+255 = 574Mi kube-reserved + 100Mi eviction
    assert it.overhead[CPU] == 70
    assert it.overhead[MEMORY] == (574 + 100) * MIB
    assert it.overhead[EPHEMERAL] == GIB + 2 * GIB  # 1Gi kube-reserved + 10% of 20Gi
    # 8192Mi minus ceil(8192 * 0.075) = 615Mi VM overhead
    assert it.capacity[MEMORY] == (8192 - 615) * MIB


def test_aws_kubelet_settings_from_the_ec2nodeclass():
    m5 = next(s for s in load_catalog("aws")["sizes"] if s["name"] == "m5.large")
    base_cap, base_over = aws.provider.resources_for(m5, None)
    nc = {
        "spec": {
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "kubelet": {
                "maxPods": 110,
                "kubeReserved": {"cpu": "200m", "memory": "not-a-quantity + 1"},
                "systemReserved": {"memory": "100Mi"},
                "evictionHard": {"memory.available": "5%", "nodefs.available": "1Gi"},
            },
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi"}}],
        }
    }
    cap, over = aws.provider.resources_for(m5, nc)
    assert cap[PODS] == 110
    assert over[CPU] == 200
    # kube-reserved memory keeps the ENI-limited 29 pods on AL2023; the CEL value is ignored
    mem_eviction = -(-cap[MEMORY] * 5 // 100)
    assert over[MEMORY] == (11 * 29 + 255) * MIB + 100 * MIB + mem_eviction
    assert cap[EPHEMERAL] == 100 * GIB and over[EPHEMERAL] == GIB + GIB
    ppc = aws.provider.resources_for(m5, {"spec": {"amiFamily": "AL2023", "kubelet": {"podsPerCore": 4}}})[0]
    assert ppc[PODS] == 8
    br = aws.provider.resources_for(m5, {"spec": {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
                                                  "kubelet": {"maxPods": 50, "podsPerCore": 4}}})
    assert br[0][PODS] == 50  # podsPerCore is ignored on Bottlerocket
    assert br[1][MEMORY] == (11 * 50 + 255) * MIB + 100 * MIB
    assert base_cap[PODS] == 29 and base_over[CPU] == 70


def test_aws_windows_family():
    its = aws.provider.instance_types("us-east-1", {"spec": {"amiSelectorTerms": [{"alias": "windows2022@latest"}]}})
    assert all(it.labels["kubernetes.io/arch"] == "amd64" for it in its)
    m5 = _by_name(its)["m5.large"]
    assert m5.labels["kubernetes.io/os"] == "windows"
    assert m5.labels["node.kubernetes.io/windows-build"] == "10.0.20348"
    assert m5.capacity[PODS] == 110 and m5.capacity[EPHEMERAL] == 50 * GIB
    assert m5.overhead[MEMORY] == (11 * 110 + 255) * MIB + 100 * MIB


def _azure_alloc(name: str, nodeclass=None) -> tuple[dict, dict]:
    it = _by_name(azure.provider.instance_types("eastus", nodeclass))[name]
    return it.capacity, it.allocatable


def test_azure_allocatable_d2s_v5_worked_by_hand():
    cap, alloc = _azure_alloc("Standard_D2s_v5")
    # capacity: 8Gi minus the VM overhead ceil(8Gi x 0.075) = 644245095 bytes
    assert cap[MEMORY] == 8 * GIB - 644245095 == 7945689497
    # kube-reserved CPU: 6% of core 1 + 4% of core 2 = 100m
    assert alloc[CPU] == 2000 - 100
    # kube-reserved memory: 25% of 4Gi + 20% of 4Gi = 1.8Gi -> 1843Mi (truncated); eviction 750Mi
    assert alloc[MEMORY] == 7945689497 - (1843 + 750) * MIB == 5226731929
    assert cap[EPHEMERAL] == alloc[EPHEMERAL] == 128 * 10**9
    assert cap[PODS] == 250


def test_azure_allocatable_d4s_v5_worked_by_hand():
    cap, alloc = _azure_alloc("Standard_D4s_v5")
    assert cap[MEMORY] == 16 * GIB - 1288490189  # ceil(17179869184 x 0.075)
    # CPU: 60m + 40m + 2 x 20m = 140m
    assert alloc[CPU] == 4000 - 140
    # memory: 1Gi + 0.8Gi + 10% of 8Gi = 2.6Gi -> 2662Mi; eviction 750Mi
    assert alloc[MEMORY] == 16 * GIB - 1288490189 - (2662 + 750) * MIB == 12313637683


def test_azure_nodeclass_pods_and_disk():
    cap, alloc = _azure_alloc("Standard_D4s_v5", {"spec": {"maxPods": 110, "osDiskSizeGB": 64}})
    assert cap[PODS] == alloc[PODS] == 110
    assert cap[EPHEMERAL] == 64 * 10**9


def test_azure_kube_reserved_large_size():
    # 64 vCPU, 256 GiB: CPU 60+40+40+600 = 740m; memory 1+0.8+0.8+6.72+2.56 = 11.88Gi -> 12165Mi
    assert azure.kube_reserved(64, 256.0) == {CPU: 740, MEMORY: 12165 * MIB}


# --------------------------------------------------------------------------
# spot prices


@needs_data
def test_azure_spot_estimate_is_the_median_ratio_of_the_sizes_family():
    ratios, by_family = [], {}
    for row in _csv("azure-vm-sizes.csv"):
        for region in ("eastus", "westus2", "southcentralus"):
            if row[f"spot_price_linux_per_hour_{region}"]:
                r = float(row[f"spot_price_linux_per_hour_{region}"]) / float(
                    row[f"price_linux_ondemand_per_hour_{region}"]
                )
                ratios.append(r)
                by_family.setdefault(row["name"].removeprefix("Standard_")[0], []).append(r)
    assert len(ratios) == 90
    est = load_catalog("azure")["spot_estimate"]
    assert est["ratio"] == round(statistics.median(ratios), 6) == 0.205816
    assert est["by_family"]["D"] == round(statistics.median(by_family["D"]), 6)
    # a family with fewer than 3 known spot prices (B: one, at 0.9 of on-demand) falls back to the median of all
    assert "B" not in est["by_family"] and len(by_family["B"]) == 1


def test_known_spot_prices_are_used_and_estimates_are_flagged():
    d4_w2 = _by_name(azure.provider.instance_types("westus2", None))["Standard_D4s_v5"]
    spot = [o for o in d4_w2.offerings if o.capacity_type == "spot"]
    assert {(o.price, o.price_estimated, o.price_source) for o in spot} == {(0.042, False, "catalog")}
    d4_e = _by_name(azure.provider.instance_types("eastus", None))["Standard_D4s_v5"]
    spot = [o for o in d4_e.offerings if o.capacity_type == "spot"]
    d_ratio = load_catalog("azure")["spot_estimate"]["by_family"]["D"]
    assert {(o.price, o.price_estimated, o.price_source) for o in spot} == {(round(0.192 * d_ratio, 6), True, "estimated")}
    assert all(not o.price_estimated for o in d4_e.offerings if o.capacity_type == "on-demand")
    for it in aws.provider.instance_types("us-east-1", None):
        for o in it.offerings:
            assert o.price_estimated == (o.capacity_type == "spot")
            assert o.price > 0
    for it in kwok.provider.instance_types(None, None):
        assert not any(o.price_estimated for o in it.offerings)


def test_azure_unknown_skus_get_upstreams_penalty_price():
    it = _by_name(azure.provider.instance_types("eastus", None))["Standard_E16bs_v6"]
    assert {o.price for o in it.offerings} == {azure.MISSING_PRICE}


# --------------------------------------------------------------------------
# fake benchmark types


def test_fake_instance_types():
    its = fake_instance_types(10)
    assert [it.name for it in its] == [f"fake-it-{i}" for i in range(10)]
    first, sixth = its[0], its[5]
    assert first.capacity == {CPU: 1000, MEMORY: 2 * GIB, PODS: 10}
    assert sixth.capacity == {CPU: 6000, MEMORY: 12 * GIB, PODS: 60}
    assert first.overhead == {CPU: 100, MEMORY: 10 * MIB}
    assert first.labels == {
        "node.kubernetes.io/instance-type": "fake-it-0",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "integer": "1",
        "size": "small",
    }
    assert sixth.labels["size"] == "large" and sixth.labels["special"] == "optional"
    assert its[3].labels["size"] == "small"  # 4 vCPU is not more than 4
    assert [(o.capacity_type, o.zone) for o in first.offerings] == [
        ("spot", "test-zone-1"),
        ("spot", "test-zone-2"),
        ("on-demand", "test-zone-1"),
        ("on-demand", "test-zone-2"),
        ("on-demand", "test-zone-3"),
    ]
    prices = {o.price for o in first.offerings}
    assert len(prices) == 1 and prices.pop() == pytest.approx(0.3147483648, abs=1e-15)
    for i, it in enumerate(its):
        assert it.offerings[0].price == pytest.approx(0.3147483648 * (i + 1), rel=1e-12)
        assert all(o.available and not o.price_estimated for o in it.offerings)
