"""A small structural-schema validator with Kubernetes-style field errors.

Schemas are trees of :class:`Node`, authored in Python by the per-kind modules.
They mirror what an OpenAPI v3 structural schema says (types, properties,
required, enum, pattern, bounds, defaults, list types) and carry two kinds of
hooks for what OpenAPI cannot say:

- ``rules``: ``(predicate, message)`` pairs standing in for CEL
  ``x-kubernetes-validations``; a false predicate reports the message at the
  node's path, as the API server does.
- ``checks``: ``fn(value, path, ctx)`` functions that report any number of
  errors themselves (the built-in kinds' Go validation lives here).

For the CustomResourceDefinitions karpy publishes (:mod:`karpy.api.crds`) a node
also carries what only the CRD needs: a ``description``, the CEL text of each
rule (write the rule with :func:`cel`), and ``transition_rules``, CEL rules over
``oldSelf`` that the walker cannot evaluate (karpy checks them on updates in
Python, e.g. ``nodepool.transition_errors``).

``walk`` applies defaults top-down (as the API server does before validating)
and collects every error; it never raises for bad input.

We use this rather than the ``jsonschema`` package because the API server's
behaviour is not JSON Schema's: defaults must be applied in the same pass,
int-or-string quantities, "unknown field" under strict field validation,
messages and paths in the API server's words, and CEL rules evaluated against
partially valid objects. The walker is also several times faster for the
thousands of pods a simulation may load.
"""

from __future__ import annotations

import copy
import json
import marshal
import math
import os
import re
from datetime import datetime, timezone
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable, Iterable

from ..resources import parse_quantity as _parse_quantity
from ..resources import DurationRangeError, parse_duration, quantity_range_error
from ..timeutil import is_rfc3339 as _is_rfc3339
from ..timeutil import parse_rfc3339 as _parse_rfc3339

NO_DEFAULT = object()


@lru_cache(maxsize=8192)
def _cached_quantity(kind: type, v: Any) -> Fraction:
    return _parse_quantity(v)


def parse_quantity(v: Any) -> Fraction:
    """resources.parse_quantity, memoised (manifests repeat the same few quantities)."""
    if isinstance(v, (str, int, float)):
        return _cached_quantity(type(v), v)
    return _parse_quantity(v)

DEBUG = bool(os.environ.get("KARPY_DEBUG_VALIDATION"))

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

CRD_QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_CRD_QUANTITY = re.compile(CRD_QUANTITY_PATTERN)
QUANTITY_REGEX_MSG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def child(path: str, key: str) -> str:
    """The path of a map entry or property: ``spec.limits.cpu`` or ``...requests[nvidia.com/gpu]``."""
    if _IDENT.match(key):
        return f"{path}.{key}" if path else key
    if not key.isprintable() or "]" in key:
        return f"{path}[{json.dumps(key)}]"
    return f"{path}[{key}]"


def index(path: str, i: int) -> str:
    return f"{path}[{i}]"


def json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def fmt_value(v: Any, limit: int = 160) -> str:
    """Render a value as the API server does in "Invalid value: ..." (strings quoted)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return repr(v)
    try:
        s = json.dumps(v, ensure_ascii=False, sort_keys=isinstance(v, dict), separators=(",", ":"))
    except (TypeError, ValueError):
        s = repr(v)
    if len(s) > limit:
        s = s[: limit - 3] + "..."
    return s


# schema errors after which kube-apiserver does not evaluate a custom resource's CEL rules
_BLOCKING = ("Required value", "Unsupported value", "Too long", "Too many")
NOT_CHECKED = ('Invalid value: "null": some validation rules were not checked because the object was invalid; '
               "correct the existing errors to complete validation")
_SCHEMA_TYPES = {"object": "object", "array": "array", "string": "string", "integer": "integer", "number": "number",
                 "boolean": "boolean"}


def has_cel(root: "Node") -> bool:
    """Whether a schema holds any rule (a CRD with ``x-kubernetes-validations`` anywhere)."""
    cached = _HAS_CEL.get(id(root))
    if cached is not None:
        return cached
    seen: set[int] = set()

    def visit(n: "Node | None") -> bool:
        if n is None or id(n) in seen:
            return False
        seen.add(id(n))
        if n.rules or n.item_rules:
            return True
        return any(visit(c) for c in (n.props or {}).values()) or visit(n.additional) or visit(n.item)

    _HAS_CEL[id(root)] = out = visit(root)
    return out


_HAS_CEL: dict[int, bool] = {}


def cel_value(v: Any) -> str:
    """What a failed CEL rule shows: the value of a scalar, the type of a list or map."""
    if isinstance(v, dict):
        return '"object"'
    if isinstance(v, list):
        return '"array"'
    return fmt_value(v)


# --- error message builders (apimachinery field.Error wording) --------------


def required(detail: str = "") -> str:
    return "Required value" + (f": {detail}" if detail else "")


def invalid(value: Any, detail: str) -> str:
    return f"Invalid value: {fmt_value(value)}: {detail}"


def not_supported(value: Any, supported: Iterable[Any]) -> str:
    vals = ", ".join(fmt_value(s) for s in supported)
    return f"Unsupported value: {fmt_value(value)}: supported values: {vals}"


def forbidden(detail: str) -> str:
    return f"Forbidden: {detail}"


def duplicate(value: Any) -> str:
    return f"Duplicate value: {fmt_value(value)}"


def too_many(n: int, limit: int) -> str:
    return f"Too many: {n}: must have at most {limit} items"


def not_found(value: Any) -> str:
    return f"Not found: {fmt_value(value)}"


class Ctx:
    """Collects (field, message) errors during one document's validation."""

    __slots__ = ("errors", "crd", "data", "cel_errors", "blocking")

    def __init__(self, crd: bool = False, data: dict | None = None):
        self.errors: list[tuple[str, str]] = []
        self.crd = crd
        self.data = data or {}
        self.cel_errors: list[tuple[str, str]] = []  # a custom resource's failed CEL rules (see cel_outcome)
        self.blocking = False  # a custom resource broke its schema in a way that keeps CEL rules from running

    def err(self, path: str, message: str) -> None:
        self.errors.append((path, message))
        if self.crd and message.startswith(_BLOCKING):
            self.blocking = True

    def cel_err(self, path: str, message: str) -> None:
        (self.cel_errors if self.crd else self.errors).append((path, message))

    def cel_outcome(self, root: "Node") -> list[tuple[str, str]]:
        """The errors of a custom resource once its CEL rules have had their say, as kube-apiserver decides:
        the rules run after the schema's checks, and not at all when the schema found a value missing, of the
        wrong type, out of its enum, too long or too many (then one error says some rules were not checked)."""
        if not self.crd:
            return self.errors
        if self.blocking:
            return self.errors + ([("<nil>", NOT_CHECKED)] if has_cel(root) else [])
        return self.errors + self.cel_errors

    def run(self, fn: Callable, *args: Any) -> Any:
        """Call a check defensively: odd input must never become a traceback."""
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - validation of hostile input must not crash
            if DEBUG:
                raise
            return None


class Node:
    """One schema node. See the module docstring."""

    __slots__ = (
        "type",
        "props",
        "required",
        "additional",
        "preserve",
        "default",
        "enum",
        "pattern",
        "pattern_src",
        "minimum",
        "maximum",
        "min_len",
        "max_len",
        "min_items",
        "max_items",
        "max_props",
        "list_type",
        "map_keys",
        "rules",
        "item_rules",
        "checks",
        "defaulter",
        "fmt",
        "item",
        "allow_float",
        "description",
        "transition_rules",
        "memo",
        "_fns",
    )

    def __init__(
        self,
        type: str = "any",
        *,
        props: dict[str, "Node"] | None = None,
        required: Iterable[str] = (),
        additional: "Node | None" = None,
        preserve: bool = False,
        default: Any = NO_DEFAULT,
        enum: Iterable[Any] | None = None,
        pattern: str | None = None,
        pattern_flags: int = 0,
        minimum: float | None = None,
        maximum: float | None = None,
        min_len: int | None = None,
        max_len: int | None = None,
        min_items: int | None = None,
        max_items: int | None = None,
        max_props: int | None = None,
        list_type: str | None = None,
        map_keys: Iterable[str] = (),
        rules: Iterable[tuple[Callable[[Any], bool], str]] = (),
        item_rules: Iterable[tuple[Callable[[Any], bool], str]] = (),
        checks: Iterable[Callable[[Any, str, Ctx], None]] = (),
        defaulter: Callable[[Any, Ctx], None] | None = None,
        fmt: str | None = None,
        item: "Node | None" = None,
        allow_float: bool = False,
        description: str | None = None,
        transition_rules: Iterable[tuple[str, str]] = (),
        memo: bool = False,
    ):
        self.type = type
        self.props = props
        self.required = tuple(required)
        self.additional = additional
        self.preserve = preserve
        self.default = default
        self.enum = tuple(enum) if enum is not None else None
        self.pattern = re.compile(pattern, pattern_flags) if pattern else None
        self.pattern_src = pattern
        self.minimum = minimum
        self.maximum = maximum
        self.min_len = min_len
        self.max_len = max_len
        self.min_items = min_items
        self.max_items = max_items
        self.max_props = max_props
        self.list_type = list_type
        self.map_keys = tuple(map_keys)
        self.rules = tuple(rules)
        self.item_rules = tuple(item_rules)
        self.checks = tuple(checks)
        self.defaulter = defaulter
        self.fmt = fmt
        self.item = item
        self.allow_float = allow_float
        self.description = description
        self.transition_rules = tuple(transition_rules)  # (CEL rule, message): for the CRD only
        # the node's validation depends only on its value and path (its hooks read nothing else from the
        # Ctx): a value met again that had no errors the first time is not validated again (see _memoized)
        self.memo = memo
        self._fns: list | None = None  # [generation, validator, CRD validator], made by _compiled
        if type == "object" and props is None and additional is None:
            self.preserve = True  # an object with no declared shape keeps whatever it holds


class Rule(tuple):
    """A ``(predicate, message)`` rule that also carries its CEL text (``.cel``).

    It unpacks as the plain pair the walker expects; :mod:`karpy.api.crds` publishes
    ``.cel`` as the rule of the CRD's ``x-kubernetes-validations`` entry. For a rule
    given in ``item_rules`` the CEL is the whole rule on the list or map
    (``self.all(x, ...)``), as upstream writes it.
    """

    cel: str

    def __new__(cls, predicate: Callable[[Any], bool], message: str, cel_text: str) -> "Rule":
        r = super().__new__(cls, (predicate, message))
        r.cel = cel_text
        return r


def cel(predicate: Callable[[Any], bool], message: str, rule: str) -> Rule:
    """A rule checked in Python by ``predicate``, published in the CRD as the CEL ``rule``."""
    return Rule(predicate, message, rule)


def rule_cel(rule: Any) -> str | None:
    """The CEL text of a rule, or None for a bare ``(predicate, message)`` pair."""
    return getattr(rule, "cel", None)


def attach_cel(root: Node, table: dict[str, str]) -> Node:
    """Give every bare ``(predicate, message)`` rule under ``root`` the CEL text ``table[message]``.

    For modules that keep upstream's CEL in one table beside their Python rules rather
    than at each rule. Rules already written with :func:`cel`, and messages the table
    does not name, are left as they are (:mod:`karpy.api.crds` refuses a rule without CEL).
    """
    seen: set[int] = set()

    def fix(rules: tuple) -> tuple:
        return tuple(
            r if rule_cel(r) is not None or r[1] not in table else Rule(r[0], r[1], table[r[1]]) for r in rules
        )

    def visit(n: Node | None) -> None:
        if n is None or id(n) in seen:
            return
        seen.add(id(n))
        n.rules = fix(n.rules)
        n.item_rules = fix(n.item_rules)
        for sub in (n.props or {}).values():
            visit(sub)
        visit(n.additional)
        visit(n.item)

    visit(root)
    return root


# --- constructors -----------------------------------------------------------


def obj(props: dict[str, Node] | None = None, **kw: Any) -> Node:
    return Node("object", props=props or {}, **kw)


def mapping(values: Node, **kw: Any) -> Node:
    return Node("object", props={}, additional=values, **kw)


def opaque(**kw: Any) -> Node:
    """Anything goes (x-kubernetes-preserve-unknown-fields)."""
    return Node("any", **kw)


def opaque_obj(**kw: Any) -> Node:
    return Node("object", props={}, preserve=True, **kw)


def arr(item: Node, **kw: Any) -> Node:
    return Node("array", item=item, **kw)


def string(**kw: Any) -> Node:
    return Node("string", **kw)


def integer(**kw: Any) -> Node:
    return Node("integer", **kw)


def int32(**kw: Any) -> Node:
    return Node("integer", fmt="int32", **kw)


def int64(**kw: Any) -> Node:
    return Node("integer", fmt="int64", **kw)


def number(**kw: Any) -> Node:
    return Node("number", **kw)


def boolean(**kw: Any) -> Node:
    return Node("boolean", **kw)


def quantity(**kw: Any) -> Node:
    return Node("quantity", **kw)


def int_or_string(**kw: Any) -> Node:
    return Node("int-or-string", **kw)


def string_map(**kw: Any) -> Node:
    return mapping(string(), **kw)


def quantity_map(**kw: Any) -> Node:
    """A ResourceList: resource name to quantity, each within the int64 range of its unit."""
    kw["checks"] = (check_quantity_range, *kw.get("checks", ()))
    return mapping(quantity(), **kw)


def check_duration_range(v: Any, path: str, ctx: Ctx) -> None:
    """A duration the field's pattern accepts must also fit in a Go time.Duration (int64 nanoseconds).

    The CRDs only give a pattern; Karpenter then parses the value with time.ParseDuration, which
    refuses anything longer than 2562047h47m16.854775807s.
    """
    if not isinstance(v, str) or v == "Never":
        return
    try:
        parse_duration(v)
    except DurationRangeError as e:
        ctx.err(path, invalid(v, str(e).split(": ", 1)[-1]))
    except ValueError:
        pass  # not a duration at all: the pattern reports it


def quantity_value(v: Any, crd: bool) -> Fraction | None:
    """The value of a quantity the schema accepts, or None when it is not one (reported elsewhere)."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        return None
    if isinstance(v, float) and (crd or not math.isfinite(v)):
        return None
    if crd and isinstance(v, str) and not _CRD_QUANTITY.search(v):
        return None
    try:
        return parse_quantity(v)
    except ValueError:
        return None


def check_quantity_range(m: Any, path: str, ctx: Ctx) -> None:
    """Every quantity of a ResourceList must fit in an int64 of its unit (see karpy.resources)."""
    if not isinstance(m, dict):
        return
    for name, raw in m.items():
        q = quantity_value(raw, ctx.crd)
        if q is None:
            continue
        problem = quantity_range_error(str(name), q)
        if problem:
            ctx.err(child(path, str(name)), invalid(raw, problem))


# --- the walker -------------------------------------------------------------


def _type_ok(v: Any, t: str, n: Node, crd: bool) -> bool:
    if t == "any":
        return True
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    if t == "string":
        return isinstance(v, str)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "quantity":
        if isinstance(v, bool):
            return False
        if isinstance(v, (int, str)):
            return True
        return isinstance(v, float) and not crd
    if t == "int-or-string":
        return isinstance(v, (int, str)) and not isinstance(v, bool)
    return True


_INTEGRAL_TYPES = frozenset({"integer", "quantity", "int-or-string"})

_TYPE_NAMES = {"quantity": "integer,string", "int-or-string": "integer,string"}


def _type_error(v: Any, n: Node, path: str, ctx: Ctx) -> None:
    want = _TYPE_NAMES.get(n.type, n.type)
    got = json_type(v)
    if ctx.crd:
        ctx.err(path, f'Invalid value: "{got}": {path} in body must be of type {want}: "{got}"')
        ctx.blocking = True
    else:
        ctx.err(path, f"Invalid value: {fmt_value(v)}: must be of type {want}, got {got}")


def _bound_msg(ctx: Ctx, path: str, what: str) -> str:
    return f"{path} in body {what}" if ctx.crd else what.replace("should be", "must be")


def walk_interpreted(v: Any, n: Node, path: str, ctx: Ctx) -> Any:
    """What ``walk`` does, read straight from the schema node by node: the reference the compiled
    validators are tested against (tests/test_schema_compiled.py), and the definition of each rule."""
    t = n.type
    if isinstance(v, float) and t in _INTEGRAL_TYPES and v.is_integer():
        # YAML "2.0" reaches the API server as JSON 2: an integer
        v = int(v)
    if not _type_ok(v, t, n, ctx.crd):
        _type_error(v, n, path, ctx)
        return v
    if n.defaulter is not None:
        ctx.run(n.defaulter, v, ctx)
    if t == "object":
        _walk_object(v, n, path, ctx)
    elif t == "array":
        _walk_array(v, n, path, ctx)
    elif t == "string":
        _check_string(v, n, path, ctx)
    elif t in ("integer", "number"):
        _check_number(v, n, path, ctx)
    elif t == "quantity":
        _check_quantity(v, n, path, ctx)
    elif t == "int-or-string" and isinstance(v, str):
        _check_string(v, n, path, ctx)
    elif t == "boolean" and n.enum is not None and v not in n.enum:
        ctx.err(path, not_supported(v, n.enum))
    for rule, message in n.rules:
        if not _rule_ok(rule, v):
            # a custom resource's failed rule shows the type of its schema, as kube-apiserver's CEL validator
            ctx.cel_err(path, f'Invalid value: "{_SCHEMA_TYPES.get(t, "")}": {message}' if ctx.crd
                        else f"Invalid value: {cel_value(v)}: {message}")
    if n.item_rules and ctx.crd and isinstance(v, (list, dict)):
        # a CEL rule self.all(x, P(x)) fails once, on the list or map that holds the failing items
        for rule, message in n.item_rules:
            items = v if isinstance(v, list) else list(v)
            if not all(_rule_ok(rule, x) for x in items):
                ctx.cel_err(path, f'Invalid value: "{"array" if isinstance(v, list) else "object"}": {message}')
    elif n.item_rules:
        # a rule of every item, reported at the item (or map key) that fails it
        if isinstance(v, list):
            for i, x in enumerate(v):
                for rule, message in n.item_rules:
                    if not _rule_ok(rule, x):
                        ctx.err(index(path, i), f"Invalid value: {cel_value(x)}: {message}")
        elif isinstance(v, dict):
            for k in v:
                for rule, message in n.item_rules:
                    if not _rule_ok(rule, k):
                        ctx.err(child(path, k), f"Invalid value: {cel_value(k)}: {message}")
    for check in n.checks:
        ctx.run(check, v, path, ctx)
    return v


def _rule_ok(rule: Callable[[Any], bool], v: Any) -> bool:
    try:
        return bool(rule(v))
    except Exception:  # noqa: BLE001 - a rule on malformed input is skipped (CEL would error), not fatal
        return True


def _walk_object(v: dict, n: Node, path: str, ctx: Ctx) -> None:
    props = n.props or {}
    # null means absent (the API server prunes nulls of non-nullable fields)
    nulls = [k for k, x in v.items() if x is None]
    for k in nulls:
        del v[k]
    for k, sub in props.items():
        if sub.default is not NO_DEFAULT and k not in v:
            v[k] = copy.deepcopy(sub.default)
    additional = n.additional
    for k in list(v.keys()):
        sub = props.get(k)
        if sub is None:
            sub = additional
            if sub is None:
                if not n.preserve:
                    p = child(path, k)
                    ctx.err(p, "field not declared in schema" if ctx.crd else f'unknown field "{p}"')
                continue
        v[k] = walk_interpreted(v[k], sub, child(path, k), ctx)
    for k in n.required:
        if k not in v:
            ctx.err(child(path, k), required())
    if n.max_props is not None and len(v) > n.max_props:
        ctx.err(path, too_many(len(v), n.max_props))


def _walk_array(v: list, n: Node, path: str, ctx: Ctx) -> None:
    item = n.item
    if item is not None:
        for i, x in enumerate(v):
            if x is None and item.type != "any":
                _type_error(x, item, index(path, i), ctx)
                continue
            v[i] = walk_interpreted(x, item, index(path, i), ctx)
    _check_array(v, n, path, ctx, ctx.crd)


def _check_array(v: list, n: Node, path: str, ctx: Ctx, crd: bool) -> None:
    """An array's own bounds and uniqueness (maxItems, minItems, x-kubernetes-list-type set or map), after its items:
    one definition for the interpreter and the compiled validators."""
    if n.max_items is not None and len(v) > n.max_items:
        ctx.err(path, too_many(len(v), n.max_items))
    if n.min_items is not None and len(v) < n.min_items:
        if crd:
            ctx.err(path, f"Invalid value: {len(v)}: {path} in body should have at least {n.min_items} items")
        else:
            ctx.err(path, required(f"must have at least {n.min_items} item{'s' if n.min_items != 1 else ''}"))
    if n.list_type == "set":
        seen: set = set()
        for i, x in enumerate(v):
            key = json.dumps(x, sort_keys=True) if isinstance(x, (dict, list)) else (type(x).__name__, x)
            if key in seen:
                ctx.err(index(path, i), duplicate(x))
            seen.add(key)
    elif n.list_type == "map" and n.map_keys:
        seen_keys: set = set()
        for i, x in enumerate(v):
            if not isinstance(x, dict):
                continue
            key = tuple(json.dumps(x.get(k), sort_keys=True) for k in n.map_keys)
            if key in seen_keys:
                ctx.err(index(path, i), duplicate({k: x.get(k) for k in n.map_keys}))
            seen_keys.add(key)


def _check_string(v: str, n: Node, path: str, ctx: Ctx) -> None:
    if n.enum is not None and v not in n.enum:
        ctx.err(path, not_supported(v, n.enum))
        return
    if n.max_len is not None and len(v) > n.max_len:
        ctx.err(path, f"Too long: may not be more than {n.max_len} bytes")
    if n.min_len is not None and len(v) < n.min_len:
        if ctx.crd:
            ctx.err(path, f"Invalid value: {fmt_value(v)}: {path} in body should be at least {n.min_len} chars long")
        else:
            ctx.err(path, required() if not v else invalid(v, f"must be at least {n.min_len} characters"))
    if n.pattern is not None and not n.pattern.search(v):
        ctx.err(path, f"Invalid value: {fmt_value(v)}: {_bound_msg(ctx, path, 'should match')} '{n.pattern_src}'")
    if n.fmt == "date-time" and not is_rfc3339(v):
        if ctx.crd:
            ctx.err(path, f"Invalid value: {fmt_value(v)}: {path} in body must be of type date-time: {fmt_value(v)}")
        else:
            ctx.err(path, invalid(v, 'must be an RFC 3339 date-time such as "2026-01-01T00:00:00Z"'))


def _check_number(v: int | float, n: Node, path: str, ctx: Ctx) -> None:
    if isinstance(v, float) and not math.isfinite(v):
        ctx.err(path, invalid(v, "must be a finite number"))
        return
    if n.enum is not None and v not in n.enum:
        ctx.err(path, not_supported(v, n.enum))
        return
    lo, hi = n.minimum, n.maximum
    if n.fmt == "int32":
        lo = INT32[0] if lo is None else lo
        hi = INT32[1] if hi is None else hi
    elif n.fmt == "int64":
        lo = INT64[0] if lo is None else lo
        hi = INT64[1] if hi is None else hi
    if lo is not None and v < lo:
        ctx.err(path, f"Invalid value: {fmt_value(v)}: {_bound_msg(ctx, path, 'should be greater than or equal to')} {lo}")
    if hi is not None and v > hi:
        ctx.err(path, f"Invalid value: {fmt_value(v)}: {_bound_msg(ctx, path, 'should be less than or equal to')} {hi}")


def _check_quantity(v: Any, n: Node, path: str, ctx: Ctx) -> None:
    if ctx.crd:
        if isinstance(v, str) and not _CRD_QUANTITY.search(v):
            ctx.err(path, f"Invalid value: {fmt_value(v)}: {path} in body should match '{CRD_QUANTITY_PATTERN}'")
            return
        try:
            parse_quantity(v)
        except ValueError:
            # the CRD pattern lets "1e1.5" through; Karpenter then cannot decode it as a resource.Quantity
            ctx.err(path, invalid(v, QUANTITY_REGEX_MSG))
        return
    try:
        q = parse_quantity(v)
    except ValueError:
        ctx.err(path, invalid(v, QUANTITY_REGEX_MSG))
        return
    if n.minimum is not None and q < n.minimum:
        ctx.err(path, invalid(v, f"must be greater than or equal to {n.minimum}"))


# --- compiled validators ----------------------------------------------------
#
# ``walk`` runs a validator made once per schema node (and per CRD or built-in wording): closures that hold
# what the node asks for (its properties with their paths, defaults, bounds, rules) instead of reading the
# node at every value. A node that accepts anything and has no hooks is no work at all, and its values are
# not visited. The result and the errors, in their order, are walk_interpreted's.

_GENERATION = 0  # bumped when a node that has validators is changed: every validator is made again


class _CompiledNode(Node):
    """The class of a node once validators are made from it: changing it afterwards discards them."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        global _GENERATION
        _GENERATION += 1
        object.__setattr__(self, name, value)


def walk(v: Any, n: Node, path: str, ctx: Ctx) -> Any:
    """Validate ``v`` against ``n`` (applying defaults in place); returns the value."""
    fns = n._fns
    crd = 2 if ctx.crd else 1
    if fns is None or fns[0] != _GENERATION or fns[crd] is None:
        _compiled(n, ctx.crd, {})
        fns = n._fns
    return fns[crd](v, path, ctx)  # type: ignore[index]


_Validator = Callable[[Any, str, Ctx], Any]


def _identity(v: Any, path: str, ctx: Ctx) -> Any:
    return v


def _compiled(n: Node, crd: bool, made: dict[int, _Validator]) -> _Validator:
    """The validator of ``n`` (``made``: those of this pass, by node, for schemas that share or nest nodes)."""
    fns = n._fns
    slot = 2 if crd else 1
    if fns is not None and fns[0] == _GENERATION and fns[slot] is not None:
        return fns[slot]
    fn = made.get(id(n))
    if fn is not None:
        return fn
    later: list[_Validator] = []
    made[id(n)] = lambda v, path, ctx: later[0](v, path, ctx)  # a schema that holds itself
    fn = _make(n, crd, made) or _identity
    later.append(fn)
    made[id(n)] = fn
    fns = n._fns
    if fns is None or fns[0] != _GENERATION:
        fns = [_GENERATION, None, None]
    fns[slot] = fn
    object.__setattr__(n, "_fns", fns)
    if type(n) is Node:
        object.__setattr__(n, "__class__", _CompiledNode)
    return fn


def _does_nothing(n: Node) -> bool:
    """Whether the node accepts every value as it is (then its values are not visited)."""
    return n.type == "any" and n.defaulter is None and not n.rules and not n.item_rules and not n.checks


def _child_validator(n: Node, crd: bool, made: dict[int, _Validator]) -> _Validator | None:
    """The validator of a child node, or None when the node does nothing."""
    return None if _does_nothing(n) else _compiled(n, crd, made)


_ATOMIC = (str, int, float, bool, type(None))


def _default_copier(d: Any) -> Callable[[], Any]:
    if type(d) in _ATOMIC:
        return lambda: d
    if type(d) is dict and not d:
        return dict
    if type(d) is list and not d:
        return list
    return lambda: copy.deepcopy(d)


def _type_test(t: str, crd: bool) -> Callable[[Any], bool] | None:
    """The type test of a node type (None: every value is of it)."""
    if t == "object":
        return lambda v: isinstance(v, dict)
    if t == "array":
        return lambda v: isinstance(v, list)
    if t == "string":
        return lambda v: isinstance(v, str)
    if t == "boolean":
        return lambda v: isinstance(v, bool)
    if t == "any" or t not in ("integer", "number", "quantity", "int-or-string"):
        return None
    return lambda v: _type_ok(v, t, None, crd)  # type: ignore[arg-type]


def _make(n: Node, crd: bool, made: dict[int, _Validator]) -> _Validator | None:
    """The validator of one node, or None when it accepts every value as it is."""
    if _does_nothing(n):
        return None
    t = n.type
    finish = _finisher(n, crd)
    defaulter = n.defaulter
    if t == "object":
        body = _object_body(n, crd, made)
    elif t == "array":
        body = _array_body(n, crd, made)
    else:
        body = _scalar_body(n, t)
    run = Ctx.run

    if t in ("object", "array"):
        is_type = dict if t == "object" else list

        def validate_collection(v: Any, path: str, ctx: Ctx) -> Any:
            if not isinstance(v, is_type):
                _type_error(v, n, path, ctx)
                return v
            if defaulter is not None:
                run(ctx, defaulter, v, ctx)
            body(v, path, ctx)
            if finish is not None:
                finish(v, path, ctx)
            return v

        return _memoized(validate_collection) if n.memo and t == "object" else validate_collection

    type_ok = _type_test(t, crd)
    coerce = t in _INTEGRAL_TYPES

    def validate_value(v: Any, path: str, ctx: Ctx) -> Any:
        if coerce and isinstance(v, float) and v.is_integer():
            v = int(v)  # YAML "2.0" reaches the API server as JSON 2: an integer
        if type_ok is not None and not type_ok(v):
            _type_error(v, n, path, ctx)
            return v
        if defaulter is not None:
            run(ctx, defaulter, v, ctx)
        if body is not None:
            body(v, path, ctx)
        if finish is not None:
            finish(v, path, ctx)
        return v

    return validate_value


MEMO_SIZE = 4096  # values remembered per memo node (then it starts afresh)


def _memoized(validate: _Validator) -> _Validator:
    """``validate`` for a memo node's maps: a map equal to one validated before at the same path without
    errors becomes what that one became, a fresh copy, with no errors; so thousands of pods that share a spec
    have it validated once. Maps are compared by their ``marshal`` bytes (version 0: no shared references),
    which keep key order and tell lists from tuples and 1 from 1.0 and True, and exist only for plain types."""
    done: dict[tuple[str, bytes], dict] = {}  # (path, the map's marshal bytes) -> a private copy of the validated map

    def memo(v: Any, path: str, ctx: Ctx) -> Any:
        if DEBUG or type(v) is not dict:
            return validate(v, path, ctx)
        try:
            key = (path, marshal.dumps(v, 0))
        except ValueError:  # not plain data, or nested too deeply
            return validate(v, path, ctx)
        hit = done.get(key)
        if hit is not None:
            fresh = _tree_copy(hit)
            v.clear()
            v.update(fresh)
            return v
        errors, cel_errors = len(ctx.errors), len(ctx.cel_errors)
        out = validate(v, path, ctx)
        if out is v and len(ctx.errors) == errors and len(ctx.cel_errors) == cel_errors:
            try:
                kept = _tree_copy(v)
            except (_NotJSON, RecursionError):
                return out
            if len(done) >= MEMO_SIZE:
                done.clear()
            done[key] = kept
        return out

    return memo


class _NotJSON(Exception):
    pass


_LEAVES = frozenset({str, int, float, bool, type(None)})


def _tree_copy(v: Any) -> Any:
    """A copy of a JSON-shaped value: new maps and lists, the same (immutable) strings and numbers."""
    t = type(v)
    if t is dict:
        return {k: x if type(x) in _LEAVES else _tree_copy(x) for k, x in v.items()}
    if t is list:
        return [x if type(x) in _LEAVES else _tree_copy(x) for x in v]
    if t in _LEAVES:
        return v
    raise _NotJSON()


def _scalar_body(n: Node, t: str) -> Callable[[Any, str, Ctx], None] | None:
    """The checks of a scalar node's own keywords (enum, bounds, length, pattern, format)."""
    string_checked = (n.enum is not None or n.max_len is not None or n.min_len is not None or n.pattern is not None
                      or n.fmt == "date-time")
    if t == "string":
        if not string_checked:
            return None
        return lambda v, path, ctx: _check_string(v, n, path, ctx)
    if t == "int-or-string":
        if not string_checked:
            return None

        def check_int_or_string(v: Any, path: str, ctx: Ctx) -> None:
            if isinstance(v, str):
                _check_string(v, n, path, ctx)

        return check_int_or_string
    if t in ("integer", "number"):
        if n.enum is not None or n.minimum is not None or n.maximum is not None or n.fmt in ("int32", "int64"):
            return lambda v, path, ctx: _check_number(v, n, path, ctx)

        def check_finite(v: Any, path: str, ctx: Ctx) -> None:
            if isinstance(v, float):
                _check_number(v, n, path, ctx)

        return check_finite
    if t == "quantity":
        return lambda v, path, ctx: _check_quantity(v, n, path, ctx)
    if t == "boolean" and n.enum is not None:
        enum = n.enum

        def check_bool(v: Any, path: str, ctx: Ctx) -> None:
            if v not in enum:
                ctx.err(path, not_supported(v, enum))

        return check_bool
    return None


def _key_path(key: str) -> tuple[bool, str]:
    """How a property extends a path: (True, ".key") after a non-empty path (the key alone at the top),
    or (False, "[key]")."""
    if _IDENT.match(key):
        return True, "." + key
    return False, child("", key)


def _object_body(n: Node, crd: bool, made: dict[int, _Validator]) -> Callable[[dict, str, Ctx], None]:
    props = n.props or {}
    # per property: its validator (None: nothing to do), whether it is a name, and its path suffix
    known: dict[str, tuple[_Validator | None, bool, str]] = {}
    for k, sub in props.items():
        if sub is not None:
            known[k] = (_child_validator(sub, crd, made), *_key_path(k))
    defaults = [(k, _default_copier(sub.default)) for k, sub in props.items() if sub.default is not NO_DEFAULT]
    additional = n.additional
    extra = _child_validator(additional, crd, made) if additional is not None else None
    preserve = n.preserve
    required_keys = n.required
    max_props = n.max_props
    unknown = "field not declared in schema" if crd else None

    def walk_object(v: dict, path: str, ctx: Ctx) -> None:
        # null means absent (the API server prunes nulls of non-nullable fields)
        if None in v.values():
            for k in [k for k, x in v.items() if x is None]:
                del v[k]
        for k, make in defaults:
            if k not in v:
                v[k] = make()
        for k, x in list(v.items()):
            entry = known.get(k)
            if entry is not None:
                fn, name, suffix = entry
                if fn is not None:
                    v[k] = fn(x, (path + suffix if path else k) if name else path + suffix, ctx)
            elif additional is not None:
                if extra is not None:
                    v[k] = extra(x, child(path, k), ctx)
            elif not preserve:
                p = child(path, k)
                ctx.err(p, unknown or f'unknown field "{p}"')
        for k in required_keys:
            if k not in v:
                ctx.err(child(path, k), required())
        if max_props is not None and len(v) > max_props:
            ctx.err(path, too_many(len(v), max_props))

    return walk_object


def _array_body(n: Node, crd: bool, made: dict[int, _Validator]) -> Callable[[list, str, Ctx], None]:
    item = n.item
    fn = _child_validator(item, crd, made) if item is not None else None
    visit = item is not None and (fn is not None or item.type != "any")
    checks_array = n.max_items is not None or n.min_items is not None or n.list_type in ("set", "map")

    def walk_array(v: list, path: str, ctx: Ctx) -> None:
        if visit:
            for i, x in enumerate(v):
                if x is None and item.type != "any":  # type: ignore[union-attr]
                    _type_error(x, item, f"{path}[{i}]", ctx)  # type: ignore[arg-type]
                elif fn is not None:
                    v[i] = fn(x, f"{path}[{i}]", ctx)
        if checks_array:
            _check_array(v, n, path, ctx, crd)

    return walk_array


def _finisher(n: Node, crd: bool) -> Callable[[Any, str, Ctx], None] | None:
    """What runs after a node's own checks: its rules, its rules of every item, then its checks."""
    rules, item_rules, checks = n.rules, n.item_rules, n.checks
    if not rules and not item_rules and not checks:
        return None
    schema_type = _SCHEMA_TYPES.get(n.type, "")

    def finish(v: Any, path: str, ctx: Ctx) -> None:
        for rule, message in rules:
            if not _rule_ok(rule, v):
                # a custom resource's failed rule shows the type of its schema, as kube-apiserver's CEL validator
                ctx.cel_err(path, f'Invalid value: "{schema_type}": {message}' if crd
                            else f"Invalid value: {cel_value(v)}: {message}")
        if item_rules:
            if crd:
                if isinstance(v, (list, dict)):
                    # a CEL rule self.all(x, P(x)) fails once, on the list or map that holds the failing items
                    items = v if isinstance(v, list) else list(v)
                    for rule, message in item_rules:
                        if not all(_rule_ok(rule, x) for x in items):
                            ctx.cel_err(path, f'Invalid value: "{"array" if isinstance(v, list) else "object"}": '
                                              f"{message}")
            elif isinstance(v, list):
                # a rule of every item, reported at the item (or map key) that fails it
                for i, x in enumerate(v):
                    for rule, message in item_rules:
                        if not _rule_ok(rule, x):
                            ctx.err(index(path, i), f"Invalid value: {cel_value(x)}: {message}")
            elif isinstance(v, dict):
                for k in v:
                    for rule, message in item_rules:
                        if not _rule_ok(rule, k):
                            ctx.err(child(path, k), f"Invalid value: {cel_value(k)}: {message}")
        for check in checks:
            ctx.run(check, v, path, ctx)

    return finish


def is_rfc3339(v: str) -> bool:
    """The OpenAPI ``date-time`` format: an RFC 3339 date-time (see :mod:`karpy.timeutil`)."""
    return _is_rfc3339(v)


def check_time_range(v: Any, path: str, ctx: Ctx) -> None:
    """A ``date-time`` karpy reads must name an instant it can represent (years 0001-9999 in UTC)."""
    if not isinstance(v, str) or not _is_rfc3339(v):
        return  # the date-time format reports it
    try:
        _parse_rfc3339(v)
    except ValueError as e:
        ctx.err(path, invalid(v, str(e)))


def parse_rfc3339(v: str) -> datetime:
    """Parse an RFC 3339 timestamp ("2026-01-01T00:00:00Z") to an aware UTC datetime; raises ValueError."""
    return datetime.fromtimestamp(_parse_rfc3339(v), tz=timezone.utc)


# --- helpers for checks -----------------------------------------------------


def get(d: Any, *keys: str, default: Any = None) -> Any:
    """Nested dict lookup that tolerates wrong types."""
    cur = d
    for k in keys:
        if not isinstance(cur, dict):
            return default
        cur = cur.get(k)
        if cur is None:
            return default
    return cur


def hkey(*vals: Any) -> tuple:
    """A hashable stand-in for values that may be lists or maps in malformed input."""
    return tuple(
        v if v is None or isinstance(v, (str, int, float, bool)) else json.dumps(v, sort_keys=True, default=str)
        for v in vals
    )


def as_list(v: Any) -> list:
    return v if isinstance(v, list) else []


def as_dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def is_str(v: Any) -> bool:
    return isinstance(v, str)


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
