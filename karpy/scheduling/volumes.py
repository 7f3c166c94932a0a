"""Volumes: which pods the provisioner must ignore, and where the others' volumes let them run.

As upstream's ``VolumeTopology`` (provisioning/scheduling/volumetopology.go) does:

* **Validation.** A pod whose claims kube-scheduler could never satisfy is ignored by the
  provisioner (no capacity is launched for it): a claim that does not exist, is being deleted
  or is ``Lost``; a bound claim whose PersistentVolume does not exist or is being deleted; an
  unbound claim without a StorageClass, naming one that does not exist, or whose StorageClass
  binds ``Immediate``\\ ly. :attr:`VolumeTopology.invalid` says why, in upstream's words.
* **Topology.** A bound claim takes its PersistentVolume's ``nodeAffinity`` terms, an unbound
  one its StorageClass's ``allowedTopologies`` terms. Terms are ORed: each is one *alternative*.
  Local and hostPath volumes lose their hostname expressions (the pod is being placed anew; a
  term that only named the hostname becomes an unconstrained alternative). A pod with several
  claims gets the cross product of their alternatives, keeping only the combinations whose
  requirements can hold together (all of them, when none can). The scheduler tries the
  alternatives in order on each node; they narrow the node, never the pod's own requirements
  (so topology spread domains are judged on the pod's own affinity, as upstream does).

Generic ephemeral volumes use the claim ``<pod>-<volume>``. The ephemeral-volume controller
creates it as soon as the pod exists; until it has, the claim the volume's template describes
is assumed when the template names its StorageClass (karpy's simulated cluster has no such
controller; with no StorageClass named the volume imposes nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .requirements import IN, Requirements

Lookup = Callable[[str, str, str], "Mapping[str, Any] | None"]  # (kind, namespace, name) -> object

LABEL_HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True, eq=False)
class VolumeTopology:
    """What a pod's volumes ask of its node: ORed alternatives, or why the pod cannot be placed."""

    alternatives: tuple[Requirements, ...] = ()  # () = no constraint
    invalid: str | None = None

    def satisfied_by_labels(self, labels: Mapping[str, str]) -> bool:
        if self.invalid is not None:
            return False
        return not self.alternatives or any(a.satisfied_by_labels(labels) for a in self.alternatives)

    def signature(self) -> tuple:
        return (self.invalid, tuple(a.signature() for a in self.alternatives))

    def __str__(self) -> str:
        if self.invalid is not None:
            return f"invalid: {self.invalid}"
        return " | ".join(f"({a})" for a in self.alternatives) or "<none>"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def claim_name(pod: Mapping[str, Any], volume: Mapping[str, Any]) -> str | None:
    """The PersistentVolumeClaim a pod volume uses (generic ephemeral volumes: ``<pod>-<volume>``)."""
    pvc = volume.get("persistentVolumeClaim")
    if pvc is not None:
        return pvc.get("claimName") or None
    if volume.get("ephemeral") is not None:
        return f"{_meta(pod).get('name', '')}-{volume.get('name', '')}"
    return None


def has_volume_claims(pod: Mapping[str, Any]) -> bool:
    return any(v.get("persistentVolumeClaim") is not None or v.get("ephemeral") is not None
               for v in _spec(pod).get("volumes") or ())


def _claim(pod: Mapping[str, Any], volume: Mapping[str, Any], ns: str, lookup: Lookup) -> Mapping[str, Any] | None:
    name = claim_name(pod, volume)
    if name is None:
        return None
    pvc = lookup("PersistentVolumeClaim", ns, name)
    if pvc is None and volume.get("ephemeral") is not None:
        tmpl = (volume["ephemeral"].get("volumeClaimTemplate") or {})
        if _spec(tmpl).get("storageClassName") is not None:
            # the claim the ephemeral-volume controller is about to create
            return {"metadata": {"name": name, "namespace": ns}, "spec": dict(_spec(tmpl))}
    return pvc


BIND_COMPLETED = "pv.kubernetes.io/bind-completed"


def _not_found(resource: str, name: str) -> str:
    return f'{resource} "{name}" not found'


def _validate_claim(pvc: Mapping[str, Any], lookup: Lookup) -> str | None:
    """Why upstream's ValidatePersistentVolumeClaims rejects this claim, or None."""
    spec = _spec(pvc)
    if _meta(pvc).get("deletionTimestamp"):
        return "persistentvolumeclaim is being deleted"
    if (pvc.get("status") or {}).get("phase") == "Lost":
        return "persistentvolumeclaim bound to non-existent persistentvolume"
    sc_name = spec.get("storageClassName") or ""
    pv_name = spec.get("volumeName") or ""
    if pv_name:
        pv = lookup("PersistentVolume", "", pv_name)
        if pv is None:
            return f"failed to validate pvc, {_not_found('persistentvolumes', pv_name)}"
        if _meta(pv).get("deletionTimestamp"):
            return "failed to validate pvc, persistentvolume is being deleted"
        # kube-scheduler treats a claim naming its volume as bound only once the persistent-volume controller
        # has completed the binding (its annotation); until then upstream leaves the pod alone
        if BIND_COMPLETED not in (_meta(pvc).get("annotations") or {}):
            return "pvc is considered unbound because it does not contain annotation"
        return None
    if not sc_name:
        return "unbound pvc must define a storage class"
    sc = lookup("StorageClass", "", sc_name)
    if sc is None:
        return f"failed to validate pvc, failed to get storage class, {_not_found('storageclasses.storage.k8s.io', sc_name)}"
    if (sc.get("volumeBindingMode") or "Immediate") == "Immediate":
        return "failed to validate pvc, pvc with immediate volume binding mode must be bound"
    return None


def _pv_alternatives(pv: Mapping[str, Any]) -> list[Requirements]:
    spec = _spec(pv)
    terms = (((spec.get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")) or ()
    local = spec.get("local") is not None or spec.get("hostPath") is not None
    out: list[Requirements] = []
    for t in terms:
        exprs = list(t.get("matchExpressions") or ())
        if local:
            kept = [e for e in exprs if e.get("key") != LABEL_HOSTNAME]
            if exprs and not kept:
                out.append(Requirements())  # only the old node's name: any node will do
                continue
            exprs = kept
        if exprs:
            out.append(Requirements.from_node_selector(exprs))
    return out


def _storage_class_alternatives(sc: Mapping[str, Any]) -> list[Requirements]:
    out: list[Requirements] = []
    for t in sc.get("allowedTopologies") or ():
        exprs = [{"key": e["key"], "operator": IN, "values": list(e.get("values") or ())}
                 for e in t.get("matchLabelExpressions") or ()]
        if exprs:
            out.append(Requirements.from_node_selector(exprs))
    return out


def _merge(alternatives: list[Requirements | None], more: list[Requirements]) -> list[Requirements | None]:
    pairs = [(a, b) for a in alternatives for b in more]
    compatible = [(a, b) for a, b in pairs if a is None or a.intersects(b) is None]
    return [b if a is None else a.union(b) for a, b in (compatible or pairs)]


def volume_requirements(pod: Mapping[str, Any], lookup: Lookup) -> VolumeTopology | None:
    """The pod's volume topology; None when its volumes impose nothing (or it has none)."""
    ns = _meta(pod).get("namespace") or "default"
    alternatives: list[Requirements | None] = [None]
    for v in _spec(pod).get("volumes") or ():
        name = claim_name(pod, v)
        if name is None:
            continue
        pvc = _claim(pod, v, ns, lookup)
        if pvc is None:
            if v.get("ephemeral") is not None:
                continue  # no claim yet and its template names no StorageClass: nothing to go by
            return VolumeTopology(invalid=f"getting persistent volume claim, {_not_found('persistentvolumeclaims', name)}")
        why = _validate_claim(pvc, lookup)
        if why is not None:
            return VolumeTopology(invalid=why)
        spec = _spec(pvc)
        if spec.get("volumeName"):
            more = _pv_alternatives(lookup("PersistentVolume", "", spec["volumeName"]) or {})
        else:
            more = _storage_class_alternatives(lookup("StorageClass", "", spec.get("storageClassName") or "") or {})
        if more:
            alternatives = _merge(alternatives, more)
    if alternatives == [None]:
        return None
    return VolumeTopology(tuple(a if a is not None else Requirements() for a in alternatives))


# --- volume limits (CSINode) -------------------------------------------------------------------

# in-tree volume plugins and the CSI drivers they migrated to (Kubernetes' csi-translation-lib), so a volume
# provisioned by an in-tree StorageClass counts against the CSI driver's limit on the node
IN_TREE_TO_CSI = {
    "kubernetes.io/aws-ebs": "ebs.csi.aws.com",
    "kubernetes.io/gce-pd": "pd.csi.storage.gke.io",
    "kubernetes.io/azure-disk": "disk.csi.azure.com",
    "kubernetes.io/azure-file": "file.csi.azure.com",
    "kubernetes.io/cinder": "cinder.csi.openstack.org",
    "kubernetes.io/vsphere-volume": "csi.vsphere.vmware.com",
    "kubernetes.io/portworx-volume": "pxd.portworx.com",
}


def _driver(pvc: Mapping[str, Any], lookup: Lookup) -> str:
    """The CSI driver a claim's volume counts against ("" when none is known), as upstream's ResolveDriver: a bound
    claim's PersistentVolume (its CSI driver, or the EBS driver for an in-tree EBS volume), else its StorageClass's
    provisioner (an in-tree one translated to its CSI driver)."""
    spec = _spec(pvc)
    if spec.get("volumeName"):
        pv = lookup("PersistentVolume", "", str(spec["volumeName"]))
        pvs = _spec(pv) if pv is not None else {}
        if pvs.get("csi") is not None:
            return str(pvs["csi"].get("driver") or "")
        if pvs.get("awsElasticBlockStore") is not None:
            return IN_TREE_TO_CSI["kubernetes.io/aws-ebs"]
        return ""
    name = spec.get("storageClassName")
    if not name:
        return ""  # no StorageClass: the claim was bound once and its volume is gone
    sc = lookup("StorageClass", "", str(name))
    if sc is None:
        return ""
    prov = str(sc.get("provisioner") or "")
    return IN_TREE_TO_CSI.get(prov, prov)


def volume_usage(pod: Mapping[str, Any], lookup: Lookup) -> dict[str, frozenset[str]] | None:
    """The volumes the pod mounts, by the CSI driver whose per-node limit (CSINode ``allocatable.count``) they count
    against: driver -> ``namespace/claim`` names. Claims that do not exist (yet) count nothing, as upstream."""
    ns = str(_meta(pod).get("namespace") or "default")
    out: dict[str, set[str]] = {}
    for v in _spec(pod).get("volumes") or ():
        name = claim_name(pod, v)
        if name is None:
            continue
        pvc = lookup("PersistentVolumeClaim", ns, name)
        if pvc is None:
            continue
        driver = _driver(pvc, lookup)
        if driver:
            out.setdefault(driver, set()).add(f"{ns}/{name}")
    return {d: frozenset(ids) for d, ids in out.items()} or None


def exceeds_limits(used: Mapping[str, "set[str] | frozenset[str]"], limits: Mapping[str, int]) -> str | None:
    """Why ``used`` is over a node's volume limits (upstream's VolumeUsage.ExceedsLimits), or None."""
    for driver, ids in used.items():
        limit = limits.get(driver)
        if limit is not None and len(ids) > limit:
            return f"would exceed volume limit, provisioner {driver}, volume-count {len(ids)}, volume-limit {limit}"
    return None
