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


def _flag(v: Any) -> str:
    return "true" if v is True else "false"


def _pod_ip(status: Mapping[str, Any]) -> str:
    ips = status.get("podIPs") or ()
    first = ips[0] if ips and isinstance(ips[0], Mapping) else {}
    return str(first.get("ip") or status.get("podIP") or "")


# fields whose selectable value is computed, as kube-apiserver's ToSelectableFields computes it
_COMPUTED: dict[tuple[str, str], Callable[[Mapping[str, Any]], str]] = {
    ("Pod", "spec.hostNetwork"): lambda o: _flag((o.get("spec") or {}).get("hostNetwork")),
    ("Pod", "status.podIP"): lambda o: _pod_ip(o.get("status") or {}),
    ("Pod", "status.podIPs"): lambda o: "",
    ("Node", "spec.unschedulable"): lambda o: _flag((o.get("spec") or {}).get("unschedulable")),
    ("Event", "source"): lambda o: str(((o.get("source") or {}).get("component")) or o.get("reportingComponent") or ""),
    ("Job", "status.successful"): lambda o: str((o.get("status") or {}).get("successful") or 0),
}


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string value of a dotted field path (``spec.nodeName``); "" when absent."""
    computed = _COMPUTED.get((obj.get("kind", ""), path))
    if computed is not None:
        return computed(obj)
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


def _split_terms(s: str) -> list[str]:
    """Split on commas not escaped with a backslash."""
    terms, start, escaped = [], 0, False
    for i, ch in enumerate(s):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(s[start:i])
            start = i + 1
    terms.append(s[start:])
    return terms


def _unescape_value(v: str) -> str:
    if not any(c in v for c in "\\,="):
        return v
    out, escaped = [], False
    for ch in v:
        if escaped:
            if ch not in "\\,=":
                raise BadRequest(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            raise BadRequest(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if escaped:
        raise BadRequest("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def escape_field_value(v: str) -> str:
    """A value written into a field selector (``\\``, ``,`` and ``=`` escaped)."""
    return v.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def field_selector_terms(s: str | None) -> list[tuple[str, str, str]]:
    """(field, operator, value) of each term of a field selector, parsed as kube-apiserver parses one: terms
    sorted, the first ``!=``, ``==`` or ``=`` splits a term, values unescaped (``\\,``); kube-apiserver's
    BadRequest for what it cannot parse."""
    if not s:
        return []
    out = []
    for part in sorted(_split_terms(s)):
        if part == "":
            continue
        for i in range(len(part)):
            op = next((o for o in ("!=", "==", "=") if part.startswith(o, i)), None)
            if op is not None:
                out.append((part[:i], "!=" if op == "!=" else "=", _unescape_value(part[i + len(op):])))
                break
        else:
            raise BadRequest(f"invalid selector: '{s}'; can't understand '{part}'")
    return out


def parse_field_selector(s: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate over a whole object for ``metadata.name=x,spec.nodeName!=``-style selectors."""
    if not s or not s.strip():
        return lambda obj: True
    tests = []
    for path, op, value in field_selector_terms(s):
        path, value = path.strip(), value.strip()
        if op == "!=":
            tests.append(lambda o, p=path, v=value: field_value(o, p) != v)
        else:
            tests.append(lambda o, p=path, v=value: field_value(o, p) == v)
    return lambda obj: all(t(obj) for t in tests)
