"""Volume rows of upstream's scheduling suite (kubernetes-sigs/karpenter
pkg/controllers/provisioning/scheduling/suite_test.go, VolumeUsage) that need the API server's DefaultStorageClass
admission: a claim created without a StorageClass gets the newest default one, and its provisioner's CSINode limit
is the one the claim counts against. karpy's in-memory API server (``karpy simulate``, ``karpy sandbox``) admits
claims as kube-apiserver does; against a real cluster the claims arrive already admitted.
"""

from __future__ import annotations

import pytest

from controllers.harness import Harness, pod
from test_world_conformance import _csinode, _running_node_for as _running_node
from karpy.kube.memory import MemoryAPI
from karpy.runtime.clock import SimClock

CSI = "fake.csi.provider"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"


def _storage_class(name: str, provisioner: str, default: bool = True) -> dict:
    meta: dict = {"name": name}
    if default:
        meta["annotations"] = {DEFAULT_CLASS: "true"}
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": meta, "provisioner": provisioner,
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [
                {"key": "topology.kubernetes.io/zone", "values": ["test-zone-a"]}]}]}


def _claim(name: str, storage_class: str | None = None) -> dict:
    """A claim as upstream's test.PersistentVolumeClaim makes it: no storageClassName unless one is given."""
    spec: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
            "spec": spec}


def _ephemeral_pod(name: str) -> dict:
    """A pending pod with a generic ephemeral volume whose template names no StorageClass."""
    tmpl = {"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    return pod(name, cpu="100m", unschedulable=True,
               volumes=[{"name": "tmp-ephemeral", "ephemeral": {"volumeClaimTemplate": tmpl}}])


def _provision(h: Harness, obj: dict) -> None:
    h.create(obj)
    h.reconcile("provisioner.trigger.pod", f"default/{obj['metadata']['name']}")
    h.tick(h.settings.batch_idle)
    h.reconcile("provisioner")


def _nominated(h: Harness, name: str) -> str | None:
    evs = h.events("Nominated", involved=name)
    return evs[-1]["message"].rsplit("/", 1)[-1] if evs else None


@pytest.mark.parametrize("newest", [CSI, "other-provider"])
def test_an_ephemeral_volume_without_a_class_counts_against_the_newest_default_classes_driver(newest):
    """It("should launch nodes for pods with ephemeral volume using the newest storage class"): two default
    StorageClasses, the second created two seconds after the first; the pods' ephemeral volumes name no class, so
    their claims take the newest default. The node's CSINode lets fake.csi.provider attach one volume and
    other-provider ten: with fake.csi.provider the newest default, the first pod's volume uses up the node and the
    second pod gets a new NodeClaim; with other-provider the newest, the second pod shares the node."""
    older = "other-provider" if newest == CSI else CSI
    h = Harness()
    h.setup()
    h.create(_storage_class("default-storage-class", older))
    h.tick(2)
    h.create(_storage_class("newer-default-storage-class", newest))
    h.create(_claim("first-tmp-ephemeral"))
    assert h.get("PersistentVolumeClaim", "first-tmp-ephemeral", "default")["spec"]["storageClassName"] == \
        "newer-default-storage-class"
    _provision(h, _ephemeral_pod("first"))
    node = _running_node(h, "first")
    h.create(_csinode(node, **{CSI: 1, "other-provider": 10}))
    h.create(_claim("second-tmp-ephemeral"))
    _provision(h, _ephemeral_pod("second"))
    shares = _nominated(h, "second") == node
    assert len(h.nodeclaims()) == (1 if shares else 2)
    assert shares is (newest == "other-provider")


def test_the_default_class_admission_keeps_an_explicit_class_and_breaks_ties_by_name():
    """kube-apiserver's DefaultStorageClass admission: a claim naming a class (or "" for none) keeps it; a claim
    naming none takes the newest default, the first by name among defaults created at the same time; without a
    default class it stays without one."""
    api = MemoryAPI(SimClock(1_700_000_000.0))
    api.create(_claim("before-any-default"))
    assert "storageClassName" not in api.get("PersistentVolumeClaim", "before-any-default", "default")["spec"]
    api.create(_storage_class("not-default", CSI, default=False))
    api.create(_storage_class("zz", CSI))
    api.create(_storage_class("aa", CSI))
    api.create(_claim("defaulted"))
    api.create(_claim("explicit", "not-default"))
    api.create(_claim("none", ""))
    got = {n: api.get("PersistentVolumeClaim", n, "default")["spec"].get("storageClassName")
           for n in ("defaulted", "explicit", "none")}
    assert got == {"defaulted": "aa", "explicit": "not-default", "none": ""}
