"""AKSNodeClass status, conditions, hash annotations and drift, with karpy's Azure provider on the fake ARM
(real SDK clients) and an in-memory stand-in for the Kubernetes API."""

from __future__ import annotations

import copy

import pytest

from karpy.cloudprovider.arm.nodeclass import HASH_VERSION_ANNOTATION, NodeClassController
from karpy.cloudprovider.arm.provider import NODECLASS_HASH_ANNOTATION
from karpy.kube import errors as E

from .conftest import make_provider
from .fakearm import CIG_UBUNTU

GALLERY = f"/CommunityGalleries/{CIG_UBUNTU}/images"


class Store:
    """What the controller reads (mgr.get / list) and writes (api.patch / get) of the cluster."""

    def __init__(self):
        self.objs: dict[tuple[str, str], dict] = {}
        self.events: list[tuple[str, str, str]] = []
        self.logs: list[tuple[str, str, dict]] = []

    def add(self, obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        self.objs[(obj["kind"], obj["metadata"]["name"])] = obj
        return obj

    # mgr
    def get(self, kind: str, name: str, namespace: str = "") -> dict | None:
        obj = self.objs.get((kind, name))
        if obj is None and namespace:
            raise E.NotFound(f'{kind} "{name}" not found')
        return copy.deepcopy(obj)

    def list(self, kind: str) -> list[dict]:
        return [copy.deepcopy(o) for (k, _), o in self.objs.items() if k == kind]

    # api
    def patch(self, kind: str, name: str, body: dict, namespace: str = "", subresource: str = "") -> dict:
        obj = self.objs[(kind, name)]
        if "status" in body:
            obj["status"] = copy.deepcopy(body["status"])
        for k, v in ((body.get("metadata") or {}).get("annotations") or {}).items():
            obj["metadata"].setdefault("annotations", {})[k] = v
        return obj

    # recorder / log
    def publish(self, obj_ref, reason, message, etype="Normal", **kw):
        self.events.append((etype, reason, message))

    def info(self, msg, **kv):
        self.logs.append(("info", msg, kv))

    def error(self, msg, **kv):
        self.logs.append(("error", msg, kv))


@pytest.fixture
def world(fake, env):
    store = Store()
    version = {"v": "1.33.2"}
    p, clock = make_provider(store.get, lambda: {"ca": "Q0EgUEVN", "version": version["v"]})
    ctrl = NodeClassController(store, store, p, lambda: version["v"], clock, store, store)
    store.add({"kind": "AKSNodeClass", "metadata": {"name": "default", "generation": 1},
               "spec": {"imageFamily": "Ubuntu2204"}})
    yield store, ctrl, p, version, clock
    p.close()


def conds(store, name="default") -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason")) for c in store.objs[("AKSNodeClass", name)]["status"]["conditions"]}


def nodeclass(store, name="default") -> dict:
    return store.objs[("AKSNodeClass", name)]


def test_status_images_version_conditions_and_hash(world):
    store, ctrl, p, version, clock = world
    assert ctrl.reconcile("default") == 300.0
    nc = nodeclass(store)
    st = nc["status"]
    assert st["kubernetesVersion"] == "1.33.2"
    assert [i["id"] for i in st["images"]] == [f"{GALLERY}/2204gen2containerd/versions/202506.01.0",
                                               f"{GALLERY}/2204containerd/versions/202506.01.0",
                                               f"{GALLERY}/2204gen2arm64containerd/versions/202506.01.0"]
    assert st["images"][2]["requirements"] == [
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
        {"key": "karpenter.azure.com/sku-hyperv-generation", "operator": "In", "values": ["2"]}]
    assert conds(store) == {"ImagesReady": ("True", "ImagesReady"), "KubernetesVersionReady": ("True", "KubernetesVersionReady"),
                            "SubnetsReady": ("True", "SubnetsReady"), "ValidationSucceeded": ("True", "ValidationSucceeded"),
                            "LocalDNSReady": ("True", "LocalDNSReady"), "Ready": ("True", "Ready")}
    assert all(c["observedGeneration"] == 1 for c in st["conditions"]) and st["localDNSState"] == "Disabled"
    ann = nc["metadata"]["annotations"]
    assert ann[HASH_VERSION_ANNOTATION] == "karpy-v1" and len(ann[NODECLASS_HASH_ANNOTATION]) > 8
    assert ("info", "nodeclass ready") in [(lvl, m) for lvl, m, _ in store.logs]


def test_launch_uses_the_status_image_for_the_size(world, fake):
    store, ctrl, p, version, clock = world
    ctrl.reconcile("default")
    fake.publish_image(CIG_UBUNTU, "2204gen2arm64containerd", "202507.01.0", "2025-07-02T00:00:00Z")
    it = next(t for t in p.get_instance_types({}, nodeclass(store)) if t.name == "Standard_D2pls_v6")
    assert p.image_id(nodeclass(store), it) == f"{GALLERY}/2204gen2arm64containerd/versions/202506.01.0"


def test_a_kubernetes_upgrade_moves_images_and_is_never_undone(world, fake):
    store, ctrl, p, version, clock = world
    ctrl.reconcile("default")
    fake.publish_image(CIG_UBUNTU, "2204gen2arm64containerd", "202507.01.0", "2025-07-02T00:00:00Z")
    version["v"] = "1.34.1"  # the cluster is upgraded: Ubuntu2204 stays, its images move to the newest at once
    ctrl.reconcile("default")
    st = nodeclass(store)["status"]
    assert st["kubernetesVersion"] == "1.34.1" and st["images"][2]["id"].endswith("/versions/202507.01.0")
    assert conds(store)["ImagesReady"] == ("True", "ImagesReady")
    version["v"] = "1.33.9"  # never downgraded
    ctrl.reconcile("default")
    assert nodeclass(store)["status"]["kubernetesVersion"] == "1.34.1"
    assert any(m == "kubernetes upgrade detected" for _, m, _ in store.logs)


def test_unready_conditions_carry_upstreams_reasons_an_event_and_a_log_line(world, fake):
    store, ctrl, p, version, clock = world
    store.add({"kind": "AKSNodeClass", "metadata": {"name": "fips", "generation": 2},
               "spec": {"imageFamily": "Ubuntu2204", "fipsMode": "FIPS"}})
    ctrl.reconcile("fips")
    assert conds(store, "fips")["ImagesReady"] == ("False", "SIGRequiredForFIPS")
    ready = next(c for c in nodeclass(store, "fips")["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "UnhealthyDependents") and "ImagesReady=False" in ready["message"]
    assert ("Warning", "SIGRequiredForFIPS") in [(e[0], e[1]) for e in store.events]
    assert any(lvl == "error" and kv.get("reason") == "SIGRequiredForFIPS" for lvl, _, kv in store.logs)
    store.add({"kind": "AKSNodeClass", "metadata": {"name": "subnet"}, "spec": {
        "vnetSubnetID": "/subscriptions/12345678-1234-1234-1234-123456789012/resourceGroups/rg-net/providers/"
                        "Microsoft.Network/virtualNetworks/vnet-1/subnets/gone"}})
    ctrl.reconcile("subnet")
    assert conds(store, "subnet")["SubnetsReady"] == ("False", "SubnetNotFound")
    store.add({"kind": "AKSNodeClass", "metadata": {"name": "badid"}, "spec": {"vnetSubnetID": "subnet-1"}})
    ctrl.reconcile("badid")
    assert conds(store, "badid")["SubnetsReady"] == ("False", "SubnetIDInvalid")
    # the identity may not read the gallery: the condition names Azure's code
    fake.fail("cig", "AuthorizationFailed", "The client does not have authorization to perform action "
              "'Microsoft.Compute/locations/communityGalleries/images/versions/read'", status=403, times=50)
    store.add({"kind": "AKSNodeClass", "metadata": {"name": "azl"}, "spec": {"imageFamily": "AzureLinux"}})
    ctrl.reconcile("azl")
    assert conds(store, "azl")["ImagesReady"] == ("False", "AuthorizationFailed")
    assert conds(store, "azl")["Ready"] == ("False", "UnhealthyDependents")


def test_switching_from_upstreams_hash_version_restamps_nodeclaims_without_drifting_them(world):
    store, ctrl, p, version, clock = world
    nc = nodeclass(store)
    nc["metadata"]["annotations"] = {NODECLASS_HASH_ANNOTATION: "1234567890", HASH_VERSION_ANNOTATION: "v3"}
    ref_ = {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"}
    store.add({"kind": "NodeClaim", "metadata": {"name": "a", "annotations": {
        NODECLASS_HASH_ANNOTATION: "1234567890", HASH_VERSION_ANNOTATION: "v3"}}, "spec": {"nodeClassRef": ref_}})
    store.add({"kind": "NodeClaim", "metadata": {"name": "b", "annotations": {
        NODECLASS_HASH_ANNOTATION: "1111", HASH_VERSION_ANNOTATION: "v3"}}, "spec": {"nodeClassRef": ref_},
        "status": {"conditions": [{"type": "Drifted", "status": "True"}]}})
    ctrl.reconcile("default")
    want = nodeclass(store)["metadata"]["annotations"][NODECLASS_HASH_ANNOTATION]
    a = store.objs[("NodeClaim", "a")]["metadata"]["annotations"]
    b = store.objs[("NodeClaim", "b")]["metadata"]["annotations"]
    assert a == {NODECLASS_HASH_ANNOTATION: want, HASH_VERSION_ANNOTATION: "karpy-v1"}
    assert b == {NODECLASS_HASH_ANNOTATION: "1111", HASH_VERSION_ANNOTATION: "karpy-v1"}  # stays drifted
    assert p.is_drifted(store.objs[("NodeClaim", "a")], nodeclass(store)) is None
    assert p.is_drifted(store.objs[("NodeClaim", "b")], nodeclass(store)) == "NodeClassDrift"


def test_drift_on_kubernetes_version_identity_and_image(world, fake, monkeypatch):
    store, ctrl, p, version, clock = world
    ctrl.reconcile("default")
    image = nodeclass(store)["status"]["images"][2]["id"]
    store.add({"kind": "Node", "metadata": {"name": "aks-a", "labels": {}},
               "status": {"nodeInfo": {"kubeletVersion": "v1.33.2"}}})
    claim = {"metadata": {"name": "a", "annotations": {}}, "status": {"nodeName": "aks-a", "imageID": image}}
    assert p.is_drifted(claim, nodeclass(store)) is None
    version["v"] = "1.34.0"  # the control plane is upgraded: the node's kubelet is behind
    ctrl.reconcile("default")
    assert p.is_drifted(claim, nodeclass(store)) == "K8sVersionDrift"
    store.objs[("Node", "aks-a")]["status"]["nodeInfo"]["kubeletVersion"] = "v1.34.0"
    # the upgrade moved the images to 1.34's newest: same versions here, so no image drift
    assert p.is_drifted(claim, nodeclass(store)) is None
    fake.publish_image(CIG_UBUNTU, "2204gen2arm64containerd", "202507.01.0", "2025-07-02T00:00:00Z")
    clock.t += 600
    ctrl.reconcile("default")  # no maintenance window configured: images follow the newest
    assert p.is_drifted(claim, nodeclass(store)) == "ImageDrift"
    monkeypatch.setattr(p.s, "kubelet_identity_client_id", "22222222-2222-2222-2222-222222222222")
    store.objs[("Node", "aks-a")]["metadata"]["labels"]["kubernetes.azure.com/kubelet-identity-client-id"] = \
        "33333333-3333-3333-3333-333333333333"
    assert p.is_drifted(claim, nodeclass(store)) == "KubeletIdentityDrift"
