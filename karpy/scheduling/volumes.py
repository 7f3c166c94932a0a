"""Volume topology: zonal volumes pin their pods' zone, as upstream's VolumeTopology does.

A claim bound to a PersistentVolume takes the volume's node affinity; an
unbound claim takes its StorageClass's ``allowedTopologies``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .requirements import Requirements

Lookup = Callable[[str, str, str], "Mapping[str, Any] | None"]  # (kind, namespace, name) -> object


def volume_requirements(pod: Mapping[str, Any], lookup: Lookup) -> Requirements | None:
    reqs = None
    ns = (pod.get("metadata") or {}).get("namespace") or "default"
    for v in (pod.get("spec") or {}).get("volumes") or ():
        claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if not claim:
            continue
        pvc = lookup("PersistentVolumeClaim", ns, claim)
        if pvc is None:
            continue
        terms = None
        pv_name = (pvc.get("spec") or {}).get("volumeName")
        pv = lookup("PersistentVolume", "", pv_name) if pv_name else None
        if pv is not None:
            terms = (((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")
        else:
            sc_name = (pvc.get("spec") or {}).get("storageClassName")
            sc = lookup("StorageClass", "", sc_name) if sc_name else None
            topo = (sc or {}).get("allowedTopologies")
            if topo:
                terms = [{"matchExpressions": [{"key": e["key"], "operator": "In", "values": e.get("values", [])}
                                               for e in t.get("matchLabelExpressions") or ()]} for t in topo]
        if terms:
            r = Requirements.from_node_selector(terms[0].get("matchExpressions") or ())
            reqs = r if reqs is None else reqs.union(r)
    return reqs


def has_volume_claims(pod: Mapping[str, Any]) -> bool:
    return any((v.get("persistentVolumeClaim") or {}).get("claimName")
               for v in (pod.get("spec") or {}).get("volumes") or ())
