"""Label and field selectors in the string form list and watch take (``app=web,tier in (a,b),!canary``)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .errors import BadRequest

Predicate = Callable[[Mapping[str, str]], bool]

# --- label selectors, parsed as kube-apiserver parses them (with its error messages) ------------------------

_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
_TOKENS = {")": "close", ",": "comma", "!": "not", "==": "eqeq", "=": "eq", ">": "gt", "in": "in", "<": "lt",
           "!=": "neq", "notin": "notin", "(": "open"}
_BINARY = "in, notin, =, ==, !=, gt, lt"


def _lex(s: str) -> list[tuple[str, str]]:
    """(token, literal) pairs ending with ("end", ""); the words ``in`` and ``notin`` are tokens of their own."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(s)
    while True:
        while i < n and s[i] in _WHITESPACE:
            i += 1
        if i >= n:
            out.append(("end", ""))
            return out
        if s[i] in _SPECIAL:  # an operator: "==" and "!=" are the only two-character ones
            lit = s[i:i + 2] if s[i:i + 2] in _TOKENS else s[i]
            out.append((_TOKENS[lit], lit))
            i += len(lit)
            continue
        j = i
        while j < n and s[j] not in _SPECIAL and s[j] not in _WHITESPACE:
            j += 1
        word = s[i:j]
        out.append((_TOKENS.get(word, "id") if word in ("in", "notin") else "id", word))
        i = j


class _SelectorError(Exception):
    pass


def _field_error(path: str, value: str, detail: str) -> str:
    shown = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{path}: Invalid value: {shown}: {detail}"


def _aggregate(errors: list[str]) -> str:
    seen: list[str] = []
    for e in errors:
        if e not in seen:
            seen.append(e)
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


class _LabelParser:
    def __init__(self, s: str):
        self.items = _lex(s)
        self.pos = 0

    def look(self, values: bool = True) -> tuple[str, str]:
        tok, lit = self.items[self.pos]
        return ("id" if values and tok in ("in", "notin") else tok), lit

    def take(self, values: bool = True) -> tuple[str, str]:
        out = self.look(values)
        self.pos += 1
        return out

    def parse(self) -> list[tuple[str, str, list[str]]]:
        reqs = []
        while True:
            tok, lit = self.look()
            if tok in ("id", "not"):
                try:
                    reqs.append(self.requirement())
                except _SelectorError as e:
                    raise BadRequest(f"unable to parse requirement: {e}") from None
                t, l = self.take()
                if t == "end":
                    return reqs
                if t == "comma":
                    t2, l2 = self.look()
                    if t2 not in ("id", "not"):
                        raise BadRequest(f"found '{l2}', expected: identifier after ','")
                    continue
                raise BadRequest(f"found '{l}', expected: ',' or 'end of string'")
            if tok == "end":
                return reqs
            raise BadRequest(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> tuple[str, str, list[str]]:
        op = ""
        tok, lit = self.take()
        if tok == "not":
            op = "!"
            tok, lit = self.take()
        if tok != "id":
            raise _SelectorError(f"found '{lit}', expected: identifier")
        key = lit
        from ..api.names import is_qualified_name

        bad = is_qualified_name(key)
        if bad:
            raise _SelectorError(_field_error("<nil>", key, "; ".join(bad)))
        if self.look()[0] in ("end", "comma") and op != "!":
            op = "exists"
        if op in ("!", "exists"):
            return self.checked(key, op, [])
        tok, lit = self.take(values=False)
        op = {"in": "in", "notin": "notin", "eq": "=", "eqeq": "==", "neq": "!=", "gt": ">", "lt": "<"}.get(tok, "")
        if not op:
            raise _SelectorError(f"found '{lit}', expected: {_BINARY}")
        return self.checked(key, op, self.set_values() if op in ("in", "notin") else self.exact_value())

    def set_values(self) -> list[str]:
        tok, lit = self.take()
        if tok != "open":
            raise _SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.look()
        if tok == "close":
            self.take()
            return [""]
        if tok not in ("id", "comma"):
            raise _SelectorError(f"found '{lit}', expected: ',', ')' or identifier")
        values: set[str] = set()
        while True:
            t, l = self.take()
            if t == "id":
                values.add(l)
                t2, l2 = self.look()
                if t2 == "comma":
                    continue
                if t2 == "close":
                    break
                raise _SelectorError(f"found '{l2}', expected: ',' or ')'")
            if t == "comma":
                if not values:
                    values.add("")
                t2, _ = self.look()
                if t2 == "close":
                    values.add("")
                    break
                if t2 == "comma":
                    self.take()
                    values.add("")
                continue
            raise _SelectorError(f"found '{l}', expected: ',', or identifier")
        if self.take()[0] != "close":
            raise _SelectorError(f"found '{lit}', expected: ')'")
        return sorted(values)

    def exact_value(self) -> list[str]:
        tok, _ = self.look()
        if tok in ("end", "comma"):
            return [""]
        tok, lit = self.take()
        if tok == "id":
            return [lit]
        raise _SelectorError(f"found '{lit}', expected: identifier")

    @staticmethod
    def checked(key: str, op: str, values: list[str]) -> tuple[str, str, list[str]]:
        from ..api.names import is_valid_label_value

        errs = []
        if op in (">", "<"):
            for i, v in enumerate(values):
                if _int(v) is None:
                    errs.append(_field_error(f"values[{i}]", v, "for 'Gt', 'Lt' operators, the value must be an integer"))
        for i, v in enumerate(values):
            bad = is_valid_label_value(v)
            if bad:
                errs.append(_field_error(f"values[{i}][{key}]", v, "; ".join(bad)))
        if errs:
            raise _SelectorError(_aggregate(errs))
        return key, op, values


def label_requirements(s: str | None) -> list[tuple[str, str, list[str]]]:
    """(key, operator, values) of each requirement of a label selector; operator one of ``=``, ``==``,
    ``!=``, ``in``, ``notin``, ``exists``, ``!``, ``>``, ``<``. BadRequest with kube-apiserver's message for
    what it would refuse."""
    if not s:
        return []
    return _LabelParser(s).parse()


def _requirement_test(key: str, op: str, values: list[str]) -> Predicate:
    if op in ("=", "=="):
        v = values[0]
        return lambda l: key in l and l[key] == v
    if op == "!=":
        v = values[0]
        return lambda l: l.get(key) != v
    if op == "in":
        vs = frozenset(values)
        return lambda l: key in l and l[key] in vs
    if op == "notin":
        vs = frozenset(values)
        return lambda l: l.get(key) not in vs
    if op == "exists":
        return lambda l: key in l
    if op == "!":
        return lambda l: key not in l
    n = int(values[0])
    if op == ">":
        return lambda l: _int(l.get(key)) is not None and _int(l.get(key)) > n
    return lambda l: _int(l.get(key)) is not None and _int(l.get(key)) < n


def parse_label_selector(s: str | None) -> Predicate:
    """A predicate over a label map; BadRequest for a malformed selector (kube-apiserver's messages)."""
    if not s or not s.strip():
        return lambda labels: True
    tests = [_requirement_test(k, op, vs) for k, op, vs in label_requirements(s)]
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
