"""karpenter.sh/v1alpha1 NodeOverlay: the CRD's schema, CEL rules and status, and its runtime validation.

A NodeOverlay changes what Karpenter believes about the instance types its requirements select, for
the NodePools whose labels they match: the price of their offerings (``price``, a replacement, or
``priceAdjustment``, a signed amount or percentage) and extended resources added to their capacity
(``capacity``). It is read only with the ``NodeOverlay`` feature gate on (``karpy/cloudprovider/overlay.py``
applies it; ``karpy/controllers/nodeoverlay.py`` keeps its status).

What the CRD checks (as upstream's ``karpenter.sh_nodeoverlays.yaml``): ``spec.requirements`` is required
(at most 100; ``In`` and ``NotIn`` need values; ``Gt``/``Lt``/``Gte``/``Lte`` one non-negative integer;
keys of the ``karpenter.sh`` domain other than ``capacity-type`` and ``nodepool``, and
``kubernetes.io/hostname``, are refused), ``price`` and ``priceAdjustment`` follow their patterns and
are not both set, ``capacity`` names no ``cpu``, ``memory``, ``ephemeral-storage`` or ``pods``, and
``weight`` is 1..10000. What the CRD does not check -- a key that is not a qualified name, a label
value that is not one, a restricted label domain -- is upstream's *runtime* validation: the overlay is
admitted and its ``ValidationSucceeded`` condition turns False with reason ``RuntimeValidation``
(:func:`runtime_errors`).
"""

from __future__ import annotations

from .meta import object_meta
from .nodepool import NUMERIC_OPERATORS, QUALIFIED_KEY, _check_requirements_runtime, conditions
from .nodepool import NODEPOOL_KEY_RULES as _NODEPOOL_KEY_RULES
from .nodepool import _numeric_ok, _values
from .schema import Ctx, arr, cel, int32, obj, quantity_map, string

API_VERSION = "karpenter.sh/v1alpha1"
KIND = "NodeOverlay"
PRICE_PATTERN = r"^\d+(\.\d+)?$"
PRICE_ADJUSTMENT_PATTERN = r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$"
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")
# Kubernetes' own resources, which an overlay's capacity may not touch (upstream's WellKnownResources)
RESTRICTED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")

# the NodeOverlay CRD's key rules: the NodePool's, less the one on karpenter.sh/nodepool (an overlay may select it)
KEY_RULES = (_NODEPOOL_KEY_RULES[0], _NODEPOOL_KEY_RULES[2])

REQUIREMENTS_RULES = (
    cel(
        lambda x: x.get("operator") != "NotIn" or len(_values(x)) != 0,
        "requirements with operator 'NotIn' must have a value defined",
        "self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)",
    ),
    cel(
        lambda x: x.get("operator") != "In" or len(_values(x)) != 0,
        "requirements with operator 'In' must have a value defined",
        "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
    ),
    cel(
        lambda x: x.get("operator") not in NUMERIC_OPERATORS or _numeric_ok(x),
        "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
        "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? "
        "(x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
    ),
)

_RESTRICTED_LIST = "[" + ", ".join(f"'{r}'" for r in RESTRICTED_RESOURCES) + "]"

NODEOVERLAY_SPEC = obj(
    {
        "requirements": arr(
            obj(
                {
                    "key": string(max_len=316, pattern=QUALIFIED_KEY, rules=KEY_RULES,
                                  description="The label key that the selector applies to."),
                    "operator": string(enum=OPERATORS, description="How the key relates to the values."),
                    "values": arr(string(), list_type="atomic",
                                  description="The values (one non-negative integer for Gt, Lt, Gte, Lte)."),
                },
                required=("key", "operator"),
            ),
            max_items=100,
            list_type="atomic",
            item_rules=REQUIREMENTS_RULES,
            description="Which instance types the overlay applies to: well-known labels (instance type, zone, "
                        "capacity type, karpenter.sh/nodepool, ...) and the NodePool template's labels.",
        ),
        "priceAdjustment": string(
            pattern=PRICE_ADJUSTMENT_PATTERN,
            description="A change of the price of matching offerings: a signed amount (-0.5, +1.2) or a "
                        "percentage (+10%, -15%).",
        ),
        "price": string(pattern=PRICE_PATTERN, description="The price of matching offerings, replacing the cloud's."),
        "capacity": quantity_map(
            item_rules=(
                cel(lambda k: k not in RESTRICTED_RESOURCES, "invalid resource restricted",
                    f"self.all(x, !(x in {_RESTRICTED_LIST}))"),
            ),
            description="Extended resources added to matching instance types' capacity (never cpu, memory, "
                        "ephemeral-storage or pods).",
        ),
        "weight": int32(minimum=1, maximum=10000,
                        description="Precedence over other overlays: higher first; 0 when unset; equal weights "
                                    "in reverse order of name."),
    },
    required=("requirements",),
    rules=(
        cel(lambda s: "price" not in s or "priceAdjustment" not in s,
            "cannot set both 'price' and 'priceAdjustment'", "!has(self.price) || !has(self.priceAdjustment)"),
    ),
    description="NodeOverlaySpec: what the overlay changes, and for which instance types.",
)

NODEOVERLAY = obj(
    {
        "apiVersion": string(),
        "kind": string(),
        "metadata": object_meta(),
        "spec": NODEOVERLAY_SPEC,
        "status": obj(preserve=True),
    },
    required=("spec",),
)

NODEOVERLAY_STATUS = obj(
    {"conditions": conditions("The NodeOverlay's conditions (ValidationSucceeded, Ready).")},
    preserve=True,
    description="The observed state of the NodeOverlay.",
)


def runtime_errors(overlay: dict) -> list[str]:
    """Upstream's RuntimeValidate: what the CRD admits but Karpenter refuses to apply, one message each."""
    spec = overlay.get("spec") or {}
    out: list[str] = []
    reqs = spec.get("requirements") if isinstance(spec.get("requirements"), list) else []
    ctx = Ctx()
    _check_requirements_runtime(reqs, "spec.requirements", ctx, True)
    out.extend(f"{path}: {msg}" for path, msg in ctx.errors)
    for req in reqs:
        if isinstance(req, dict) and req.get("operator") == "NotIn" and not _values(req):
            out.append(f"key {req.get('key')} with operator NotIn must have a value defined")
    for name in spec.get("capacity") or {}:
        if name in RESTRICTED_RESOURCES:
            out.append(f"invalid capacity: {name} in resource, restricted")
    return out


def gate_off_note(documents: list, scenario: dict | None) -> str | None:
    """One line for the user when NodeOverlays are given but the ``NodeOverlay`` gate is off (its default): they
    are accepted and, as upstream with the gate off, change nothing."""
    spec = (scenario or {}).get("spec") or {}
    gates = (spec.get("settings") or {}).get("featureGates") or {}
    if gates.get("NodeOverlay") is True:
        return None
    names = [d.get("metadata", {}).get("name") for d in documents if isinstance(d, dict) and d.get("kind") == KIND]
    for step in spec.get("steps") or ():
        items = step.get("apply") if isinstance(step, dict) else None
        names.extend(d.get("metadata", {}).get("name") for d in items or () if isinstance(d, dict)
                     and d.get("kind") == KIND and isinstance(d.get("metadata"), dict))
    if not names:
        return None
    n = len(names)
    return (f"{n} NodeOverlay{'s' if n != 1 else ''} ignored ({', '.join(str(x) for x in names[:3])}"
            f"{', ...' if n > 3 else ''}): the NodeOverlay feature gate is off, as upstream's default; set "
            "spec.settings.featureGates.NodeOverlay: true in a Scenario to apply them")


__all__ = ["gate_off_note", "API_VERSION", "KIND", "NODEOVERLAY", "NODEOVERLAY_STATUS", "RESTRICTED_RESOURCES", "runtime_errors"]
