"""Pods as the scheduler sees them: requests, constraints and a class key.

Pods whose scheduling-relevant fields are identical (same namespace, labels,
requests, node constraints, tolerations, topology and affinity terms, host
ports) share a *class*; the solver places a class's pods together instead of
re-deriving the same answer pod by pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .. import resources as res
from .dra import has_dra_requirements
from .requirements import DOES_NOT_EXIST, EXISTS, IN, NOT_IN, Requirement, Requirements
from .volumes import VolumeTopology

LABEL_HOSTNAME = "kubernetes.io/hostname"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


# --- label selectors ---------------------------------------------------------------


class LabelSelector:
    """A compiled metav1.LabelSelector."""

    __slots__ = ("match_labels", "expressions", "sig", "_empty", "nil")

    def __init__(self, obj: Mapping | None):
        # A missing selector selects nothing; an empty one ({}) selects everything.
        self.nil = obj is None
        obj = obj or {}
        self.match_labels: dict[str, str] = {str(k): str(v) for k, v in (obj.get("matchLabels") or {}).items()}
        self.expressions: list[tuple[str, str, frozenset[str]]] = [
            (e["key"], e["operator"], frozenset(str(v) for v in (e.get("values") or ())))
            for e in (obj.get("matchExpressions") or ())
        ]
        self.sig = (
            self.nil,
            tuple(sorted(self.match_labels.items())),
            tuple(sorted((k, op, tuple(sorted(v))) for k, op, v in self.expressions)),
        )
        self._empty = not self.match_labels and not self.expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nil:
            return False
        for k, v in self.match_labels.items():
            if labels.get(k) != v:
                return False
        for k, op, values in self.expressions:
            v = labels.get(k)
            if op == IN:
                if v is None or v not in values:
                    return False
            elif op == NOT_IN:
                if v is not None and v in values:
                    return False
            elif op == EXISTS:
                if v is None:
                    return False
            elif op == DOES_NOT_EXIST:
                if v is not None:
                    return False
        return True

    def with_label_keys(self, keys: list[str], labels: Mapping[str, str]) -> "LabelSelector":
        """matchLabelKeys: add ``key In [pod's value]`` for each key the pod carries."""
        extra = [{"key": k, "operator": IN, "values": [labels[k]]} for k in keys if k in labels]
        if not extra or self.nil:
            return self
        obj = {
            "matchLabels": dict(self.match_labels),
            "matchExpressions": [{"key": k, "operator": op, "values": sorted(v)} for k, op, v in self.expressions] + extra,
        }
        return LabelSelector(obj)

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        parts += [f"{k} {op} {sorted(v)}" if v else f"{k} {op}" for k, op, v in self.expressions]
        return ",".join(parts) or "<all>"


# --- tolerations and taints -----------------------------------------------------------


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    @classmethod
    def from_obj(cls, obj: Mapping) -> "Taint":
        return cls(str(obj.get("key", "")), str(obj.get("value", "") or ""), str(obj.get("effect", "")))

    def to_obj(self) -> dict:
        d = {"key": self.key, "effect": self.effect}
        if self.value:
            d["value"] = self.value
        return d

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    @classmethod
    def from_obj(cls, obj: Mapping) -> "Toleration":
        return cls(
            str(obj.get("key", "") or ""),
            str(obj.get("operator", "") or "Equal"),
            str(obj.get("value", "") or ""),
            str(obj.get("effect", "") or ""),
        )

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


def untolerated(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...] | list[Taint]) -> Taint | None:
    """The first NoSchedule/NoExecute taint the tolerations do not tolerate, if any."""
    for t in taints:
        if t.effect == "PreferNoSchedule":
            continue
        if not any(tol.tolerates(t) for tol in tolerations):
            return t
    return None


# --- topology and affinity terms ------------------------------------------------------


@dataclass(frozen=True)
class SpreadConstraint:
    topology_key: str
    max_skew: int
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    selector: LabelSelector = field(compare=False)
    selector_sig: tuple
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"


@dataclass(frozen=True)
class AffinityTerm:
    topology_key: str
    selector: LabelSelector = field(compare=False)
    selector_sig: tuple
    namespaces: frozenset[str] | None  # None: every namespace
    weight: int = 0


def _affinity_term(obj: Mapping, namespace: str, weight: int = 0) -> AffinityTerm:
    sel = LabelSelector(obj.get("labelSelector"))
    namespaces: frozenset[str] | None
    if obj.get("namespaceSelector") is not None:
        ns_sel = obj.get("namespaceSelector") or {}
        # An empty namespaceSelector selects every namespace; karpy does not model namespace labels further.
        namespaces = None if not ns_sel.get("matchLabels") and not ns_sel.get("matchExpressions") else frozenset(obj.get("namespaces") or ())
        if namespaces is not None and not namespaces:
            namespaces = None
    else:
        namespaces = frozenset(obj.get("namespaces") or (namespace,))
    return AffinityTerm(str(obj.get("topologyKey", "")), sel, sel.sig, namespaces, weight)


# --- requests -------------------------------------------------------------------------


def _container_requests(c: Mapping) -> dict[str, int]:
    r = c.get("resources") or {}
    requests = res.parse_resource_list(r.get("requests"))
    # The API server defaults missing requests to the limits.
    for k, v in res.parse_resource_list(r.get("limits")).items():
        requests.setdefault(k, v)
    return requests


def pod_requests(spec: Mapping) -> dict[str, int]:
    """Effective requests of a pod, as kube-scheduler computes them.

    Regular containers add up, restartable init containers (sidecars) run beside
    them, and each ordinary init container needs its own requests plus the
    sidecars started before it; the pod needs the larger of the two, plus its
    overhead. One ``pods`` slot is always requested.
    """
    app = res.total(_container_requests(c) for c in spec.get("containers") or ())
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.get("initContainers") or ():
        req = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            sidecars = res.add(sidecars, req)
            init_peak = res.merge_max(init_peak, sidecars)
        else:
            init_peak = res.merge_max(init_peak, res.add(req, sidecars))
    out = res.merge_max(res.add(app, sidecars), init_peak)
    pod_level = spec.get("resources") or {}
    if pod_level.get("requests") or pod_level.get("limits"):
        # Pod-level resources (Kubernetes 1.34+) replace the containers' totals where set.
        level = res.parse_resource_list(pod_level.get("requests"))
        for k, v in res.parse_resource_list(pod_level.get("limits")).items():
            level.setdefault(k, v)
        out = {**out, **level}
    overhead = spec.get("overhead")
    if overhead:
        out = res.add(out, res.parse_resource_list(overhead))
    out = {k: v for k, v in out.items() if v}
    out[res.PODS] = 1
    return out


# --- the compiled pod ---------------------------------------------------------------


@dataclass(eq=False)
class PodInfo:
    namespace: str
    name: str
    labels: dict[str, str]
    requests: dict[str, int]
    node_selector: Requirements
    required_terms: list[Requirements]  # ORed node-affinity terms; [] when none
    preferred_terms: list[tuple[int, Requirements]]  # by weight, heaviest first
    tolerations: tuple[Toleration, ...]
    spread: list[SpreadConstraint]
    affinity: list[AffinityTerm]
    anti_affinity: list[AffinityTerm]
    preferred_affinity: list[AffinityTerm]
    preferred_anti_affinity: list[AffinityTerm]
    host_ports: frozenset[tuple[str, int, str]]
    priority: int = 0
    volume_requirements: VolumeTopology | None = None  # what its volumes ask of the node (never part of requirements())
    # its claims by the CSI driver whose per-node volume limit they count against (never part of its class: the
    # pods of one class mount claims of their own)
    volume_usage: Mapping[str, frozenset] | None = None
    obj: dict | None = None
    class_key: tuple = ()
    moving: bool = False  # being moved off a node by consolidation (not a pending pod)
    dra: bool = False  # asks for devices through ResourceClaims (karpy.scheduling.dra)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def label_key(self) -> tuple:
        """(namespace, sorted labels): what topology selectors look at."""
        lk = self.__dict__.get("_label_key")
        if lk is None:
            lk = (self.namespace, tuple(sorted(self.labels.items())))
            self.__dict__["_label_key"] = lk
        return lk

    def requirements(self, with_preferences: bool = True) -> Requirements:
        """nodeSelector + the first required term (+ the heaviest preference).

        Volume topology is not part of them: as upstream, it narrows the node a pod goes to but
        not the pod's own affinity, which topology spread counts are judged on."""
        r = self.node_selector.copy()
        if with_preferences and self.preferred_terms:
            r.add_all(self.preferred_terms[0][1])
        if self.required_terms:
            r.add_all(self.required_terms[0])
        return r

    def strict_requirements(self) -> Requirements:
        return self.requirements(with_preferences=False)


def _term_requirements(term: Mapping) -> Requirements:
    reqs = Requirements.from_node_selector(term.get("matchExpressions") or ())
    # matchFields on metadata.name pins a node by name.
    for f in term.get("matchFields") or ():
        if f.get("key") == "metadata.name":
            reqs.add(Requirement.new(LABEL_HOSTNAME, f["operator"], f.get("values") or ()))
    return reqs


def compile_pod(obj: Mapping, priority: int = 0, runtime_overhead: Mapping[str, int] | None = None) -> PodInfo:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    namespace = str(meta.get("namespace") or "default")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    requests = pod_requests(spec)
    if runtime_overhead and not spec.get("overhead"):
        requests = res.add(requests, runtime_overhead)

    node_selector = Requirements.from_labels({str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()})
    affinity = spec.get("affinity") or {}
    na = affinity.get("nodeAffinity") or {}
    required = na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    required_terms = [_term_requirements(t) for t in (required.get("nodeSelectorTerms") or ())]
    preferred = sorted(
        (int(p.get("weight", 0)), i, _term_requirements(p.get("preference") or {}))
        for i, p in enumerate(na.get("preferredDuringSchedulingIgnoredDuringExecution") or ())
    )
    preferred_terms = [(w, r) for w, _, r in sorted(preferred, key=lambda t: (-t[0], t[1]))]

    tolerations = tuple(Toleration.from_obj(t) for t in spec.get("tolerations") or ())

    spread: list[SpreadConstraint] = []
    for c in spec.get("topologySpreadConstraints") or ():
        sel = LabelSelector(c.get("labelSelector"))
        if c.get("matchLabelKeys"):
            sel = sel.with_label_keys(list(c["matchLabelKeys"]), labels)
        spread.append(
            SpreadConstraint(
                str(c.get("topologyKey", "")),
                int(c.get("maxSkew", 1)),
                str(c.get("whenUnsatisfiable", "DoNotSchedule")),
                sel,
                sel.sig,
                int(c["minDomains"]) if c.get("minDomains") is not None else None,
                str(c.get("nodeAffinityPolicy") or "Honor"),
                str(c.get("nodeTaintsPolicy") or "Ignore"),
            )
        )

    pa = affinity.get("podAffinity") or {}
    paa = affinity.get("podAntiAffinity") or {}
    req_aff = [_affinity_term(t, namespace) for t in pa.get("requiredDuringSchedulingIgnoredDuringExecution") or ()]
    req_anti = [_affinity_term(t, namespace) for t in paa.get("requiredDuringSchedulingIgnoredDuringExecution") or ()]
    pref_aff = sorted(
        (_affinity_term(t.get("podAffinityTerm") or {}, namespace, int(t.get("weight", 0)))
         for t in pa.get("preferredDuringSchedulingIgnoredDuringExecution") or ()),
        key=lambda t: -t.weight,
    )
    pref_anti = sorted(
        (_affinity_term(t.get("podAffinityTerm") or {}, namespace, int(t.get("weight", 0)))
         for t in paa.get("preferredDuringSchedulingIgnoredDuringExecution") or ()),
        key=lambda t: -t.weight,
    )

    ports = set()
    for c in list(spec.get("containers") or ()) + list(spec.get("initContainers") or ()):
        for p in c.get("ports") or ():
            hp = p.get("hostPort")
            if hp:
                ports.add((str(p.get("hostIP") or "0.0.0.0"), int(hp), str(p.get("protocol") or "TCP")))

    info = PodInfo(
        namespace=namespace,
        name=str(meta.get("name", "")),
        labels=labels,
        requests=requests,
        node_selector=node_selector,
        required_terms=required_terms,
        preferred_terms=preferred_terms,
        tolerations=tolerations,
        spread=spread,
        affinity=req_aff,
        anti_affinity=req_anti,
        preferred_affinity=pref_aff,
        preferred_anti_affinity=pref_anti,
        host_ports=frozenset(ports),
        priority=priority,
        obj=obj,  # type: ignore[arg-type]
        dra=has_dra_requirements(spec),
    )
    info.class_key = class_key(info)
    return info


class ClassKey(tuple):
    """A pod's class key: a tuple that computes its hash once. Its parts (tolerations, spread constraints,
    affinity terms) hash through Python code, and the solver looks classes up by key for every pod of every
    simulation. Rebuilt, not copied, when pickled: string hashes differ between processes."""

    def __new__(cls, parts):
        self = super().__new__(cls, parts)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        return ClassKey, (tuple(self),)

    def moving(self) -> "ClassKey":
        """The key of the same pods moved by consolidation; one object per key, so the moved pods of a shape
        (which share their key) share it too."""
        m = self.__dict__.get("_moving")
        if m is None:
            m = self._moving = ClassKey(self + ("moving",))
        return m


def class_key(p: PodInfo) -> tuple:
    """Everything that decides where a pod may go; equal keys schedule alike."""
    return ClassKey((
        p.namespace,
        tuple(sorted(p.labels.items())),
        tuple(sorted(p.requests.items())),
        p.node_selector.signature(),
        tuple(r.signature() for r in p.required_terms),
        tuple((w, r.signature()) for w, r in p.preferred_terms),
        p.tolerations,
        tuple(p.spread),
        tuple(p.affinity),
        tuple(p.anti_affinity),
        tuple(p.preferred_affinity),
        tuple(p.preferred_anti_affinity),
        tuple(sorted(p.host_ports)),
        p.volume_requirements.signature() if p.volume_requirements is not None else None,
    ) + (("dra",) if p.dra else ()))


def copy_for_relaxation(p: PodInfo) -> PodInfo:
    """A shallow copy whose soft-constraint lists can be trimmed independently."""
    return PodInfo(
        namespace=p.namespace,
        name=p.name,
        labels=p.labels,
        requests=p.requests,
        node_selector=p.node_selector,
        required_terms=list(p.required_terms),
        preferred_terms=list(p.preferred_terms),
        tolerations=p.tolerations,
        spread=list(p.spread),
        affinity=list(p.affinity),
        anti_affinity=list(p.anti_affinity),
        preferred_affinity=list(p.preferred_affinity),
        preferred_anti_affinity=list(p.preferred_anti_affinity),
        host_ports=p.host_ports,
        priority=p.priority,
        volume_requirements=p.volume_requirements,
        volume_usage=p.volume_usage,
        obj=p.obj,
        class_key=p.class_key,
        moving=p.moving,
        dra=p.dra,
    )


def moving(p: PodInfo) -> PodInfo:
    """The same pod, marked as moved by consolidation (its own scheduling class)."""
    if p.moving:
        return p
    q = p.__dict__.get("_moving")
    if q is None:
        q = copy_for_relaxation(p)
        q.moving = True
        k = p.class_key
        q.class_key = k.moving() if isinstance(k, ClassKey) else ClassKey(tuple(k) + ("moving",))
        p.__dict__["_moving"] = q
    return q
