"""Label and field selectors in the string form list and watch take (``app=web,tier in (a,b),!canary``)."""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from .errors import BadRequest

Predicate = Callable[[Mapping[str, str]], bool]

_SET_EXPR = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_CMP_EXPR = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=|>|<)\s*([A-Za-z0-9_.-]*)\s*$")


def _split(s: str) -> list[str]:
    """Split on commas outside parentheses."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [p for p in out if p.strip()]


def parse_label_selector(s: str | None) -> Predicate:
    """A predicate over a label map; BadRequest for a malformed selector."""
    if not s or not s.strip():
        return lambda labels: True
    tests: list[Predicate] = []
    for part in _split(s):
        m = _CMP_EXPR.match(part)
        if m:
            key, op, value = m.groups()
            if op in ("=", "=="):
                tests.append(lambda l, k=key, v=value: l.get(k) == v)
            elif op == "!=":
                tests.append(lambda l, k=key, v=value: l.get(k) != v)
            else:
                try:
                    n = int(value)
                except ValueError:
                    raise BadRequest(f"unable to parse requirement: for 'gt', 'lt' operators, the value must be an integer: {value}")
                if op == ">":
                    tests.append(lambda l, k=key, n=n: _int(l.get(k)) is not None and _int(l.get(k)) > n)
                else:
                    tests.append(lambda l, k=key, n=n: _int(l.get(k)) is not None and _int(l.get(k)) < n)
            continue
        m = _SET_EXPR.match(part)
        if not m:
            raise BadRequest(f"unable to parse requirement: found '{part.strip()}', expected: a valid label selector")
        neg, key, op, values = m.groups()
        if op:
            if neg:
                raise BadRequest(f"unable to parse requirement: found '!', expected: identifier")
            vals = {v.strip() for v in values.split(",") if v.strip()}
            if op == "in":
                tests.append(lambda l, k=key, vs=vals: l.get(k) in vs)
            else:
                tests.append(lambda l, k=key, vs=vals: l.get(k) not in vs)
        elif neg:
            tests.append(lambda l, k=key: k not in l)
        else:
            tests.append(lambda l, k=key: k in l)
    return lambda labels: all(t(labels) for t in tests)


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def selector_to_string(selector: Mapping[str, Any] | None) -> str:
    """The string form of a ``metav1.LabelSelector`` (what kubectl and clients send)."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or ():
        op, key, vals = e.get("operator"), e.get("key"), ",".join(e.get("values") or ())
        if op == "In":
            parts.append(f"{key} in ({vals})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({vals})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string value of a dotted field path (``spec.nodeName``); "" when absent."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
        if cur is None:
            return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(s: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate over a whole object for ``metadata.name=x,spec.nodeName!=``-style selectors."""
    if not s or not s.strip():
        return lambda obj: True
    tests = []
    for part in _split(s):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise BadRequest(f"invalid field selector: '{part.strip()}'")
        path, op, value = m.groups()
        if op == "!=":
            tests.append(lambda o, p=path, v=value: field_value(o, p) != v)
        else:
            tests.append(lambda o, p=path, v=value: field_value(o, p) == v)
    return lambda obj: all(t(obj) for t in tests)
