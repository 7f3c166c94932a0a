"""`karpy simulate` with volumes and restricted node constraints: what a user reads back.

End-to-end counterparts of tests/test_volumes.py and tests/controllers/test_provisioning_validation.py:
the simulated kube-scheduler binds (or refuses) as the real one would, so the pods' final nodes and
pending reasons are what a cluster would show.
"""

from __future__ import annotations

from test_simulate import kwok, label, pod, run  # noqa: F401  (run is a fixture)

ZONE = "topology.kubernetes.io/zone"


def _pv(name: str, *zones_per_term: list[str]) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "zonal",
                     "csi": {"driver": "disk.example.com", "volumeHandle": name},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [
                         {"matchExpressions": [{"key": ZONE, "operator": "In", "values": list(z)}]} for z in zones_per_term]}}}}


def _pvc(name: str, volume: str | None = None, storage_class: str = "zonal") -> dict:
    spec: dict = {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                  "resources": {"requests": {"storage": "1Gi"}}}
    if volume:
        spec["volumeName"] = volume
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
            "spec": spec}


STORAGE_CLASS = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "zonal"},
                 "provisioner": "disk.example.com", "volumeBindingMode": "WaitForFirstConsumer"}


def _with_claim(name: str, claim: str, **kw) -> dict:
    return pod(name, cpu="1", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}], **kw)


def test_pvs_with_two_zone_terms_let_anti_affine_pods_run_in_both_zones(run):
    app = {"app": "db"}
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": ZONE, "labelSelector": {"matchLabels": app}}]}}
    docs = [STORAGE_CLASS]
    for i in range(2):
        docs += [_pv(f"pv-{i}", ["test-zone-a"], ["test-zone-b"]), _pvc(f"data-{i}", f"pv-{i}"),
                 _with_claim(f"db-{i}", f"data-{i}", labels=app, affinity=anti)]
    out = run(kwok(*docs))
    assert out.pending() == {}
    zones = {label(out.node_of(out.pods[f"db-{i}"]), ZONE) for i in range(2)}
    assert zones == {"test-zone-a", "test-zone-b"}


def test_a_pod_whose_claim_does_not_exist_stays_pending_and_others_run(run):
    out = run(kwok(_with_claim("orphan", "nowhere"), pod("plain", cpu="1")))
    assert out.pods["plain"]["spec"].get("nodeName")
    assert not out.pods["orphan"]["spec"].get("nodeName")  # kube-scheduler cannot bind it either
    assert out.pending() == {"orphan": 'ignoring pod, getting persistent volume claim, '
                                       'persistentvolumeclaims "nowhere" not found'}
    assert len(out.summary_claims) == 1


def test_a_pod_pinned_to_a_hostname_is_ignored(run):
    p = pod("pinned", cpu="1", nodeSelector={"kubernetes.io/hostname": "some-node"})
    out = run(kwok(p))
    assert out.summary_claims == []
    assert out.pending()["pinned"].startswith("ignoring pod, using label kubernetes.io/hostname is not allowed")


def test_a_claim_naming_its_volume_is_bound_by_the_simulated_pv_binder(run):
    """As kube-controller-manager's persistent-volume binder does: the claim is annotated bind-completed and
    Bound, the volume gets its claimRef; only then do kube-scheduler and Karpenter treat it as bound, so the
    pod lands in the volume's zone."""
    out = run(kwok(STORAGE_CLASS, _pv("pv-b", ["test-zone-b"]), _pvc("data", "pv-b"), _with_claim("db", "data")))
    assert out.pending() == {}
    assert label(out.node_of(out.pods["db"]), ZONE) == "test-zone-b"


def test_a_volume_claimed_by_another_claim_leaves_the_pod_pending(run):
    pv = _pv("pv-b", ["test-zone-b"])
    pv["spec"]["claimRef"] = {"namespace": "default", "name": "someone-else"}
    out = run(kwok(STORAGE_CLASS, pv, _pvc("data", "pv-b"), _with_claim("db", "data")))
    assert out.pending() == {"db": "ignoring pod, pvc is considered unbound because it does not contain annotation"}
