"""Small builders for the scheduling tests: instance types, pods, NodePools, nodes.

Everything here produces the same plain inputs the engine gets in production
(manifest dicts for pods and NodePools, :class:`InstanceType` objects for the
catalog), so the tests exercise ``compile_pod`` and ``build_template`` too.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Iterable, Mapping, Sequence

from karpy import resources as res
from karpy.cloudprovider.types import (
    CAPACITY_ON_DEMAND,
    CAPACITY_RESERVED,
    CAPACITY_SPOT,
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_OS,
    LABEL_ZONE,
    InstanceType,
    Offering,
)
from karpy.provisioning.templates import build_template
from karpy.scheduling.pods import PodInfo, Taint, compile_pod
from karpy.scheduling.scheduler import ExistingNode, NewNodeClaim, NodeClaimTemplate, Results, Scheduler

GIB = 2**30
MIB = 2**20
ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")



# --- instance types -------------------------------------------------------------------


def offerings(
    price: float,
    zones: Sequence[str] = ZONES,
    capacity_types: Sequence[str] = (CAPACITY_ON_DEMAND, CAPACITY_SPOT),
    spot_discount: float = 0.7,
    unavailable: Iterable[tuple[str, str]] = (),
) -> list[Offering]:
    """One offering per (zone, capacity type); spot at ``price * spot_discount``, reserved at 10% of price."""
    down = set(unavailable)
    out = []
    for z in zones:
        for ct in capacity_types:
            p = price
            if ct == CAPACITY_SPOT:
                p = round(price * spot_discount, 6)
            elif ct == CAPACITY_RESERVED:
                p = round(price * 0.1, 6)
            out.append(Offering(zone=z, capacity_type=ct, price=p, available=(z, ct) not in down))
    return out


def instance_type(
    name: str,
    cpu: float = 4,
    memory_gib: float = 8,
    pods: int = 110,
    arch: str = "amd64",
    os: str = "linux",
    price: float | None = None,
    labels: Mapping[str, str] | None = None,
    extra: Mapping[str, int] | None = None,
    overhead: Mapping[str, int] | None = None,
    offers: list[Offering] | None = None,
    **offer_kwargs,
) -> InstanceType:
    """An instance type with ``cpu`` vCPUs and ``memory_gib`` GiB and no overhead unless given.

    The default price grows with size (0.05/vCPU + 0.01/GiB), so bigger is dearer.
    """
    cpu_m = int(round(cpu * 1000))
    mem = int(round(memory_gib * GIB))
    if price is None:
        price = round(0.05 * cpu + 0.01 * memory_gib, 6)
    lbls = {LABEL_INSTANCE_TYPE: name, LABEL_ARCH: arch, LABEL_OS: os, "example.com/cpu": str(int(cpu))}
    lbls.update(labels or {})
    capacity = {res.CPU: cpu_m, res.MEMORY: mem, res.PODS: pods}
    capacity.update(extra or {})
    return InstanceType(
        name=name,
        labels=lbls,
        capacity=capacity,
        overhead=dict(overhead or {}),
        offerings=offers if offers is not None else offerings(price, **offer_kwargs),
    )


def ladder(sizes: Sequence[int] = (1, 2, 4, 8, 16), arch: str = "amd64", prefix: str = "std") -> list[InstanceType]:
    """A family of types with 2 GiB per vCPU: ``std-1`` .. ``std-16``."""
    return [instance_type(f"{prefix}-{n}", cpu=n, memory_gib=2 * n, arch=arch) for n in sizes]


# --- pods -----------------------------------------------------------------------------

_seq = itertools.count()


def pod_manifest(
    name: str | None = None,
    cpu: str | float | None = None,
    memory: str | None = None,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    required: Sequence[Sequence[Mapping]] | None = None,
    preferred: Sequence[tuple[int, Sequence[Mapping]]] | None = None,
    tolerations: Sequence[Mapping] | None = None,
    spread: Sequence[Mapping] | None = None,
    pod_affinity: Sequence[Mapping] | None = None,
    pod_anti_affinity: Sequence[Mapping] | None = None,
    preferred_pod_affinity: Sequence[tuple[int, Mapping]] | None = None,
    preferred_pod_anti_affinity: Sequence[tuple[int, Mapping]] | None = None,
    host_ports: Sequence[int] | None = None,
    requests: Mapping[str, object] | None = None,
    limits: Mapping[str, object] | None = None,
) -> dict:
    """A pod manifest; ``required`` is a list of ORed nodeSelectorTerms (each a list of expressions)."""
    name = name or f"pod-{next(_seq)}"
    req: dict = dict(requests or {})
    if cpu is not None:
        req["cpu"] = str(cpu)
    if memory is not None:
        req["memory"] = memory
    container: dict = {"name": "app", "image": "busybox", "resources": {}}
    if req:
        container["resources"]["requests"] = req
    if limits:
        container["resources"]["limits"] = dict(limits)
    if host_ports:
        container["ports"] = [{"containerPort": p, "hostPort": p} for p in host_ports]
    spec: dict = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    affinity: dict = {}
    na: dict = {}
    if required:
        na["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": list(t)} for t in required]
        }
    if preferred:
        na["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": w, "preference": {"matchExpressions": list(t)}} for w, t in preferred
        ]
    if na:
        affinity["nodeAffinity"] = na
    pa: dict = {}
    if pod_affinity:
        pa["requiredDuringSchedulingIgnoredDuringExecution"] = list(pod_affinity)
    if preferred_pod_affinity:
        pa["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": w, "podAffinityTerm": t} for w, t in preferred_pod_affinity
        ]
    if pa:
        affinity["podAffinity"] = pa
    paa: dict = {}
    if pod_anti_affinity:
        paa["requiredDuringSchedulingIgnoredDuringExecution"] = list(pod_anti_affinity)
    if preferred_pod_anti_affinity:
        paa["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": w, "podAffinityTerm": t} for w, t in preferred_pod_anti_affinity
        ]
    if paa:
        affinity["podAntiAffinity"] = paa
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if spread:
        spec["topologySpreadConstraints"] = list(spread)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": spec,
    }


def pod(name: str | None = None, **kw) -> PodInfo:
    return compile_pod(pod_manifest(name, **kw))


def pods(n: int, prefix: str | None = None, **kw) -> list[PodInfo]:
    prefix = prefix or f"p{next(_seq)}"
    return [pod(f"{prefix}-{i}", **kw) for i in range(n)]


def expr(key: str, operator: str, *values: str, min_values: int | None = None) -> dict:
    e: dict = {"key": key, "operator": operator}
    if values:
        e["values"] = list(values)
    if min_values is not None:
        e["minValues"] = min_values
    return e


def spread(
    key: str,
    max_skew: int = 1,
    labels: Mapping[str, str] | None = None,
    when: str = "DoNotSchedule",
    min_domains: int | None = None,
    match_label_keys: Sequence[str] | None = None,
    node_affinity_policy: str | None = None,
    selector: Mapping | None = None,
) -> dict:
    c: dict = {"topologyKey": key, "maxSkew": max_skew, "whenUnsatisfiable": when}
    if selector is not None:
        c["labelSelector"] = dict(selector)
    elif labels is not None:
        c["labelSelector"] = {"matchLabels": dict(labels)}
    if min_domains is not None:
        c["minDomains"] = min_domains
    if match_label_keys:
        c["matchLabelKeys"] = list(match_label_keys)
    if node_affinity_policy:
        c["nodeAffinityPolicy"] = node_affinity_policy
    return c


def affinity_term(key: str, labels: Mapping[str, str], namespaces: Sequence[str] | None = None) -> dict:
    t: dict = {"topologyKey": key, "labelSelector": {"matchLabels": dict(labels)}}
    if namespaces is not None:
        t["namespaces"] = list(namespaces)
    return t


def toleration(key: str = "", operator: str = "Equal", value: str = "", effect: str = "") -> dict:
    t: dict = {"operator": operator}
    if key:
        t["key"] = key
    if value:
        t["value"] = value
    if effect:
        t["effect"] = effect
    return t


# --- NodePools and templates ----------------------------------------------------------


def nodepool(
    name: str = "default",
    requirements: Sequence[Mapping] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping] | None = None,
    startup_taints: Sequence[Mapping] | None = None,
    weight: int | None = None,
    limits: Mapping[str, object] | None = None,
) -> dict:
    tspec: dict = {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}
    tspec["requirements"] = list(requirements or ())
    if taints:
        tspec["taints"] = list(taints)
    if startup_taints:
        tspec["startupTaints"] = list(startup_taints)
    template: dict = {"spec": tspec}
    if labels:
        template["metadata"] = {"labels": dict(labels)}
    spec: dict = {"template": template}
    if weight is not None:
        spec["weight"] = weight
    if limits:
        spec["limits"] = dict(limits)
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def template(
    np: Mapping | None = None,
    types: Sequence[InstanceType] | None = None,
    daemons: Sequence[PodInfo] = (),
    usage: Mapping[str, int] | None = None,
    provider_labels: frozenset[str] = frozenset({"example.com/cpu"}),
) -> NodeClaimTemplate:
    return build_template(np or nodepool(), list(types if types is not None else ladder()), list(daemons), dict(usage or {}), provider_labels)


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> dict:
    t = {"key": key, "effect": effect}
    if value:
        t["value"] = value
    return t


def existing_node(
    name: str,
    labels: Mapping[str, str] | None = None,
    cpu: float = 4,
    memory_gib: float = 8,
    pods_cap: int = 110,
    used_cpu: float = 0,
    used_memory_gib: float = 0,
    taints: Sequence[Mapping] = (),
    bound: Sequence[PodInfo] = (),
    nodepool: str | None = "default",
    schedulable: bool = True,
    allocatable_extra: Mapping[str, int] | None = None,
) -> ExistingNode:
    lbls = {LABEL_HOSTNAME: name, LABEL_ARCH: "amd64", LABEL_OS: "linux"}
    lbls.update(labels or {})
    alloc = {res.CPU: int(cpu * 1000), res.MEMORY: int(memory_gib * GIB), res.PODS: pods_cap}
    alloc.update(allocatable_extra or {})
    requested = {res.CPU: int(used_cpu * 1000), res.MEMORY: int(used_memory_gib * GIB)}
    requested = res.add(requested, res.total(p.requests for p in bound))
    return ExistingNode(
        name=name,
        labels=lbls,
        taints=tuple(Taint.from_obj(t) for t in taints),
        allocatable=alloc,
        requested=requested,
        nodepool=nodepool,
        bound_pods=list(bound),
        schedulable=schedulable,
    )


# --- solving and reading results -----------------------------------------------------


_SCHEDULER_PARAMS = set(inspect.signature(Scheduler.__init__).parameters)


def solve(templates: Sequence[NodeClaimTemplate] | NodeClaimTemplate, pods_: Sequence[PodInfo],
          existing: Sequence[ExistingNode] = (), upstream_packing: bool = False, **kw) -> Results:
    """Run one solve. ``upstream_packing`` turns off karpy's own post-pass that splits
    under-used NodeClaims into cheaper ones (when the engine has it), leaving upstream's
    grow-until-full packing."""
    if isinstance(templates, NodeClaimTemplate):
        templates = [templates]
    if upstream_packing and "refine" in _SCHEDULER_PARAMS:
        kw["refine"] = False
    return Scheduler(list(templates), list(existing), **kw).solve(list(pods_))


def claim_of(results: Results, p: PodInfo | str) -> NewNodeClaim | None:
    key = p if isinstance(p, str) else p.key
    for c in results.new_nodeclaims:
        if any(q.key == key for q in c.pods):
            return c
    return None


def placement(results: Results, p: PodInfo | str) -> str | None:
    """Where a pod went: the hostname of its new NodeClaim, the existing node's name, or None."""
    key = p if isinstance(p, str) else p.key
    c = claim_of(results, key)
    if c is not None:
        return c.hostname
    for node, ps in results.existing.items():
        if any(q.key == key for q in ps):
            return node
    return None


def scheduled(results: Results) -> set[str]:
    out = {p.key for c in results.new_nodeclaims for p in c.pods}
    for ps in results.existing.values():
        out.update(p.key for p in ps)
    return out


def single(claim: NewNodeClaim, key: str) -> str | None:
    """The value a NodeClaim's requirements pin ``key`` to, if exactly one."""
    r = claim.requirements.get(key)
    if not r.complement and len(r.values) == 1:
        return next(iter(r.values))
    return None


def allowed(claim: NewNodeClaim, key: str) -> set[str] | None:
    """The finite set of values a NodeClaim allows for ``key`` (None when not finite)."""
    r = claim.requirements.get(key)
    return None if r.complement else set(r.values)


def type_names(claim: NewNodeClaim) -> list[str]:
    return [it.name for it in claim.instance_types]


def domain_counts(results: Results, key: str, selector: Mapping[str, str] | None = None,
                  existing_labels: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, int]:
    """Pods (matching ``selector``) per domain of ``key`` among this solve's placements.

    A new NodeClaim's domain is the single value its requirements pin (its hostname for
    the hostname key); ``existing_labels`` gives existing nodes' labels by node name.
    """
    out: dict[str, int] = {}

    def match(p: PodInfo) -> bool:
        return all(p.labels.get(k) == v for k, v in (selector or {}).items())

    for c in results.new_nodeclaims:
        d = c.hostname if key == LABEL_HOSTNAME else single(c, key)
        n = sum(1 for p in c.pods if match(p))
        if n:
            assert d is not None, f"NodeClaim {c.hostname} has pods but no single {key}: {c.requirements}"
            out[d] = out.get(d, 0) + n
    for node, ps in results.existing.items():
        lbls = (existing_labels or {}).get(node, {})
        d = node if key == LABEL_HOSTNAME else lbls.get(key)
        n = sum(1 for p in ps if match(p))
        if n and d is not None:
            out[d] = out.get(d, 0) + n
    return out


def offered_zones(claim: NewNodeClaim) -> set[str]:
    """Zones a NodeClaim could launch in: available offerings its requirements allow."""
    zr = claim.requirements.get(LABEL_ZONE)
    cr = claim.requirements.get(LABEL_CAPACITY_TYPE)
    return {o.zone for it in claim.instance_types for o in it.offerings if o.available and zr.has(o.zone) and cr.has(o.capacity_type)}


def offered_capacity_types(claim: NewNodeClaim) -> set[str]:
    zr = claim.requirements.get(LABEL_ZONE)
    cr = claim.requirements.get(LABEL_CAPACITY_TYPE)
    return {o.capacity_type for it in claim.instance_types for o in it.offerings if o.available and zr.has(o.zone) and cr.has(o.capacity_type)}


def cheapest_price(it: InstanceType, claim: NewNodeClaim) -> float:
    zr = claim.requirements.get(LABEL_ZONE)
    cr = claim.requirements.get(LABEL_CAPACITY_TYPE)
    return min(o.price for o in it.offerings if o.available and zr.has(o.zone) and cr.has(o.capacity_type))
