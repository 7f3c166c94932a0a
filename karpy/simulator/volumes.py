"""The persistent-volume binder of the simulated world (kube-controller-manager's persistentvolume-binder).

A claim that names its volume (``spec.volumeName``) is bound once the binder has completed the binding: it
annotates the claim ``pv.kubernetes.io/bind-completed``, sets both sides' phase to ``Bound`` and fills in the
volume's ``claimRef``. kube-scheduler, and Karpenter after it, treat such a claim as unbound until then. On a
real cluster kube-controller-manager does it within seconds; here it happens at once. A volume already
claimed by another claim is left alone (the claim stays unbound, as it would).

Claims without a volume (dynamically provisioned, WaitForFirstConsumer) are not this binder's business: the
simulated world places their pods by their StorageClass's topology alone.
"""

from __future__ import annotations

from typing import Any

from ..kube.port import DELETED
from ..runtime.manager import Manager, deleting

BIND_COMPLETED = "pv.kubernetes.io/bind-completed"


class VolumeBinder:
    name = "world.pv-binder"

    def __init__(self, mgr: Manager, api: Any):
        self.mgr = mgr
        self.api = api

    def setup(self, mgr: Manager) -> None:
        mgr.watch("PersistentVolumeClaim", self._on_claim)
        mgr.watch("PersistentVolume", self._on_volume)

    def _on_claim(self, etype: str, obj: dict, old: dict | None) -> None:
        meta = obj["metadata"]
        if etype != DELETED and (obj.get("spec") or {}).get("volumeName") and \
                BIND_COMPLETED not in (meta.get("annotations") or {}):
            self.mgr.enqueue(self, (meta.get("namespace") or "default", meta["name"]))

    def _on_volume(self, etype: str, obj: dict, old: dict | None) -> None:
        ref = (obj.get("spec") or {}).get("claimRef") or {}
        if etype != DELETED and ref.get("name"):
            self.mgr.enqueue(self, (ref.get("namespace") or "default", ref["name"]))
        elif etype != DELETED:  # a volume that appeared after the claim naming it
            for c in self.mgr.list("PersistentVolumeClaim"):
                if (c.get("spec") or {}).get("volumeName") == obj["metadata"]["name"]:
                    self._on_claim(etype, c, None)

    def reconcile(self, key: tuple[str, str]) -> float | None:
        ns, name = key
        pvc = self.mgr.get("PersistentVolumeClaim", name, ns)
        if pvc is None or deleting(pvc):
            return None
        meta, spec = pvc["metadata"], pvc.get("spec") or {}
        vol = spec.get("volumeName")
        if not vol or BIND_COMPLETED in (meta.get("annotations") or {}):
            return None
        pv = self.mgr.get("PersistentVolume", vol)
        if pv is None or deleting(pv):
            return None
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        if ref.get("name") and (ref.get("name"), ref.get("namespace") or "default") != (name, ns):
            return None  # the volume belongs to another claim
        if ref.get("uid") and ref["uid"] != meta.get("uid"):
            return None
        if not ref.get("uid"):
            self.api.patch("PersistentVolume", vol, {"spec": {"claimRef": {
                "kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": ns, "name": name,
                "uid": meta.get("uid", "")}}})
        if (pv.get("status") or {}).get("phase") != "Bound":
            self.api.patch("PersistentVolume", vol, {"status": {"phase": "Bound"}}, subresource="status")
        self.api.patch("PersistentVolumeClaim", name, {"metadata": {"annotations": {BIND_COMPLETED: "yes"}}}, ns)
        status: dict = {"phase": "Bound"}
        cap = (pv.get("spec") or {}).get("capacity")
        if cap:
            status["capacity"] = dict(cap)
        if spec.get("accessModes"):
            status["accessModes"] = list(spec["accessModes"])
        self.api.patch("PersistentVolumeClaim", name, {"status": status}, ns, subresource="status")
        return None
