"""Which pending pods the provisioner ignores, as upstream's ``Provisioner.Validate`` decides.

Before any scheduling, upstream drops pods whose node constraints Karpenter will not act on and
publishes ``FailedScheduling: Failed to schedule pod, ignoring pod, <why>`` for them (no event
for a pod that only asks to stay off Karpenter's nodes). For every ``nodeSelector`` entry and
every expression of every required node-affinity term (``pkg/apis/v1`` ValidateRequirement):

* the operator must be one Karpenter supports;
* the key may not be restricted: ``kubernetes.io/hostname``, or any label in the
  ``karpenter.sh`` domain (or a subdomain) other than the well-known ``karpenter.sh/nodepool``
  and ``karpenter.sh/capacity-type``, nor in the domain a provider in use restricts
  (``karpenter.k8s.aws``, ``karpenter.azure.com``, ``karpenter.kwok.sh``) other than its
  well-known labels. Labels in the ``kubernetes.io`` and ``k8s.io`` domains are allowed;
* the key must be a qualified name and each value a valid label value; ``In`` needs a value;
  ``Gt``/``Lt``/``Gte``/``Lte`` one non-negative integer; ``karpenter.sh/capacity-type In`` at
  least one of on-demand, spot, reserved;
* a required term may not use ``matchFields``.

A pod requiring ``karpenter.sh/nodepool DoesNotExist`` (in its node selector, first required
term or heaviest preference) is ignored too, without an event. Volume problems are in
:mod:`karpy.scheduling.volumes`. Everything here is pure.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..api import names
from .requirements import DOES_NOT_EXIST, EXISTS, IN, NOT_IN, normalize_key

LABEL_NODEPOOL = "karpenter.sh/nodepool"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
RESTRICTED_LABEL_DOMAINS = ("karpenter.sh",)
RESTRICTED_LABELS = frozenset({"kubernetes.io/hostname"})
SUPPORTED_OPERATORS = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST, "Gt", "Lt", "Gte", "Lte")
KNOWN_VALUES = {LABEL_CAPACITY_TYPE: ("on-demand", "spot", "reserved")}
AVOIDS_KARPENTER = (f"configured to not run on a Karpenter provisioned node, "
                    f"requirement {LABEL_NODEPOOL} DoesNotExist")


def _domain(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def restricted_label(key: str, well_known: Iterable[str],
                     domains: Iterable[str] = RESTRICTED_LABEL_DOMAINS) -> str | None:
    """Upstream's IsRestrictedLabel: why a pod or NodePool may not constrain ``key``, or None.
    ``domains``: karpenter.sh and the domains the providers in use restrict (their own)."""
    wk = well_known if isinstance(well_known, (set, frozenset)) else frozenset(well_known)
    if key in wk:
        return None
    domain = _domain(key)
    doms = sorted(set(domains))
    if key in RESTRICTED_LABELS or any(domain == d or domain.endswith("." + d) for d in doms):
        return (f"using label {key} is not allowed as it might interfere with the internal provisioning logic; "
                f"specify a well known label: [{' '.join(sorted(wk))}], or a custom label that does not use a "
                f"restricted domain: [{' '.join(doms)}]")
    return None


def requirement_problems(key: str, operator: str, values: Iterable[Any], well_known: frozenset[str],
                         domains: Iterable[str] = RESTRICTED_LABEL_DOMAINS) -> list[str]:
    """Upstream's ValidateRequirement, for one node selector requirement."""
    key = normalize_key(str(key))
    values = [str(v) for v in values or ()]
    out: list[str] = []
    if operator not in SUPPORTED_OPERATORS:
        out.append(f"key {key} has an unsupported operator {operator} not in [{' '.join(SUPPORTED_OPERATORS)}]")
    why = restricted_label(key, well_known, domains)
    if why is not None:
        out.append(why)
    known = KNOWN_VALUES.get(key)
    if known is not None and operator == IN and not any(v in known for v in values):
        out.append(f"no valid values found in {values} for {key}, expected one of: {list(known)}, got: {values}")
    for msg in names.is_qualified_name(key):
        out.append(f"key {key} is not a qualified name, {msg}")
    for v in values:
        for msg in names.is_valid_label_value(v):
            out.append(f"invalid value {v} for key {key}, {msg}")
    if operator == IN and not values:
        out.append(f"key {key} with operator {operator} must have a value defined")
    if operator in ("Gt", "Lt", "Gte", "Lte"):
        ok = len(values) == 1 and values[0].isdigit()
        if not ok:
            out.append(f"key {key} with operator {operator} must have a single positive integer value")
    return out


def _required_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    na = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    return list(((na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")) or ())


def avoids_karpenter(pod: Mapping[str, Any]) -> bool:
    """Does the pod require ``karpenter.sh/nodepool DoesNotExist`` (nodeSelector, first required
    term or heaviest preference, as upstream's pod requirements read it)?"""
    spec = pod.get("spec") or {}
    exprs: list[Mapping[str, Any]] = []
    terms = _required_terms(spec)
    if terms:
        exprs.extend(terms[0].get("matchExpressions") or ())
    na = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    preferred = sorted(na.get("preferredDuringSchedulingIgnoredDuringExecution") or (),
                       key=lambda p: -int(p.get("weight", 0) or 0))
    if preferred:
        exprs.extend((preferred[0].get("preference") or {}).get("matchExpressions") or ())
    return any(normalize_key(str(e.get("key", ""))) == LABEL_NODEPOOL and e.get("operator") == DOES_NOT_EXIST
               for e in exprs)


def pod_problem(pod: Mapping[str, Any], well_known: frozenset[str],
                domains: Iterable[str] = RESTRICTED_LABEL_DOMAINS) -> str | None:
    """Why upstream's provisioner ignores this pod for its node constraints, or None."""
    if avoids_karpenter(pod):
        return AVOIDS_KARPENTER
    spec = pod.get("spec") or {}
    problems: list[str] = []
    for k, v in (spec.get("nodeSelector") or {}).items():
        problems.extend(requirement_problems(k, IN, [v], well_known, domains))
    for term in _required_terms(spec):
        if term.get("matchFields") is not None:
            problems.append("node selector term with matchFields is not supported")
        for e in term.get("matchExpressions") or ():
            problems.extend(requirement_problems(e.get("key", ""), str(e.get("operator", "")), e.get("values") or (),
                                                 well_known, domains))
    return "; ".join(problems) if problems else None
