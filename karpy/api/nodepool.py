"""karpenter.sh/v1 NodePool and NodeClaim: the v1 CRDs' schema, defaults and CEL rules.

Everything the CRDs say is checked: types, enums, patterns, bounds, maxItems,
required fields and every ``x-kubernetes-validations`` rule except the
transition rules (``oldSelf``), which need a previous object. The provider
named by ``nodeClassRef.group`` adds the label-domain rules its own copy of the
NodePool CRD carries (see :mod:`karpy.api.labels`).

Karpenter's runtime validation (what makes a NodePool not Ready upstream:
restricted labels outside the CRD rules, requirement values that are not label
values, capacity-type values none of which is known, duplicate taints) is
reported as errors too, because a NodePool that can never be Ready makes a
simulation meaningless.

Defaults (from the CRD): ``spec.disruption`` = ``{consolidateAfter: 0s}``,
``disruption.consolidationPolicy`` = WhenEmptyOrUnderutilized,
``disruption.budgets`` = ``[{nodes: "10%"}]``, each budget's ``nodes`` =
"10%", ``template.spec.expireAfter`` = 720h (NodeClaim ``spec.expireAfter``
too).
"""

from __future__ import annotations

import re
from typing import Any

from croniter import croniter

from ..cron import cron_error

from . import labels as L
from . import names
from .meta import object_meta
from .schema import (
    Ctx,
    Node,
    arr,
    cel,
    check_duration_range,
    as_list,
    child,
    fmt_value,
    get,
    hkey,
    index,
    int32,
    int64,
    integer,
    invalid,
    mapping,
    not_supported,
    obj,
    opaque_obj,
    quantity_map,
    quantity_value,
    string,
    string_map,
)

DURATION_OR_NEVER = r"^(([0-9]+(s|m|h))+|Never)$"
DURATION = r"^([0-9]+(s|m|h))+$"
BUDGET_DURATION = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"
BUDGET_NODES = r"^((100|[0-9]{1,2})%|[0-9]+)$"
SCHEDULE = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
QUALIFIED_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
_QUALIFIED_KEY = re.compile(QUALIFIED_KEY)
_SCHEDULE = re.compile(SCHEDULE)
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")
NUMERIC_OPERATORS = ("Gt", "Lt", "Gte", "Lte")
CONSOLIDATION_POLICIES = ("WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced")
DISRUPTION_REASONS = ("Underutilized", "Empty", "Drifted")
CRON_DESCRIPTORS = ("@annually", "@yearly", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")

DEFAULT_EXPIRE_AFTER = "720h"
DEFAULT_BUDGET_NODES = "10%"


# --- CEL rules, in Python -----------------------------------------------------


def _values(req: dict) -> list:
    v = req.get("values")
    return v if isinstance(v, list) else []


def _cel_int(s: Any) -> int:
    """CEL's int(string): an optionally signed decimal integer, else an evaluation error."""
    if not isinstance(s, str):
        raise ValueError(s)
    t = s[1:] if s[:1] in "+-" else s
    if not t.isdigit() or not t.isascii():
        raise ValueError(s)
    return int(s)


def _numeric_ok(x: dict) -> bool:
    vals = _values(x)
    if len(vals) != 1:
        return False
    try:
        return _cel_int(vals[0]) >= 0
    except ValueError:
        return False


# self.all(x, P(x)) rules of the requirements list; reported at the failing item
REQUIREMENTS_RULES = (
    cel(
        lambda x: x.get("operator") != "In" or len(_values(x)) != 0,
        "requirements with operator 'In' must have a value defined",
        "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
    ),
    cel(
        lambda x: x.get("operator") not in NUMERIC_OPERATORS or _numeric_ok(x),
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? "
        "(x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
    ),
    cel(
        lambda x: not (x.get("operator") == "In" and isinstance(x.get("minValues"), int))
        or len(_values(x)) >= x["minValues"],
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
    ),
)

_KARPENTER_DOMAIN_MSG = 'label domain "karpenter.sh" is restricted'
_NODEPOOL_LABEL_MSG = 'label "karpenter.sh/nodepool" is restricted'
_HOSTNAME_LABEL_MSG = 'label "kubernetes.io/hostname" is restricted'

_ALLOWED_KARPENTER_KEYS = "[" + ", ".join(f'"{k}"' for k in L.KARPENTER_DOMAIN_ALLOWED) + "]"


def _key_rules(var: str | None) -> tuple:
    """The CRDs' label-key rules: on a requirement key (``self``) or, with ``var``, on every key
    of a label map (``self.all(var, ...)``, checked per key by ``item_rules``)."""
    k = var or "self"

    def wrap(expr: str) -> str:
        return f"self.all({var}, {expr})" if var else expr

    return (
        cel(
            lambda key: not L.karpenter_domain_restricted(key),
            _KARPENTER_DOMAIN_MSG,
            wrap(f'{k} in {_ALLOWED_KARPENTER_KEYS} || !{k}.find("^([^/]+)").endsWith("{L.KARPENTER_GROUP}")'),
        ),
        cel(lambda key: key != L.LABEL_NODEPOOL, _NODEPOOL_LABEL_MSG, wrap(f'{k} != "{L.LABEL_NODEPOOL}"')),
        cel(lambda key: key != L.LABEL_HOSTNAME, _HOSTNAME_LABEL_MSG, wrap(f'{k} != "{L.LABEL_HOSTNAME}"')),
    )


NODEPOOL_KEY_RULES = _key_rules(None)
NODECLAIM_KEY_RULES = (NODEPOOL_KEY_RULES[0], NODEPOOL_KEY_RULES[2])
NODEPOOL_LABEL_RULES = _key_rules("x")  # the same rules over spec.template.metadata.labels


def _budget_rule(budget: dict) -> bool:
    return ("schedule" in budget) == ("duration" in budget)


def _static_limits_rule(spec: dict) -> bool:
    if "replicas" not in spec:
        return True
    limits = spec.get("limits")
    return not limits or (isinstance(limits, dict) and list(limits) == ["nodes"])


def _static_weight_rule(spec: dict) -> bool:
    return "replicas" not in spec or "weight" not in spec


def _not_empty(v: Any) -> bool:
    return v != ""


# --- checks that need the provider or span fields -----------------------------


def _provider(ctx: Ctx) -> L.ProviderLabels | None:
    return ctx.data.get("provider")


def _crd_provider_violations(key: str, prov: L.ProviderLabels | None) -> list[str]:
    if prov is None:
        return []
    out = [f'label domain "{r.domain}" is restricted' for r in prov.crd_domain_rules if L.crd_domain_violation(key, r)]
    out.extend(f'label "{k}" is restricted' for k in prov.crd_restricted_keys if key == k)
    return out


def _core_crd_violation(key: str, nodepool: bool) -> bool:
    if L.karpenter_domain_restricted(key) or key == L.LABEL_HOSTNAME:
        return True
    return nodepool and key == L.LABEL_NODEPOOL


def _check_template_labels(labels: dict, path: str, ctx: Ctx) -> None:
    prov = _provider(ctx)
    for key, value in labels.items():
        crd_msgs = _crd_provider_violations(key, prov)
        for msg in crd_msgs:
            ctx.err(child(path, key), f"Invalid value: {_q(key)}: {msg}")
        if crd_msgs or _core_crd_violation(key, True):
            continue  # the CRD already rejects this key
        for msg in names.is_qualified_name(key):
            ctx.err(child(path, key), f'Invalid value: {_q(key)}: invalid key name "{key}" in labels, "{msg}"')
        problem = L.is_restricted_label(key, prov)
        if problem:
            ctx.err(child(path, key), f'Invalid value: {_q(key)}: invalid key name "{key}" in labels, {problem}')


def _q(s: str) -> str:
    return fmt_value(s)


def _check_requirement_key(key: str, path: str, ctx: Ctx) -> None:
    """The provider CRD's CEL rules on requirement keys."""
    for msg in _crd_provider_violations(key, _provider(ctx)):
        ctx.err(path, f"Invalid value: {_q(key)}: {msg}")


def _check_requirements_runtime(reqs: list, path: str, ctx: Ctx, nodepool: bool) -> None:
    prov = _provider(ctx)
    known_values = L.well_known_values(prov)
    wk = L.well_known_labels(prov)
    for i, req in enumerate(reqs):
        if not isinstance(req, dict) or not isinstance(req.get("key"), str):
            continue
        p = index(path, i)
        key = L.NORMALIZED_LABELS.get(req["key"], req["key"])
        op = req.get("operator")
        values = [v for v in _values(req) if isinstance(v, str)]
        crd_rejects = bool(_crd_provider_violations(req["key"], prov)) or _core_crd_violation(req["key"], nodepool)
        if not crd_rejects:
            problem = L.is_restricted_label(key, prov)
            if problem:
                ctx.err(child(p, "key"), f"Invalid value: {_q(req['key'])}: {problem}")
            if _QUALIFIED_KEY.search(req["key"]):
                for msg in names.is_qualified_name(req["key"]):
                    ctx.err(child(p, "key"), f"Invalid value: {_q(req['key'])}: key {key} is not a qualified name, {msg}")
        for j, v in enumerate(values):
            for msg in names.is_valid_label_value(v):
                ctx.err(index(child(p, "values"), j), f"Invalid value: {_q(v)}: invalid value {v} for key {key}, {msg}")
        if op == "In" and key in wk and key in known_values:
            allowed = known_values[key]
            valid = [v for v in values if v in allowed]
            shown = " ".join(sorted(allowed))
            if not valid and values:
                got = " ".join(values)
                ctx.err(
                    child(p, "values"),
                    f'Invalid value: "array": no valid values found in [{got}] for {key}, '
                    f"expected one of: [{shown}], got: [{got}]",
                )
            mv = req.get("minValues")
            if valid and isinstance(mv, int) and not isinstance(mv, bool) and len(valid) < mv:
                ctx.err(
                    child(p, "values"),
                    f"Invalid value: \"array\": not enough valid values found in [{' '.join(values)}] for {key}, "
                    f"expected at least {mv} valid values from: [{shown}], got: {len(valid)}",
                )


def _check_taints_runtime(spec: dict, path: str, ctx: Ctx) -> None:
    seen: set = set()
    for field in ("taints", "startupTaints"):
        for i, t in enumerate(as_list(spec.get(field))):
            if not isinstance(t, dict):
                continue
            key = t.get("key")
            if isinstance(key, str) and _QUALIFIED_KEY.search(key):
                # the CRD pattern lets through keys whose parts are too long; Karpenter rejects them
                for msg in names.is_qualified_name(key):
                    ctx.err(child(index(child(path, field), i), "key"), f"Invalid value: {_q(key)}: {msg}")
            pair = hkey(t.get("key"), t.get("effect"))
            if pair in seen:
                ctx.err(
                    index(child(path, field), i),
                    f'Duplicate value: "{pair[0]}={pair[1]}": duplicate taint Key/Effect pair {pair[0]}={pair[1]}',
                )
            seen.add(pair)


def _check_budget_schedule(budget: dict, path: str, ctx: Ctx) -> None:
    sched = budget.get("schedule")
    if not isinstance(sched, str):
        return
    if not _SCHEDULE.search(sched):
        return  # the CRD pattern already reports it
    p = child(path, "schedule")
    if sched.startswith("@"):
        if sched.strip() not in CRON_DESCRIPTORS:
            ctx.err(p, f"Invalid value: {_q(sched)}: invalid cron schedule: unrecognized descriptor")
        return
    fields = sched.split()
    if len(fields) != 5:
        ctx.err(
            p,
            f"Invalid value: {_q(sched)}: invalid cron schedule: expected exactly 5 fields "
            f"(minute hour day-of-month month day-of-week), found {len(fields)}",
        )
        return
    if any(f.upper().startswith("TZ=") or f.upper().startswith("CRON_TZ=") for f in fields) or not croniter.is_valid(
        " ".join(fields)
    ):
        ctx.err(p, f"Invalid value: {_q(sched)}: invalid cron schedule")
        return
    problem = cron_error(" ".join(fields))
    if problem:
        ctx.err(p, f"Invalid value: {_q(sched)}: invalid cron schedule: {problem}")


def _check_limits(limits: dict, path: str, ctx: Ctx) -> None:
    """A negative limit is nonsense (nothing could ever be launched under it): refused like core's requests."""
    for name, raw in limits.items():
        q = quantity_value(raw, ctx.crd)
        if q is not None and q < 0:
            ctx.err(child(path, name), invalid(raw, "must be greater than or equal to 0"))


def _check_node_class_ref(ref: dict, path: str, ctx: Ctx) -> None:
    group, kind = ref.get("group"), ref.get("kind")
    if not isinstance(group, str) or not group or "/" in group:
        return
    prov = L.PROVIDERS.get(group)
    if prov is None:
        ctx.err(
            child(path, "group"),
            not_supported(group, sorted(L.PROVIDERS)) + " (karpy simulates these providers only)",
        )
        return
    if isinstance(kind, str) and kind and kind != prov.node_class_kind:
        ctx.err(child(path, "kind"), not_supported(kind, (prov.node_class_kind,)) + f" (for group {group})")


# --- schema -------------------------------------------------------------------


def _taints(description: str) -> Node:
    return arr(
        obj(
            {
                "effect": string(enum=TAINT_EFFECTS, description="The effect of the taint on pods that do not tolerate it."),
                "key": string(min_len=1, pattern=QUALIFIED_KEY, description="The taint key."),
                "timeAdded": string(fmt="date-time", description="When the taint was added (NoExecute taints only)."),
                "value": string(pattern=QUALIFIED_KEY, description="The taint value."),
            },
            required=("effect", "key"),
        ),
        list_type="atomic",
        description=description,
    )


def _node_class_ref(nodepool: bool) -> Node:
    return obj(
        {
            "group": string(
                pattern=r"^[^/]*$",
                rules=[cel(_not_empty, "group may not be empty", "self != ''")],
                description="API group of the NodeClass (karpenter.azure.com, karpenter.k8s.aws, karpenter.kwok.sh).",
            ),
            "kind": string(rules=[cel(_not_empty, "kind may not be empty", "self != ''")], description="Kind of the NodeClass."),
            "name": string(rules=[cel(_not_empty, "name may not be empty", "self != ''")], description="Name of the NodeClass."),
        },
        required=("group", "kind", "name"),
        checks=[_check_node_class_ref],
        # on a NodeClaim the whole spec is immutable
        transition_rules=[
            ("self.group == oldSelf.group", "nodeClassRef.group is immutable"),
            ("self.kind == oldSelf.kind", "nodeClassRef.kind is immutable"),
        ]
        if nodepool
        else [],
        description="The provider-specific NodeClass that configures the nodes.",
    )


def _requirements(nodepool: bool) -> Node:
    key_rules = NODEPOOL_KEY_RULES if nodepool else NODECLAIM_KEY_RULES
    item = obj(
        {
            "key": string(
                max_len=316,
                pattern=QUALIFIED_KEY,
                rules=key_rules,
                checks=[_check_requirement_key],
                description="The label key the requirement applies to.",
            ),
            "minValues": integer(
                minimum=1, maximum=50, description="The minimum number of distinct values the launch choice must keep open."
            ),
            "operator": string(enum=OPERATORS, description="How the key relates to the values."),
            "values": arr(string(), list_type="atomic", description="The values (one non-negative integer for Gt, Lt, Gte, Lte)."),
        },
        required=("key", "operator"),
    )
    return arr(
        item,
        max_items=100,
        list_type="atomic",
        item_rules=REQUIREMENTS_RULES,
        checks=[lambda reqs, path, ctx: _check_requirements_runtime(reqs, path, ctx, nodepool)],
        description="Node selector requirements with minValues that every launched node satisfies.",
    )


def _claim_spec_props(nodepool: bool) -> dict[str, Node]:
    return {
        "expireAfter": string(
            default=DEFAULT_EXPIRE_AFTER,
            pattern=DURATION_OR_NEVER,
            checks=[check_duration_range],
            description="How long a node lives before Karpenter deletes it (a duration or Never).",
        ),
        "nodeClassRef": _node_class_ref(nodepool),
        "requirements": _requirements(nodepool),
        "startupTaints": _taints("Taints a daemon removes once the node is ready; pods need not tolerate them."),
        "taints": _taints("Taints put on every node."),
        "terminationGracePeriod": string(
            pattern=DURATION,
            checks=[check_duration_range],
            description="How long a node may drain before it is deleted regardless of PodDisruptionBudgets.",
        ),
    }


def _budget() -> Node:
    return obj(
        {
            "duration": string(
                pattern=BUDGET_DURATION,
                checks=[check_duration_range],
                description="How long the budget is active after each schedule hit (minutes and hours).",
            ),
            "nodes": string(
                default=DEFAULT_BUDGET_NODES,
                pattern=BUDGET_NODES,
                description="How many of the NodePool's nodes may be disrupted at once (a count or a percentage).",
            ),
            "reasons": arr(
                string(enum=DISRUPTION_REASONS),
                max_items=50,
                list_type="set",
                description="The disruption reasons the budget applies to (all when omitted).",
            ),
            "schedule": string(pattern=SCHEDULE, description="A cron schedule (UTC) when the budget becomes active."),
        },
        required=("nodes",),
        checks=[_check_budget_schedule],
    )


def _template_labels() -> Node:
    return mapping(
        string(max_len=63, pattern=LABEL_VALUE),
        max_props=100,
        item_rules=NODEPOOL_LABEL_RULES,
        checks=[_check_template_labels],
        description="Labels put on every node.",
    )

NODEPOOL = obj(
    {
        "apiVersion": string(),
        "kind": string(),
        "metadata": object_meta(),
        "spec": obj(
            {
                "disruption": obj(
                    {
                        "budgets": arr(
                            _budget(),
                            default=[{"nodes": DEFAULT_BUDGET_NODES}],
                            max_items=50,
                            list_type="atomic",
                            item_rules=[
                                cel(
                                    _budget_rule,
                                    "'schedule' must be set with 'duration'",
                                    "self.all(x, has(x.schedule) == has(x.duration))",
                                )
                            ],
                            description="Limits on how many nodes may be disrupted at once; the most restrictive "
                            "active budget applies.",
                        ),
                        "consolidateAfter": string(
                            default="0s",
                            pattern=DURATION_OR_NEVER,
                            checks=[check_duration_range],
                            description="How long after a pod was added or removed a node may be consolidated "
                            "(a duration or Never).",
                        ),
                        "consolidationPolicy": string(
                            default="WhenEmptyOrUnderutilized",
                            enum=CONSOLIDATION_POLICIES,
                            description="Which nodes consolidation may disrupt: empty ones only, or underutilized ones too.",
                        ),
                    },
                    default={"consolidateAfter": "0s"},
                    description="How Karpenter may disrupt the NodePool's nodes.",
                ),
                "limits": quantity_map(
                    checks=[_check_limits],
                    description="The most resources (cpu, memory, nodes, ...) the NodePool's nodes may add up to.",
                ),
                "replicas": int64(
                    minimum=0,
                    description="A static NodePool's node count (StaticCapacity); the NodePool is dynamic when omitted.",
                ),
                "template": obj(
                    {
                        "metadata": obj(
                            {
                                "annotations": string_map(description="Annotations put on every node."),
                                "labels": _template_labels(),
                            }
                        ),
                        "spec": obj(
                            _claim_spec_props(True),
                            required=("nodeClassRef", "requirements"),
                            checks=[_check_taints_runtime],
                            description="The spec of the NodeClaims launched from this NodePool.",
                        ),
                    },
                    required=("spec",),
                    description="The template of the NodeClaims Karpenter launches for this NodePool.",
                ),
                "weight": int32(
                    minimum=1,
                    maximum=100,
                    description="The NodePool's priority: pods are scheduled against higher weights first.",
                ),
            },
            required=("template",),
            rules=[
                cel(
                    _static_limits_rule,
                    "only 'limits.nodes' is supported on static NodePools",
                    "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || "
                    "(size(self.limits) == 1 && 'nodes' in self.limits))",
                ),
                cel(
                    _static_weight_rule,
                    "'weight' is not supported on static NodePools",
                    "!has(self.replicas) || !has(self.weight)",
                ),
            ],
            transition_rules=[
                (
                    "has(self.replicas) == has(oldSelf.replicas)",
                    "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) "
                    "provisioning modes",
                )
            ],
            description="Which nodes Karpenter may launch for pending pods, and how it may disrupt them.",
        ),
        "status": opaque_obj(),
    },
    required=("spec",),
    description="NodePool: a set of constraints and a template from which Karpenter launches nodes.",
)

NODECLAIM = obj(
    {
        "apiVersion": string(),
        "kind": string(),
        "metadata": object_meta(),
        "spec": obj(
            {
                **_claim_spec_props(False),
                "resources": obj(
                    {"requests": quantity_map(description="The resources the pods scheduled to the node request.")},
                    description="The resources the node must offer.",
                ),
            },
            required=("nodeClassRef", "requirements"),
            checks=[_check_taints_runtime],
            transition_rules=[("self == oldSelf", "spec is immutable")],
            description="The node Karpenter launches: its requirements, taints and NodeClass.",
        ),
        "status": opaque_obj(),
    },
    required=("spec",),
    description="NodeClaim: Karpenter's request for one node, and the node's lifecycle.",
)


# --- status, as the CRDs publish it -------------------------------------------
#
# Manifests are validated with an opaque status (the API server ignores the status of a
# created object); the CRDs declare upstream's status fields so that kubectl explain,
# printer columns and the scale subresource have types. They keep unknown fields and
# leave out upstream's required condition fields, so no status karpy writes is refused.

CONDITION_STATUSES = ("True", "False", "Unknown")


def conditions(description: str = "The object's conditions.") -> Node:
    """A list of metav1.Condition, keyed by type."""
    return arr(
        obj(
            {
                "lastTransitionTime": string(fmt="date-time", description="When the condition last changed status."),
                "message": string(max_len=32768, description="A human-readable message about the transition."),
                "observedGeneration": int64(minimum=0, description="The generation the condition was set for."),
                "reason": string(max_len=1024, description="A CamelCase reason for the last transition."),
                "status": string(enum=CONDITION_STATUSES, description="True, False or Unknown."),
                "type": string(max_len=316, description="The condition type."),
            },
            required=("type",),
            preserve=True,
        ),
        list_type="map",
        map_keys=("type",),
        description=description,
    )


NODEPOOL_STATUS = obj(
    {
        "conditions": conditions("The NodePool's conditions (Ready, ValidationSucceeded, NodeClassReady, ...)."),
        "nodeClassObservedGeneration": int64(description="The generation of the NodeClass last seen."),
        "nodes": int64(default=0, description="How many nodes the NodePool has."),
        "resources": quantity_map(description="The resources of the NodePool's nodes, added up."),
    },
    preserve=True,
    description="The observed state of the NodePool.",
)

NODECLAIM_STATUS = obj(
    {
        "allocatable": quantity_map(description="The resources available to pods on the node."),
        "capacity": quantity_map(description="The node's resources."),
        "conditions": conditions("The NodeClaim's conditions (Launched, Registered, Initialized, Ready, Drifted, ...)."),
        "imageID": string(description="The image the instance runs."),
        "lastPodEventTime": string(fmt="date-time", description="When a pod was last scheduled to or removed from the node."),
        "nodeName": string(description="The name of the Node registered for this NodeClaim."),
        "providerID": string(description="The cloud provider's ID of the instance."),
    },
    preserve=True,
    description="The observed state of the NodeClaim.",
)

def prepare(obj_: dict, ctx: Ctx) -> None:
    """Find the provider (from nodeClassRef.group) whose label rules apply."""
    group = get(obj_, "spec", "template", "spec", "nodeClassRef", "group")
    if group is None:
        group = get(obj_, "spec", "nodeClassRef", "group")
    ctx.data["provider"] = L.provider_labels(group)


def transition_errors(kind: str, old: Any, new: Any) -> list[tuple[str, str]]:
    """The CRDs' transition rules (``oldSelf``), for an update of ``old`` to ``new`` (e.g. a Scenario patch)."""
    out: list[tuple[str, str]] = []
    if not isinstance(old, dict) or not isinstance(new, dict):
        return out
    if kind == "NodePool":
        o, n = get(old, "spec", default={}), get(new, "spec", default={})
        if isinstance(o, dict) and isinstance(n, dict) and ("replicas" in o) != ("replicas" in n):
            out.append(
                (
                    "spec",
                    'Invalid value: "object": Cannot transition NodePool between static (replicas set) and dynamic '
                    "(replicas unset) provisioning modes",
                )
            )
        for field in ("group", "kind"):
            a = get(old, "spec", "template", "spec", "nodeClassRef", field)
            b = get(new, "spec", "template", "spec", "nodeClassRef", field)
            if a != b:
                out.append(("spec.template.spec.nodeClassRef", f'Invalid value: "object": nodeClassRef.{field} is immutable'))
    elif kind == "NodeClaim" and old.get("spec") != new.get("spec"):
        out.append(("spec", 'Invalid value: "object": spec is immutable'))
    return out


def node_class_group(obj_: dict) -> str | None:
    g = get(obj_, "spec", "template", "spec", "nodeClassRef", "group")
    return g if isinstance(g, str) else None


__all__ = ["NODEPOOL", "NODECLAIM", "NODEPOOL_STATUS", "NODECLAIM_STATUS", "conditions", "prepare", "node_class_group",
           "transition_errors"]
