"""Volume topology and validation: where a pod's PersistentVolumeClaims let it run, and which pods
upstream's provisioner ignores for their claims.

Mirrors upstream's VolumeUsage / Volume Topology Requirements cases
(pkg/controllers/provisioning/scheduling/suite_test.go, pkg/controllers/provisioning/suite_test.go)
at the engine: claims, volumes and StorageClasses are looked up in a dict, the pod carries
:func:`karpy.scheduling.volumes.volume_requirements`, and a solve says where it lands.
Controller-level cases (the provisioner ignoring pods, with its events) are in
tests/controllers/test_provisioning_validation.py.
"""

from __future__ import annotations

import pytest

from helpers import (
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_ZONE,
    affinity_term,
    existing_node,
    expr,
    placement,
    pod_manifest,
    scheduled,
    single,
    solve,
    spread,
    template,
)
from karpy.cloudprovider import fake
from karpy.cloudprovider.fake import fake_instance_types
from karpy.scheduling.pods import compile_pod
from karpy.scheduling.volumes import VolumeTopology, has_volume_claims, volume_requirements
from karpy.state.pods import with_volume_requirements

WFFC = "WaitForFirstConsumer"


# --- builders --------------------------------------------------------------------------------


def zone_term(*zones: str) -> dict:
    return {"matchExpressions": [expr(LABEL_ZONE, "In", *zones)]}


def pv(name: str, *terms: dict, local: bool = False, host_path: bool = False, nfs: bool = False,
       deleting: bool = False) -> dict:
    spec: dict = {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"]}
    if local:
        spec["local"] = {"path": "/mnt/disks/ssd1"}
    elif host_path:
        spec["hostPath"] = {"path": "/data"}
    elif nfs:
        spec["nfs"] = {"server": "nfs.example.com", "path": "/exports"}
        spec["storageClassName"] = ""
    else:
        spec["csi"] = {"driver": "disk.example.com", "volumeHandle": name}
    if terms:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": list(terms)}}
    meta: dict = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta, "spec": spec}


def pvc(name: str, storage_class: str | None = None, volume: str | None = None, deleting: bool = False,
        phase: str | None = None, namespace: str = "default", bind_completed: bool = True) -> dict:
    """A claim; one naming its volume is bound as the persistent-volume controller leaves it (its annotation),
    unless ``bind_completed`` is False."""
    spec: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume:
        spec["volumeName"] = volume
    meta: dict = {"name": name, "namespace": namespace}
    if volume and bind_completed:
        meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def storage_class(name: str, *terms: list[tuple[str, list[str]]], binding: str = WFFC) -> dict:
    obj: dict = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                 "provisioner": "disk.example.com", "volumeBindingMode": binding}
    if terms:
        obj["allowedTopologies"] = [{"matchLabelExpressions": [{"key": k, "values": v} for k, v in t]} for t in terms]
    return obj


class World:
    """The objects a lookup finds, by (kind, namespace, name), as karpy's cluster state keeps them."""

    def __init__(self, *objs: dict):
        self.objs: dict[tuple[str, str, str], dict] = {}
        for o in objs:
            ns = o["metadata"].get("namespace", "default") if o["kind"] == "PersistentVolumeClaim" else ""
            self.objs[(o["kind"], ns, o["metadata"]["name"])] = o

    def lookup(self, kind: str, ns: str, name: str) -> dict | None:
        return self.objs.get((kind, ns if kind == "PersistentVolumeClaim" else "", name))

    def pod(self, name: str | None = None, claims: tuple[str, ...] = (), ephemeral: dict[str, dict] | None = None,
            cpu: str = "1", **kw):
        """A compiled pod mounting ``claims`` (and generic ephemeral volumes name -> claim template spec)."""
        m = pod_manifest(name, cpu=cpu, **kw)
        vols = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
        for vname, tspec in (ephemeral or {}).items():
            vols.append({"name": vname, "ephemeral": {"volumeClaimTemplate": {"spec": tspec}}})
        if vols:
            m["spec"]["volumes"] = vols
        info = compile_pod(m)
        if has_volume_claims(m):
            info = with_volume_requirements(info, volume_requirements(m, self.lookup))
        return info


def zone_of(results, p) -> str | None:
    target = placement(results, p)
    for c in results.new_nodeclaims:
        if c.hostname == target:
            return single(c, LABEL_ZONE)
    return None


# =============================================================================================
# topology: PersistentVolume nodeAffinity and StorageClass allowedTopologies terms are ORed


class TestVolumeTopologyAlternatives:
    def test_a_bound_pv_with_two_zone_terms_lets_anti_affine_pods_use_both(self):
        """It("should schedule pods using a PV with multiple zones")"""
        w = World(*(o for i in range(2) for o in (pv(f"pv-{i}", zone_term("test-zone-1"), zone_term("test-zone-2")),
                                                 pvc(f"pvc-{i}", "", volume=f"pv-{i}"))))
        app = {"app": "multi-zone"}
        ps = [w.pod(f"pod-{i}", claims=(f"pvc-{i}",), labels=app, pod_anti_affinity=[affinity_term(LABEL_ZONE, app)])
              for i in range(2)]
        r = solve(template(), ps)
        assert r.errors == {}
        zones = {zone_of(r, p) for p in ps}
        assert zones == {"test-zone-1", "test-zone-2"}

    def test_a_storage_class_with_two_zone_terms_lets_anti_affine_pods_use_both(self):
        """It("should schedule pods using a StorageClass with multiple zones in AllowedTopologies")"""
        sc = storage_class("multi", [(LABEL_ZONE, ["test-zone-1"])], [(LABEL_ZONE, ["test-zone-2"])])
        w = World(sc, pvc("pvc-0", "multi"), pvc("pvc-1", "multi"))
        app = {"app": "multi-zone-sc"}
        ps = [w.pod(f"sc-pod-{i}", claims=(f"pvc-{i}",), labels=app, pod_anti_affinity=[affinity_term(LABEL_ZONE, app)])
              for i in range(2)]
        r = solve(template(), ps)
        assert r.errors == {}
        assert {zone_of(r, p) for p in ps} == {"test-zone-1", "test-zone-2"}

    @pytest.mark.parametrize("kind", ["local", "host_path"])
    def test_a_hostname_only_term_of_a_local_volume_leaves_an_unconstrained_alternative(self, kind):
        """DescribeTable("should preserve unconstrained PV alternatives after ignoring hostname affinity")"""
        terms = ({"matchExpressions": [expr(LABEL_HOSTNAME, "In", "existing-host")]}, zone_term("invalid-zone"))
        w = World(pv("hostname-or-zone", *terms, **{kind: True}), pvc("claim", "", volume="hostname-or-zone"))
        p = w.pod("hostname-or-zone-pod", claims=("claim",))
        r = solve(template(), [p])
        assert r.errors == {} and scheduled(r) == {p.key}

    @pytest.mark.parametrize("kind", ["local", "host_path"])
    def test_hostname_affinity_of_local_volumes_is_ignored(self, kind):
        """DescribeTable("should ignore hostname affinity scheduling when using local path volumes")"""
        w = World(pv("local-pv", {"matchExpressions": [expr(LABEL_HOSTNAME, "In", "random-hostname")]}, **{kind: True}),
                  pvc("claim", "", volume="local-pv"))
        p = w.pod(claims=("claim",))
        r = solve(template(), [p])
        assert r.errors == {} and len(r.new_nodeclaims) == 1

    def test_hostname_affinity_of_other_volumes_is_kept(self):
        """It("should not ignore hostname affinity when using non-local path volumes")"""
        w = World(pv("csi-pv", {"matchExpressions": [expr(LABEL_HOSTNAME, "In", "random-hostname")]}),
                  pvc("claim", "", volume="csi-pv"))
        p = w.pod(claims=("claim",))
        r = solve(template(), [p])
        assert r.new_nodeclaims == [] and p.key in r.errors

    def test_only_combinations_compatible_across_volumes_are_kept(self):
        """It("should schedule pods when a valid multi-volume topology alternative remains after pruning disjoint branches")"""
        special = fake.LABEL_EXOTIC
        a = storage_class("a", [(special, ["required"])], [(special, ["optional"])])
        b = storage_class("b", [(LABEL_ZONE, ["test-zone-1"]), (special, ["optional"])],
                          [(LABEL_ZONE, ["test-zone-2"]), (special, ["required"])])
        w = World(a, b, pvc("pvc-a", "a"), pvc("pvc-b", "b"))
        p = w.pod(claims=("pvc-a", "pvc-b"))
        assert len(p.volume_requirements.alternatives) == 2  # (required, zone-2) and (optional, zone-1)
        r = solve(template(types=fake_instance_types(5), provider_labels=fake.WELL_KNOWN_LABELS), [p])
        (c,) = r.new_nodeclaims
        assert single(c, LABEL_ZONE) == "test-zone-1"
        assert {it.labels.get(special) for it in c.instance_types} == {"optional"}

    def test_volume_alternatives_combine_with_the_pods_own_node_affinity_terms(self):
        """Two PVCs (zone-1|zone-2 and zone-2|zone-3) and a pod whose first required term allows zone-1 or
        zone-3 and whose second allows zone-2: the volumes leave zone-2 only, so the first term is relaxed
        away and the pod lands in zone-2."""
        w = World(pv("pv-a", zone_term("test-zone-1"), zone_term("test-zone-2")), pvc("a", "", volume="pv-a"),
                  pv("pv-b", zone_term("test-zone-2"), zone_term("test-zone-3")), pvc("b", "", volume="pv-b"))
        p = w.pod(claims=("a", "b"), required=[[expr(LABEL_ZONE, "In", "test-zone-1", "test-zone-3")],
                                              [expr(LABEL_ZONE, "In", "test-zone-2")]])
        r = solve(template(), [p])
        assert r.errors == {}
        assert zone_of(r, p) == "test-zone-2"

    def test_an_existing_node_in_any_allowed_zone_is_used(self):
        w = World(pv("pv", zone_term("test-zone-1"), zone_term("test-zone-2")), pvc("claim", "", volume="pv"))
        p = w.pod(claims=("claim",))
        nodes = [existing_node("in-zone-3", labels={LABEL_ZONE: "test-zone-3"}),
                 existing_node("in-zone-2", labels={LABEL_ZONE: "test-zone-2"})]
        r = solve(template(), [p], existing=nodes)
        assert placement(r, p) == "in-zone-2" and r.new_nodeclaims == []

    def test_volume_zones_do_not_shrink_a_spreads_domains(self):
        """It("should schedule pod with PVC and TSC minDomains=3 when pods are spread across 3 zones")"""
        app = {"app": "tsc-pvc"}
        tsc = [spread(LABEL_ZONE, 1, app, min_domains=3)]
        first = [w_pod for w_pod in (World().pod(f"first-{i}", labels=app, spread=tsc) for i in range(3))]
        r = solve(template(), first)
        assert sorted(zone_of(r, p) for p in first) == ["test-zone-1", "test-zone-2", "test-zone-3"]
        nodes = [existing_node(f"n{i}", labels={LABEL_ZONE: zone_of(r, p)}, bound=[p], cpu=1) for i, p in enumerate(first)]
        w = World(pv("pv", zone_term("test-zone-1")), pvc("claim", "", volume="pv"))
        fourth = w.pod("fourth", claims=("claim",), labels=app, spread=tsc)
        r2 = solve(template(), [fourth], existing=nodes)
        assert r2.errors == {}
        assert zone_of(r2, fourth) == "test-zone-1"


class TestVolumeZones:
    def test_storage_class_zones_incompatible_with_the_pod_leave_it_pending(self):
        """It("should not schedule if storage class zones are incompatible")"""
        w = World(storage_class("zonal", [(LABEL_ZONE, ["test-zone-2", "test-zone-3"])]), pvc("claim", "zonal"))
        p = w.pod(claims=("claim",), node_selector={LABEL_ZONE: "test-zone-1"})
        r = solve(template(), [p])
        assert r.new_nodeclaims == [] and p.key in r.errors

    def test_volume_zones_incompatible_with_the_pod_leave_it_pending(self):
        """It("should not schedule if volume zones are incompatible")"""
        w = World(pv("pv", zone_term("test-zone-3")), pvc("claim", "", volume="pv"))
        p = w.pod(claims=("claim",), node_selector={LABEL_ZONE: "test-zone-1"})
        r = solve(template(), [p])
        assert r.new_nodeclaims == [] and p.key in r.errors

    def test_a_relaxed_node_affinity_term_never_drops_the_volume_zone(self):
        """It("should not relax an added volume topology zone node-selector away")"""
        w = World(pv("pv", zone_term("test-zone-3")), pvc("claim", "", volume="pv"))
        p = w.pod(claims=("claim",), required=[[expr("example.com/label", "In", "unsupported")],
                                               [expr(LABEL_CAPACITY_TYPE, "In", "on-demand")]])
        r = solve(template(), [p])
        assert r.errors == {}
        assert zone_of(r, p) == "test-zone-3"

    def test_an_nfs_volume_pins_the_zone_and_all_pods_share_a_node(self):
        """It("should not fail for NFS volumes"): an NFS PV without a CSI driver, storageClassName "", mounted
        twice by each of 5 pods."""
        w = World(pv("nfs-pv", zone_term("test-zone-1"), nfs=True), pvc("nfs-claim", "", volume="nfs-pv"))
        ps = [w.pod(f"nfs-{i}", claims=("nfs-claim", "nfs-claim"), cpu="100m") for i in range(5)]
        r = solve(template(), ps)
        assert r.errors == {}
        (c,) = r.new_nodeclaims
        assert single(c, LABEL_ZONE) == "test-zone-1"


class TestEphemeralVolumes:
    def test_an_ephemeral_volume_uses_the_claim_named_after_the_pod(self):
        """It("should schedule to storage class zones if volume does not exist (ephemeral volume)")"""
        sc = storage_class("zonal", [(LABEL_ZONE, ["test-zone-2", "test-zone-3"])])
        w = World(sc, pvc("eph-scratch", "zonal"))
        p = w.pod("eph", ephemeral={"scratch": {"storageClassName": "zonal"}},
                  required=[[expr(LABEL_ZONE, "In", "test-zone-1", "test-zone-3")]])
        r = solve(template(), [p])
        assert zone_of(r, p) == "test-zone-3"

    def test_an_ephemeral_volume_with_incompatible_storage_class_zones_stays_pending(self):
        """It("should not schedule if storage class zones are incompatible (ephemeral volume)")"""
        sc = storage_class("zonal", [(LABEL_ZONE, ["test-zone-2", "test-zone-3"])])
        w = World(sc, pvc("eph-scratch", "zonal"))
        p = w.pod("eph", ephemeral={"scratch": {"storageClassName": "zonal"}}, node_selector={LABEL_ZONE: "test-zone-1"})
        r = solve(template(), [p])
        assert r.new_nodeclaims == [] and p.key in r.errors

    def test_an_ephemeral_volume_bound_to_a_zonal_pv_follows_it(self):
        """It("should schedule to volume zones if volume already bound (ephemeral volume)")"""
        w = World(pv("pv", zone_term("test-zone-3")), pvc("eph-scratch", "zonal", volume="pv"))
        p = w.pod("eph", ephemeral={"scratch": {"storageClassName": "zonal"}})
        r = solve(template(), [p])
        assert zone_of(r, p) == "test-zone-3"

    def test_an_ephemeral_volume_bound_to_a_zonal_pv_incompatible_with_the_pod_stays_pending(self):
        """It("should not schedule if volume zones are incompatible (ephemeral volume)")"""
        w = World(pv("pv", zone_term("test-zone-3")), pvc("eph-scratch", "zonal", volume="pv"))
        p = w.pod("eph", ephemeral={"scratch": {"storageClassName": "zonal"}}, node_selector={LABEL_ZONE: "test-zone-1"})
        r = solve(template(), [p])
        assert r.new_nodeclaims == [] and p.key in r.errors

    @pytest.mark.parametrize("kind", ["local", "host_path"])
    def test_an_ephemeral_local_volume_ignores_its_hostname(self, kind):
        """DescribeTable("should ignore hostname affinity scheduling when using local path volumes (ephemeral volume)")"""
        w = World(pv("local-pv", {"matchExpressions": [expr(LABEL_HOSTNAME, "In", "random-hostname")]}, **{kind: True}),
                  pvc("eph-scratch", "local", volume="local-pv"))
        p = w.pod("eph", ephemeral={"scratch": {"storageClassName": "local"}})
        r = solve(template(), [p])
        assert r.errors == {} and len(r.new_nodeclaims) == 1

    @pytest.mark.parametrize("storage_class_name", ["non-existent", ""])
    def test_a_bound_ephemeral_claim_schedules_whatever_its_storage_class(self, storage_class_name):
        """DescribeTable("should launch nodes for pods with ephemeral volume without a storage class when the PVC is bound")"""
        w = World(pv("pv"), pvc("eph-scratch", storage_class_name, volume="pv"))
        p = w.pod("eph", ephemeral={"scratch": {"storageClassName": storage_class_name}})
        assert p.volume_requirements is None or p.volume_requirements.invalid is None
        r = solve(template(), [p])
        assert r.errors == {} and len(r.new_nodeclaims) == 1

    @pytest.mark.parametrize("storage_class_name", ["non-existent", ""])
    def test_an_unbound_ephemeral_claim_without_a_usable_storage_class_is_ignored(self, storage_class_name):
        """DescribeTable("should not launch nodes for pods with ephemeral volume without a storage class when the PVC is unbound"):
        the claim does not exist yet; its template names no usable StorageClass."""
        p = World().pod("eph", ephemeral={"scratch": {"storageClassName": storage_class_name}})
        assert p.volume_requirements.invalid is not None
        r = solve(template(), [p])
        assert r.new_nodeclaims == [] and r.errors[p.key].startswith("ignoring pod, ")


# =============================================================================================
# validation: the claims upstream rejects before scheduling


class TestClaimValidation:
    @pytest.mark.parametrize("objs, claim, why", [
        ((), "missing", 'getting persistent volume claim, persistentvolumeclaims "missing" not found'),
        ((pvc("c", "", volume="gone"),), "c", 'failed to validate pvc, persistentvolumes "gone" not found'),
        ((pv("dying", deleting=True), pvc("c", "", volume="dying")), "c",
         "failed to validate pvc, persistentvolume is being deleted"),
        ((pvc("c", ""),), "c", "unbound pvc must define a storage class"),
        ((pvc("c"),), "c", "unbound pvc must define a storage class"),
        ((pvc("c", "missing-sc"),), "c",
         'failed to validate pvc, failed to get storage class, storageclasses.storage.k8s.io "missing-sc" not found'),
        ((storage_class("now", binding="Immediate"), pvc("c", "now")), "c",
         "failed to validate pvc, pvc with immediate volume binding mode must be bound"),
        ((storage_class("wffc"), pvc("c", "wffc", deleting=True)), "c", "persistentvolumeclaim is being deleted"),
        ((pv("pv"), pvc("c", "", volume="pv", phase="Lost")), "c",
         "persistentvolumeclaim bound to non-existent persistentvolume"),
    ], ids=["pvc-missing", "pv-missing", "pv-deleting", "no-storage-class", "nil-storage-class",
            "storage-class-missing", "immediate-unbound", "pvc-deleting", "pvc-lost"])
    def test_pods_with_claims_kube_scheduler_cannot_satisfy_are_not_scheduled(self, objs, claim, why):
        w = World(*objs)
        p = w.pod(claims=(claim,))
        assert p.volume_requirements.invalid == why
        assert not p.volume_requirements.satisfied_by_labels({LABEL_ZONE: "test-zone-1"})
        r = solve(template(), [p], existing=[existing_node("roomy", cpu=8)])
        assert r.new_nodeclaims == [] and r.existing == {}
        assert r.errors[p.key] == f"ignoring pod, {why}"

    @pytest.mark.parametrize("storage_class_name", ["", "missing-sc"])
    def test_a_bound_claim_needs_no_storage_class(self, storage_class_name):
        """It("should schedule with an empty storage class if the pvc is bound"),
        It("should schedule with a missing storage class if the pvc is bound")"""
        w = World(pv("pv"), pvc("c", storage_class_name, volume="pv"))
        p = w.pod(claims=("c",))
        assert p.volume_requirements is None
        r = solve(template(), [p])
        assert r.errors == {} and len(r.new_nodeclaims) == 1

    def test_volumes_without_claims_impose_nothing(self):
        m = pod_manifest("plain")
        m["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "x"}}]
        assert not has_volume_claims(m)
        assert volume_requirements(m, World().lookup) is None

    def test_the_topology_reads_as_alternatives(self):
        w = World(pv("pv", zone_term("test-zone-1"), zone_term("test-zone-2")), pvc("c", "", volume="pv"))
        vt = w.pod(claims=("c",)).volume_requirements
        assert isinstance(vt, VolumeTopology)
        assert vt.satisfied_by_labels({LABEL_ZONE: "test-zone-2"})
        assert not vt.satisfied_by_labels({LABEL_ZONE: "test-zone-3"})
        assert str(vt) == f"({LABEL_ZONE} In [test-zone-1]) | ({LABEL_ZONE} In [test-zone-2])"
