"""NodeClaim templates: what each NodePool can launch, as the scheduler needs it."""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from .. import resources as res
from ..cloudprovider.types import LABEL_CAPACITY_TYPE, LABEL_NODEPOOL, LABEL_ZONE, InstanceType
from ..scheduling.pods import PodInfo, Taint, untolerated
from ..scheduling.requirements import IN, Requirement, Requirements
from ..scheduling.scheduler import CORE_WELL_KNOWN_LABELS, NodeClaimTemplate, launched_node_requirements


def nodepool_requirements(nodepool: Mapping) -> Requirements:
    """The NodePool's requirements, its template labels (as ``In``) and its own name."""
    spec = (nodepool.get("spec") or {}).get("template") or {}
    reqs = Requirements.from_node_selector((spec.get("spec") or {}).get("requirements") or ())
    for k, v in ((spec.get("metadata") or {}).get("labels") or {}).items():
        reqs.add(Requirement.new(str(k), IN, [str(v)]))
    reqs.add(Requirement.new(LABEL_NODEPOOL, IN, [nodepool["metadata"]["name"]]))
    return reqs


def nodepool_taints(nodepool: Mapping, field: str = "taints") -> tuple[Taint, ...]:
    spec = ((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}
    return tuple(Taint.from_obj(t) for t in spec.get(field) or ())


def compatible_instance_types(reqs: Requirements, instance_types: Iterable[InstanceType]) -> list[InstanceType]:
    """Instance types whose labels satisfy the requirements and that have an allowed, available offering."""
    out = []
    for it in instance_types:
        ok = True
        for r in reqs:
            if r.key in (LABEL_ZONE, LABEL_CAPACITY_TYPE):
                continue
            v = it.labels.get(r.key)
            if v is None:
                continue  # a label the instance type does not define (custom, or filled in at launch)
            if not r.has(v):
                ok = False
                break
        if ok and it.compatible_offerings(reqs):
            out.append(it)
    return out


def compatible_daemons(reqs: Requirements, taints: Sequence[Taint], daemon_pods: Iterable[PodInfo],
                       well_known: frozenset[str]) -> list[PodInfo]:
    """The DaemonSet pods that would run on some node of this template (taints tolerated,
    and one of their node-affinity terms compatible with the NodePool's requirements)."""
    out = []
    reqs = reqs.union(launched_node_requirements())
    for p in daemon_pods:
        if untolerated(p.tolerations, taints) is not None:
            continue
        terms = p.required_terms or [Requirements()]
        if not any(reqs.compatible(p.node_selector.union(t), allow_undefined=well_known) is None for t in terms):
            continue
        out.append(p)
    return out


def daemon_overhead(daemons: Iterable[PodInfo]) -> dict[str, int]:
    return res.total(p.requests for p in daemons)


def build_template(
    nodepool: Mapping,
    instance_types: Sequence[InstanceType],
    daemon_pods: Iterable[PodInfo],
    usage: Mapping[str, int],
    provider_labels: frozenset[str] = frozenset(),
) -> NodeClaimTemplate:
    reqs = nodepool_requirements(nodepool)
    taints = nodepool_taints(nodepool)
    startup = nodepool_taints(nodepool, "startupTaints")
    well_known = CORE_WELL_KNOWN_LABELS | provider_labels
    spec = nodepool.get("spec") or {}
    limits = res.parse_resource_list(spec.get("limits"))
    remaining = None
    if limits:
        remaining = {k: v - usage.get(k, 0) for k, v in limits.items()}
    labels = dict(((spec.get("template") or {}).get("metadata") or {}).get("labels") or {})
    daemons = compatible_daemons(reqs, taints, daemon_pods, well_known)
    return NodeClaimTemplate(
        nodepool=nodepool["metadata"]["name"],
        weight=int(spec.get("weight") or 0),
        requirements=reqs,
        taints=taints,
        startup_taints=startup,
        labels={str(k): str(v) for k, v in labels.items()},
        instance_types=compatible_instance_types(reqs, instance_types),
        daemon_overhead=daemon_overhead(daemons),
        daemon_pods=daemons,
        remaining=remaining,
        well_known_labels=well_known,
        nodeclass=str(((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef", {}).get("name", "")),
    )
