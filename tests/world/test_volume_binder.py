"""The simulated persistent-volume binder (karpy/simulator/volumes.py): a claim that names its volume is
bound as kube-controller-manager binds it (annotation, phases, claimRef); a volume of another claim is not."""

from __future__ import annotations

from karpy.kube.memory import MemoryAPI
from karpy.runtime.clock import SimClock
from karpy.runtime.manager import Manager
from karpy.simulator.volumes import BIND_COMPLETED, VolumeBinder


def world():
    clock = SimClock(0.0)
    api = MemoryAPI(clock)
    mgr = Manager(api, clock, strict=True)
    mgr.add(VolumeBinder(mgr, api))
    mgr.start()
    return api, mgr


def pv(name: str, claim_ref: dict | None = None) -> dict:
    spec: dict = {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                  "csi": {"driver": "d", "volumeHandle": name}}
    if claim_ref:
        spec["claimRef"] = claim_ref
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}


def pvc(name: str, volume: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                     "volumeName": volume}}


def test_a_claim_naming_its_volume_is_bound():
    api, mgr = world()
    api.create(pv("vol"))
    api.create(pvc("data", "vol"))
    mgr.drain()
    claim = api.get("PersistentVolumeClaim", "data", "default")
    assert claim["metadata"]["annotations"][BIND_COMPLETED] == "yes"
    assert claim["status"]["phase"] == "Bound" and claim["status"]["capacity"] == {"storage": "10Gi"}
    vol = api.get("PersistentVolume", "vol")
    assert vol["status"]["phase"] == "Bound"
    assert vol["spec"]["claimRef"]["name"] == "data" and vol["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"]


def test_the_volume_may_come_after_the_claim():
    api, mgr = world()
    api.create(pvc("data", "vol"))
    mgr.drain()
    assert BIND_COMPLETED not in (api.get("PersistentVolumeClaim", "data", "default")["metadata"].get("annotations") or {})
    api.create(pv("vol"))
    mgr.drain()
    assert api.get("PersistentVolumeClaim", "data", "default")["metadata"]["annotations"][BIND_COMPLETED] == "yes"


def test_a_volume_of_another_claim_is_left_alone():
    api, mgr = world()
    api.create(pv("vol", {"namespace": "default", "name": "other"}))
    api.create(pvc("data", "vol"))
    mgr.drain()
    assert BIND_COMPLETED not in (api.get("PersistentVolumeClaim", "data", "default")["metadata"].get("annotations") or {})
    assert api.get("PersistentVolume", "vol")["spec"]["claimRef"]["name"] == "other"
